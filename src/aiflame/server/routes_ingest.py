"""Ingest endpoints: Pyroscope push and ``/ingest``, telemetry, traces, agent heartbeats."""

from __future__ import annotations

import hashlib
import re
import time
import uuid

import pyarrow as pa
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from aiflame.proto.pyroscope.push.v1 import push_pb2
from aiflame.server import connect, validate
from aiflame.server.bodies import GZIP_MAGIC, content_decoded, gunzip, read_body
from aiflame.server.errors import BadRequest
from aiflame.server.ingest import heartbeat as heartbeat_doc
from aiflame.server.ingest import legacy, telemetry
from aiflame.server.ingest.profiles import profile_item
from aiflame.server.ingest.push import (
    check_time,
    client_key,
    content_key,
    decode_pprof,
    push_items,
)
from aiflame.server.labels import TENANT_DEFAULT, check_labels
from aiflame.server.state import ServerState, run_ingest
from aiflame.server.store.wal import Record
from aiflame.server.store.writer import Work
from aiflame.server.traces import check_upload, trace_columns

_TENANT = re.compile(r"[a-zA-Z0-9!._*'()-]{1,150}\Z")
_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}\Z")
_MS = pa.timestamp("ms", tz="UTC")


def tenant_of(request: Request) -> str:
    """``X-Scope-OrgID`` (Pyroscope's tenant header), or ``?tenant=`` where a browser
    cannot set headers (the UI's flame graph frames); absent means ``anonymous``."""
    t = (request.headers.get("x-scope-orgid") or request.query_params.get("tenant") or "").strip()
    if not t:
        return TENANT_DEFAULT
    if not _TENANT.match(t) or t in (".", ".."):
        raise BadRequest(f"invalid X-Scope-OrgID {t[:60]!r}")
    return t


def _profile_works(items: list) -> list[Work]:
    return [
        Work(
            tables={},
            key=("profiles", it.tenant, it.profile_id),
            profile_items=[it],
            rows=int(it.row_value.size),
        )
        for it in items
    ]


def _encoding(body: bytes, encoding: str, limit: int) -> bytes:
    encoding = (encoding or "identity").strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding in ("gzip", "x-gzip"):
        return gunzip(body, limit)
    raise BadRequest(f"unsupported Content-Encoding {encoding!r} (use gzip or none)")


# -- decoding: a pure function of what was received (the request, or its WAL record) ------
def decode_push(state: ServerState, rec: Record) -> list[Work]:
    raw = _encoding(rec.body, rec.meta.get("encoding", ""), state.limits.max_profile_bytes)
    msg = connect.parse(push_pb2.PushRequest, raw, rec.meta.get("codec", "proto"))
    items = push_items(
        msg,  # type: ignore[arg-type]
        tenant=rec.tenant,
        received_ms=rec.received_ms,
        limits=state.limits,
        strings=state.strings,
        min_time_ms=state.retention_floor_ms("profiles"),
        dictionaries=state.dictionaries,
        request_key=rec.meta.get("request_key"),
    )
    return _profile_works(items)


def decode_ingest(state: ServerState, rec: Record) -> list[Work]:
    q = rec.meta
    _app, suffix, labels = legacy.parse_name(q.get("name", ""), state.limits.max_labels)
    fmt = (q.get("format") or "folded").lower()
    if fmt not in legacy.FORMATS:
        raise BadRequest(f"unknown format {fmt!r} (accepted: {', '.join(legacy.FORMATS)})")
    now = rec.received_ms / 1000
    start = validate.unix_seconds(q.get("from"), "from", now - 10)
    until = validate.unix_seconds(q.get("until"), "until", now)
    rate = validate.number(q.get("sampleRate") or 100, "sampleRate", 0.01, 1e6)
    if until < start:
        raise BadRequest("until must not be before from")
    validate.not_in_future(int(until * 1000), rec.received_ms, "until")
    if q.get("spyName"):
        labels.setdefault("spy_name", q["spyName"][:64])
    labels = legacy.name_labels(labels, suffix)
    raw = _encoding(rec.body, q.get("__encoding", ""), state.limits.max_profile_bytes)
    ctype = q.get("__content_type", "")
    if fmt == "pprof":
        data = legacy.multipart_profile(raw, ctype) if ctype.startswith("multipart/") else raw
        cols, known = decode_pprof(data, state.limits, state.strings, state.dictionaries)
    else:
        known = None
        if raw[:2] == GZIP_MAGIC:
            raw = gunzip(raw, state.limits.max_profile_bytes)
        cols = legacy.folded_columns(raw, fmt, suffix, rate, int(start * 1e9), int(until * 1e9))
        if cols.time_nanos <= 0:
            cols.time_nanos = rec.received_ms * 1_000_000
    item = profile_item(
        cols,
        labels,
        tenant=rec.tenant,
        profile_id=_ingest_id(rec, labels, start, raw),
        received_ms=rec.received_ms,
        pprof_bytes=len(rec.body),
        strings=state.strings,
        known=known,
    )
    check_time(item, state.retention_floor_ms("profiles"), rec.received_ms)
    return _profile_works([item])


def _ingest_id(rec: Record, labels: dict[str, str], start: float, raw: bytes) -> str:
    """An ``/ingest`` profile's identity: the client's ``Idempotency-Key`` within its labels
    (a retry with the key is stored once), else the request it came in (never merged with
    another client's identical bytes); a record of an older version: its content."""
    key = rec.meta.get("__idempotency_key")
    if key:
        h = hashlib.blake2b(digest_size=16)
        for k in sorted(labels):
            h.update(f"{k}\x00{labels[k]}\x01".encode())
        h.update(key.encode())
        return "key-" + h.hexdigest()
    if rec.meta.get("__request_key"):
        return rec.meta["__request_key"]
    return content_key({**labels, "__from": str(start)}, raw)


def decode_telemetry(state: ServerState, rec: Record) -> list[Work]:
    limit = state.limits.max_telemetry_bytes
    doc = telemetry.parse(_encoding(rec.body, rec.meta.get("encoding", ""), limit))
    if doc.end * 1000 < state.retention_floor_ms("telemetry"):
        raise BadRequest("telemetry older than the retention of telemetry")
    validate.not_in_future(int(doc.end * 1000), rec.received_ms, "end")
    tables = telemetry.tables(doc, rec.tenant, rec.received_ms, state.limits.max_labels)
    rows = sum(len(next(iter(t.values()))) for t in tables.values())
    return [Work(tables=tables, key=("telemetry_batches", rec.tenant, doc.batch_id), rows=rows)]


DECODERS = {
    "push": decode_push,
    "ingest": decode_ingest,
    "telemetry": decode_telemetry,
}


def _request_key() -> str:
    """The name of one received request (kept in its log record): the identity of the
    profiles it carries without a key of their own."""
    return "req-" + uuid.uuid4().hex


async def _accept(state: ServerState, rec: Record) -> list[Work]:
    """Decode (a bad request ends here as a 4xx), log, and hand to the writer."""
    works = await run_ingest(DECODERS[rec.kind], state, rec)
    state.accept(rec, works)
    return works


async def push(request: Request) -> Response:
    """``POST /push.v1.PusherService/Push`` (Connect, proto or JSON)."""
    state: ServerState = request.app.state.server
    codec = connect.codec_of(request)
    rec = Record(
        kind="push",
        tenant=tenant_of(request),
        received_ms=int(time.time() * 1000),
        meta={
            "codec": codec,
            "encoding": request.headers.get("content-encoding", ""),
            "request_key": _request_key(),
        },
        body=await read_body(request, state.limits.max_body_bytes),
    )
    works = await _accept(state, rec)
    state.counters.profiles += len(works)
    state.counters.samples += sum(w.rows for w in works)
    return connect.respond(push_pb2.PushResponse(), codec)


async def ingest(request: Request) -> Response:
    """``POST /ingest?name=app.cpu{k=v}&format=pprof|folded|lines&from&until&sampleRate``."""
    state: ServerState = request.app.state.server
    # (names beginning with "__" are the server's own, below)
    meta = {k: v for k, v in request.query_params.items() if not k.startswith("__")}
    meta["__content_type"] = request.headers.get("content-type", "")
    meta["__encoding"] = request.headers.get("content-encoding", "")
    meta["__request_key"] = _request_key()
    key = request.headers.get("idempotency-key")
    if key:
        meta["__idempotency_key"] = client_key(key.strip().strip('"'), "Idempotency-Key")
    rec = Record(
        kind="ingest",
        tenant=tenant_of(request),
        received_ms=int(time.time() * 1000),
        meta=meta,
        body=await read_body(request, state.limits.max_body_bytes),
    )
    works = await _accept(state, rec)
    state.counters.profiles += 1
    state.counters.samples += sum(w.rows for w in works)
    return Response(status_code=200)


async def post_telemetry(request: Request) -> Response:
    state: ServerState = request.app.state.server
    rec = Record(
        kind="telemetry",
        tenant=tenant_of(request),
        received_ms=int(time.time() * 1000),
        meta={"encoding": request.headers.get("content-encoding", "")},
        body=await read_body(request, state.limits.max_telemetry_bytes),
    )
    await _accept(state, rec)
    state.counters.telemetry += 1
    return JSONResponse({"status": "stored"})


async def post_trace(request: Request) -> Response:
    """``POST /api/v1/traces``: a trace file as written by the profiler, with labels."""
    state: ServerState = request.app.state.server
    tenant = tenant_of(request)
    trace_id = request.headers.get("x-aiflame-trace-id") or str(uuid.uuid4())
    if not _ID.match(trace_id):
        raise BadRequest("invalid X-Aiflame-Trace-Id")
    request_id = request.headers.get("x-aiflame-request-id", "")
    if request_id and not _ID.match(request_id):
        raise BadRequest("invalid X-Aiflame-Request-Id")
    labels: dict[str, str] = {}
    raw_labels = request.headers.get("x-aiflame-labels")
    if raw_labels:
        try:
            text = raw_labels.encode("latin-1").decode("utf-8")
        except UnicodeError:
            raise BadRequest("X-Aiflame-Labels is not UTF-8") from None
        parsed = validate.json_loads(text.encode(), "X-Aiflame-Labels")
        if not isinstance(parsed, dict):
            raise BadRequest("X-Aiflame-Labels is not a JSON object")
        labels = check_labels(
            [(str(k), str(v)) for k, v in parsed.items()], state.limits.max_labels
        )
    blob = await read_body(request, state.limits.max_trace_bytes)
    if request.headers.get("content-encoding", "").lower() in ("gzip", "x-gzip"):
        pass  # stored as it came: the readers inflate gzip by its magic bytes
    fmt = await run_ingest(check_upload, blob, 8 * state.limits.max_trace_bytes, state.tmpdir)
    now_ms = int(time.time() * 1000)
    row = {
        "tenant": tenant,
        "trace_id": trace_id,
        "received": now_ms,
        "labels": labels,
        "request_id": request_id,
        "format": fmt,
        "bytes": len(blob),
    }
    tables = {
        "trace_blobs": {
            "tenant": [tenant],
            "trace_id": [trace_id],
            "received": pa.array([now_ms], _MS),
            "blob": pa.array([blob], pa.binary()),
        },
        "traces": trace_columns([row]),
    }
    stored: list[bool] = []
    work = Work(
        tables=tables,
        key=("traces", tenant, trace_id),
        rows=1,
        on_commit=lambda: stored.append(True),
    )
    await state.store_works([work])
    if stored:  # new (not a retry of a stored one): analyze it
        state.analyzer.enqueue(tenant, trace_id, row, blob)
        state.counters.traces += 1
    return JSONResponse({"trace_id": trace_id, "status": "queued" if stored else "stored"})


async def heartbeat(request: Request) -> Response:
    """``POST /api/v1/agents/heartbeat``: the agent's state; answers its pending requests."""
    state: ServerState = request.app.state.server
    tenant = tenant_of(request)
    body = content_decoded(
        request, await read_body(request, heartbeat_doc.MAX_BODY), heartbeat_doc.MAX_BODY
    )
    hb = heartbeat_doc.parse(body)
    now_ms = int(time.time() * 1000)
    tables = {"agents": heartbeat_doc.agent_row(hb, tenant, now_ms)}
    host = hb.host
    from aiflame.server.query.requests import deliveries_for

    pending, delivery = await run_ingest(deliveries_for, state, tenant, host, now_ms)
    if delivery:
        # Handed out once: the delivery is stored before the agent hears of it.
        tables["trace_deliveries"] = delivery
        await state.store_works([Work(tables=tables, rows=1)])
    else:
        # The agent's last sighting goes with the pushes' batch; nothing waits for it.
        state.writer.submit([Work(tables=tables, rows=1)], patient=True)
    return JSONResponse({"requests": pending})
