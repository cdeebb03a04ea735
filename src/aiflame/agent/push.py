"""Sending the spool to a destination: aiflame server, or a Grafana Pyroscope.

One :class:`Sender` thread per destination takes its queue of the spool oldest first and
sends it (docs/fleet-protocol.md):

* profiles: ``POST /push.v1.PusherService/Push`` (Connect unary, ``application/proto``),
  a ``PushRequest`` of several profiles at once, each a ``RawProfileSeries`` whose labels
  are ``__name__`` (the profile type), ``service_name``, ``__delta__=false`` (the profile
  covers one period: the server must not subtract the previous one) and the workload
  labels, and one ``RawSample`` with the gzipped pprof and the profile's UUID (the server
  stores an id it already has once); or Pyroscope's older ``POST /ingest`` (``--pyroscope-api
  ingest``), one profile per request;
* profiles to an OpenTelemetry collector (``--otlp``): OTLP/HTTP, ``POST
  /v1development/profiles`` (or the URL's own path), a gzipped protobuf
  ``ExportProfilesServiceRequest`` of several profiles at once (proto/otlp_export.py), with
  the configured headers (auth);
* telemetry: ``POST /api/v1/telemetry`` (gzipped JSON), the server only;
* traces: ``POST /api/v1/traces`` with ``X-Aiflame-Trace-Id`` and ``X-Aiflame-Labels``.

An answer 2xx removes the entries from the queue; ``400``/``413`` (the destination will
never take it) drops it, counted (a batch is first retried one entry at a time, so that
only the bad entry is dropped); anything else (``429``, ``5xx``, no connection, a
timeout) keeps it and retries after a backoff of 1 s doubling to 5 min, with jitter,
honouring ``Retry-After``. Order is kept: nothing newer is sent past an entry that waits.
"""

from __future__ import annotations

import base64
import gzip
import http.client
import json
import random
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field

from aiflame.agent.spool import Entry, Spool
from aiflame.proto.pyroscope.push.v1 import push_pb2
from aiflame.proto.pyroscope.types.v1 import types_pb2
from aiflame.version import __version__

PUSH_PATH = "/push.v1.PusherService/Push"
INGEST_PATH = "/ingest"
TELEMETRY_PATH = "/api/v1/telemetry"
TRACES_PATH = "/api/v1/traces"
OTLP_PROFILES_PATH = "/v1development/profiles"
BACKOFF_START_S, BACKOFF_MAX_S = 1.0, 300.0
MAX_BATCH_ENTRIES, MAX_BATCH_BYTES = 32, 4 << 20
TIMEOUT_S = 30.0
USER_AGENT = "aiflame-agent"


@dataclass
class Destination:
    """Where a queue of the spool goes."""

    name: str  # the spool queue: "server" or "pyroscope"
    url: str
    kinds: frozenset[str] = frozenset({"profile", "telemetry", "trace"})
    api: str = "push"  # profiles: "push", "ingest" (Pyroscope's older API) or "otlp"
    token: str = ""  # Authorization: Bearer
    basic_user: str = ""  # HTTP basic auth (Grafana Cloud: the stack's user id)
    basic_password: str = ""
    tenant: str = ""  # X-Scope-OrgID
    ca_file: str = ""
    extra_headers: dict[str, str] = field(default_factory=dict)  # e.g. an OTLP backend's auth

    def headers(self) -> dict[str, str]:
        h = {"User-Agent": USER_AGENT}
        if self.basic_user or self.basic_password:
            pair = f"{self.basic_user}:{self.basic_password}".encode()
            h["Authorization"] = "Basic " + base64.b64encode(pair).decode()
        elif self.token:
            h["Authorization"] = f"Bearer {self.token}"
        if self.tenant:
            h["X-Scope-OrgID"] = self.tenant
        h.update(self.extra_headers)
        return h


@dataclass
class SenderStats:
    pushed: dict[str, int] = field(default_factory=dict)  # kind -> entries sent
    pushed_samples: int = 0
    failures: dict[str, int] = field(default_factory=dict)  # reason -> count
    last_error: str = ""
    last_success: float = 0.0

    def fail(self, reason: str, text: str) -> None:
        self.failures[reason] = self.failures.get(reason, 0) + 1
        self.last_error = text


class Rejected(Exception):
    """The destination refused the request for good (400, 413)."""


class Retry(Exception):
    """Try again later; ``after`` seconds if the destination said so."""

    def __init__(self, reason: str, text: str, after: float | None = None) -> None:
        super().__init__(text)
        self.reason = reason
        self.after = after


class HttpClient:
    """One keep-alive HTTP(S) connection to a base URL."""

    def __init__(self, url: str, ca_file: str = "", timeout: float = TIMEOUT_S) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url}")
        self.scheme, self.host, self.port = parts.scheme, parts.hostname, parts.port
        self.base = parts.path.rstrip("/")
        self.timeout = timeout
        self.context = (
            ssl.create_default_context(cafile=ca_file or None) if self.scheme == "https" else None
        )
        self._conn: http.client.HTTPConnection | None = None

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            if self.scheme == "https":
                self._conn = http.client.HTTPSConnection(
                    self.host, self.port, timeout=self.timeout, context=self.context
                )
            else:
                self._conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        return self._conn

    def request(
        self, method: str, path: str, body: bytes, headers: dict[str, str]
    ) -> tuple[int, dict[str, str], bytes]:
        conn = self._connection()
        try:
            conn.request(method, self.base + path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read(1 << 20)
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
        except (OSError, http.client.HTTPException) as e:
            self.close()
            raise Retry("connection", f"{self.host}: {e}") from None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def check(status: int, headers: dict[str, str], body: bytes) -> None:
    """Raise Rejected or Retry for an answer that is not a success."""
    if 200 <= status < 300:
        return
    text = body[:200].decode("utf-8", "replace").strip()
    if status in (400, 413, 422):
        raise Rejected(f"HTTP {status}: {text}")
    after = None
    if "retry-after" in headers:
        try:
            after = float(headers["retry-after"])
        except ValueError:
            after = None
    reason = "overloaded" if status in (429, 503) else "auth" if status in (401, 403) else "server"
    raise Retry(reason, f"HTTP {status}: {text}", after)


def series_labels(meta: dict[str, object]) -> list[tuple[str, str]]:
    """The series labels of a spooled profile, ``__name__`` first."""
    labels = dict(meta.get("labels") or {})  # type: ignore[call-overload]
    labels.setdefault("service_name", "unknown")
    pairs = [("__name__", str(meta.get("profile_type", "process_cpu"))), ("__delta__", "false")]
    pairs += sorted((str(k), str(v)) for k, v in labels.items() if not str(k).startswith("__"))
    return pairs


def push_request(items: list[tuple[Entry, bytes]]) -> bytes:
    """A binary ``push.v1.PushRequest`` of spooled profiles."""
    req = push_pb2.PushRequest()
    for entry, payload in items:
        series = req.series.add()
        for name, value in series_labels(entry.meta or {}):
            series.labels.append(types_pb2.LabelPair(name=name, value=value))
        series.samples.add(raw_profile=payload, ID=entry.id)
    return req.SerializeToString()


def otlp_endpoint(url: str) -> str:
    """The OTLP/HTTP profiles endpoint of ``url``: its own path, else the signal's path (as
    OpenTelemetry SDKs treat a base endpoint)."""
    parts = urllib.parse.urlsplit(url)
    if parts.path.strip("/"):
        return url
    return urllib.parse.urlunsplit(parts._replace(path=OTLP_PROFILES_PATH))


def otlp_request(items: list[tuple[Entry, bytes]]) -> bytes:
    """A gzipped OTLP ``ExportProfilesServiceRequest`` of spooled profiles."""
    from aiflame.proto.otlp_export import Item, export_request

    profiles = []
    for entry, payload in items:
        labels = dict((entry.meta or {}).get("labels") or {})  # type: ignore[call-overload]
        labels.setdefault("service_name", "unknown")
        profiles.append(Item(payload, {str(k): str(v) for k, v in labels.items()}, entry.id))
    try:
        request = export_request(profiles, __version__)
    except ValueError as e:
        raise Rejected(str(e)) from None
    return gzip.compress(request.SerializeToString(), compresslevel=6)


def otlp_partial(body: bytes) -> str:
    """What an OTLP answer says it refused ("" when it took everything)."""
    from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2

    try:
        answer = profiles_service_pb2.ExportProfilesServiceResponse.FromString(body)
    except Exception:
        return ""
    ps = answer.partial_success
    if ps.rejected_profiles:
        return f"{ps.rejected_profiles} profile(s) rejected: {ps.error_message[:200]}"
    return ""


def _number(value: object) -> float:
    return float(value) if isinstance(value, int | float) else 0.0


def ingest_query(entry: Entry) -> str:
    """Pyroscope's ``/ingest`` parameters: ``name=app.type{k=v,...}``, times, rate."""
    meta = entry.meta or {}
    labels = dict(meta.get("labels") or {})  # type: ignore[call-overload]
    app = _ingest_safe(str(labels.pop("service_name", "unknown")))
    tags = ",".join(f"{k}={_ingest_safe(str(v))}" for k, v in sorted(labels.items()))
    name = f"{app}.{meta.get('profile_type', 'process_cpu')}{{{tags}}}"
    start = _number(meta.get("start"))
    params = {
        "name": name,
        "format": "pprof",
        "from": str(int(start)),
        "until": str(int(start + _number(meta.get("duration")))),
        "spyName": "aiflame",
    }
    if meta.get("rate_hz"):
        params["sampleRate"] = str(meta["rate_hz"])
    return urllib.parse.urlencode(params)


def _ingest_safe(value: str) -> str:
    """Label values of the ``name`` parameter cannot hold its own syntax."""
    return "".join("_" if c in ",{}=" else c for c in value)[:256]


class Sender(threading.Thread):
    """Sends one destination's queue (see the module docstring)."""

    def __init__(
        self,
        spool: Spool,
        dest: Destination,
        stop: threading.Event,
        on_answer: Callable[[str, bytes], None] | None = None,
    ) -> None:
        super().__init__(name=f"aiflame-push-{dest.name}", daemon=True)
        self.spool = spool
        self.dest = dest
        self.stop_event = stop
        self.stats = SenderStats()
        self.client = HttpClient(dest.url, dest.ca_file)
        self.on_answer = on_answer
        self._backoff = 0.0
        self._single: set[str] = set()  # entries to send alone (their batch was refused)

    def run(self) -> None:
        while not self.stop_event.is_set():
            if not self.spool.wait(self.dest.name, 0.5):
                continue
            try:
                self.send_some()
            except Exception as e:  # a bug or an unreadable spool: keep the thread alive
                self.stats.fail("internal", f"{type(e).__name__}: {e}")
                self._backoff = self._next_backoff(None)
            if self._backoff:
                self.stop_event.wait(self._backoff)
        self.client.close()

    def send_some(self) -> bool:
        """Send the oldest entries once; True when they were taken or dropped."""
        head = self.spool.head(self.dest.name, MAX_BATCH_ENTRIES)
        if not head:
            return True
        batch = self._batch(head)
        try:
            return self._send_batch(batch)
        finally:
            for entry, _ in batch:
                entry.meta = None  # back on disk only

    def _send_batch(self, batch: list[tuple[Entry, bytes]]) -> bool:
        try:
            self._send(batch)
        except Rejected as e:
            self.stats.fail("rejected", str(e))
            if len(batch) > 1:
                self._single.update(x.id for x, _ in batch)
            else:
                self.spool.drop(batch[0][0], reason=f"rejected by {self.dest.name}: {e}")
            return True
        except Retry as e:
            self.stats.fail(e.reason, str(e))
            self._backoff = self._next_backoff(e.after)
            return False
        self._backoff = 0.0
        self.stats.last_success = time.time()
        for entry, _ in batch:
            self.stats.pushed[entry.kind] = self.stats.pushed.get(entry.kind, 0) + 1
            self.stats.pushed_samples += entry.samples
            self._single.discard(entry.id)
            self.spool.done(entry)
        return True

    def _batch(self, head: list[Entry]) -> list[tuple[Entry, bytes]]:
        """Profiles for the push API go together (up to a size); the rest one by one."""
        out: list[tuple[Entry, bytes]] = []
        size = 0
        for entry in head:
            try:
                payload = self.spool.read(entry)
                meta = self.spool.meta(entry)
            except (OSError, ValueError):
                self.spool.drop(entry, reason="payload unreadable")
                continue
            if entry.kind not in self.dest.kinds:
                self.spool.done(entry)  # not for this destination (e.g. a trace for Pyroscope)
                continue
            groupable = entry.kind == "profile" and self.dest.api in ("push", "otlp")
            alone = entry.id in self._single
            if out and (not groupable or alone or size + len(payload) > MAX_BATCH_BYTES):
                break
            entry.meta = meta  # while it is sent (this sender alone handles its queue)
            out.append((entry, payload))
            size += len(payload)
            if not groupable or alone:
                break
        return out

    def _send(self, batch: list[tuple[Entry, bytes]]) -> None:
        if not batch:
            return
        entry, payload = batch[0]
        headers = self.dest.headers()
        if entry.kind == "profile" and self.dest.api == "otlp":
            headers.update({"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"})
            status, h, body = self.client.request("POST", "", otlp_request(batch), headers)
            check(status, h, body)
            refused = otlp_partial(body)
            if refused:  # the rest was taken: the entries are done, the loss is counted
                self.stats.fail("partial", refused)
            return
        if entry.kind == "profile" and self.dest.api == "push":
            headers.update({"Content-Type": "application/proto", "Connect-Protocol-Version": "1"})
            status, h, body = self.client.request("POST", PUSH_PATH, push_request(batch), headers)
        elif entry.kind == "profile":
            headers["Content-Type"] = "application/octet-stream"
            path = f"{INGEST_PATH}?{ingest_query(entry)}"
            status, h, body = self.client.request("POST", path, payload, headers)
        elif entry.kind == "telemetry":
            headers.update({"Content-Type": "application/json", "Content-Encoding": "gzip"})
            status, h, body = self.client.request("POST", TELEMETRY_PATH, payload, headers)
        else:  # a trace
            meta = entry.meta or {}
            labels = json.dumps(meta.get("labels") or {}, ensure_ascii=True)
            headers.update(
                {
                    "Content-Type": "application/octet-stream",
                    "X-Aiflame-Trace-Id": entry.id,
                    "X-Aiflame-Labels": labels,
                }
            )
            if meta.get("request_id"):
                headers["X-Aiflame-Request-Id"] = str(meta["request_id"])
            status, h, body = self.client.request("POST", TRACES_PATH, payload, headers)
        check(status, h, body)
        if self.on_answer is not None:
            self.on_answer(entry.kind, body)

    def _next_backoff(self, after: float | None) -> float:
        base = min(BACKOFF_MAX_S, max(BACKOFF_START_S, self._backoff * 2))
        wait = base * random.uniform(0.8, 1.2)
        if after is not None:
            wait = max(wait, min(after, BACKOFF_MAX_S))
        return wait
