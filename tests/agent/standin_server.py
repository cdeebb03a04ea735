"""A stand-in for the ingest side of aiflame server / Grafana Pyroscope, on loopback: it
decodes what the agent sends with the real message definitions (Pyroscope's push.proto,
pprof's profile.proto), keeps it by idempotency id, and can be told to be down (refuse
connections), to answer 503, or to reject (400)."""

from __future__ import annotations

import gzip
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from aiflame.proto.pyroscope.google.v1 import profile_pb2
from aiflame.proto.pyroscope.push.v1 import push_pb2


@dataclass
class Received:
    profiles: dict[str, dict] = field(default_factory=dict)  # id -> labels, samples, type
    telemetry: dict[str, dict] = field(default_factory=dict)  # batch_id -> document
    traces: dict[str, dict] = field(default_factory=dict)  # trace id -> headers, bytes
    heartbeats: list[dict] = field(default_factory=list)
    ingest: list[dict] = field(default_factory=list)  # /ingest requests
    requests: int = 0
    duplicates: int = 0


def pprof_samples(raw: bytes) -> tuple[int, list[str], profile_pb2.Profile]:
    """(the first sample type's total, the sample types, the message) of a pprof."""
    data = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    msg = profile_pb2.Profile()
    msg.ParseFromString(data)
    types = [f"{msg.string_table[t.type]}/{msg.string_table[t.unit]}" for t in msg.sample_type]
    return sum(s.value[0] for s in msg.sample), types, msg


class StandIn:
    def __init__(self) -> None:
        self.got = Received()
        self.mode = "up"  # "up", "503", "400"
        self.heartbeat_answer: dict = {}
        self.lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, port: int = 0) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                status, answer = owner.handle(self.path, dict(self.headers), body)
                self.send_response(status)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        """Down: the port refuses connections until :meth:`start` again."""
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def handle(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
        with self.lock:
            self.got.requests += 1
            if self.mode == "503":
                return 503, b"overloaded"
            if self.mode == "400":
                return 400, b"bad"
            url = urlsplit(path)
            if url.path == "/push.v1.PusherService/Push":
                req = push_pb2.PushRequest()
                try:
                    req.ParseFromString(body)
                except Exception:
                    return 400, b"not a PushRequest"
                for series in req.series:
                    labels = {lp.name: lp.value for lp in series.labels}
                    for sample in series.samples:
                        if sample.ID in self.got.profiles:
                            self.got.duplicates += 1
                            continue
                        total, types, _ = pprof_samples(sample.raw_profile)
                        self.got.profiles[sample.ID] = {
                            "labels": labels,
                            "first_total": total,
                            "types": types,
                            "raw": sample.raw_profile,
                            "auth": headers.get("Authorization", ""),
                            "tenant": headers.get("X-Scope-OrgID", ""),
                        }
                return 200, b""
            if url.path == "/ingest":
                total, types, _ = pprof_samples(body)
                self.got.ingest.append(
                    {"query": parse_qs(url.query), "first_total": total, "types": types}
                )
                return 200, b""
            if url.path == "/api/v1/telemetry":
                data = gzip.decompress(body) if headers.get("Content-Encoding") == "gzip" else body
                doc = json.loads(data)
                if doc["batch_id"] in self.got.telemetry:
                    self.got.duplicates += 1
                self.got.telemetry[doc["batch_id"]] = doc
                return 200, b"{}"
            if url.path == "/api/v1/traces":
                tid = headers.get("X-Aiflame-Trace-Id", "")
                self.got.traces[tid] = {
                    "labels": json.loads(headers.get("X-Aiflame-Labels", "{}")),
                    "request_id": headers.get("X-Aiflame-Request-Id", ""),
                    "bytes": body,
                }
                return 200, json.dumps({"trace_id": tid, "status": "queued"}).encode()
            if url.path == "/api/v1/agents/heartbeat":
                self.got.heartbeats.append(json.loads(body))
                answer, self.heartbeat_answer = self.heartbeat_answer, {}
                return 200, json.dumps(answer).encode()
            return 404, b"no such endpoint"

    def cpu_samples(self) -> int:
        with self.lock:
            return sum(
                p["first_total"] for p in self.got.profiles.values()
                if p["labels"].get("__name__") == "process_cpu"
            )  # fmt: skip
