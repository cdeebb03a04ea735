"""OpenTelemetry profiles in: OTLP/HTTP (``POST /v1development/profiles``, protobuf or JSON)
and OTLP/gRPC (``ProfilesService/Export`` on ``--otlp-grpc-listen``).

Both store an export as a push is stored: decoded and checked first (ingest/otlp.py), then
logged to the write-ahead log and answered, committed with the next batch; each profile
keyed by its identity, so an export the collector retries is stored once. Errors follow the
OTLP specification: a ``google.rpc.Status`` body (in the request's encoding) with HTTP 400
for what will never be accepted, 503 and ``Retry-After`` for what may be retried; over gRPC
the matching status codes. Tokens and tenants are those of every other path
(``Authorization``, ``X-Scope-OrgID``; as gRPC metadata for gRPC).
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

from aiflame.server.bodies import gunzip, read_body
from aiflame.server.errors import BadRequest, RequestError, UnsupportedMediaType
from aiflame.server.routes_ingest import tenant_of
from aiflame.server.state import run_blocking
from aiflame.server.store.wal import Record
from aiflame.server.store.writer import Work

if TYPE_CHECKING:
    import grpc

    from aiflame.server.ingest.otlp import Decoded
    from aiflame.server.state import ServerState

log = logging.getLogger("aiflame.server")

HTTP_PATH = "/v1development/profiles"
PROTO_TYPES = ("application/x-protobuf", "application/protobuf", "application/proto")
# google.rpc.Code of each HTTP status the server answers with
_RPC_CODES = {400: 3, 401: 16, 403: 7, 404: 5, 413: 8, 415: 3, 429: 8, 501: 12, 503: 14}


class NotAvailable(RequestError):
    status = 501
    connect_code = "unimplemented"


def _otlp():  # type: ignore[no-untyped-def]
    """The decoder, which needs the opentelemetry-proto package (the fleet extra)."""
    try:
        from aiflame.server.ingest import otlp
    except ImportError as e:
        raise NotAvailable(
            f"OTLP profiles need the opentelemetry-proto package ({e.name} is missing): "
            "pip install 'aiflame[fleet]'"
        ) from None
    return otlp


# -- decoding: a pure function of what was received (the request, or its WAL record) ------
def decode_record(state: ServerState, rec: Record) -> tuple[list[Work], Decoded]:
    otlp = _otlp()
    body = rec.body
    encoding = rec.meta.get("encoding", "").strip().lower()
    if encoding in ("gzip", "x-gzip"):
        body = gunzip(body, state.limits.max_profile_bytes)
    elif encoding not in ("", "identity"):
        raise BadRequest(f"unsupported Content-Encoding {encoding!r} (use gzip or none)")
    req = otlp.parse(body, rec.meta.get("codec", "proto"))
    decoded = otlp.decode(
        req,
        tenant=rec.tenant,
        received_ms=rec.received_ms,
        limits=state.limits,
        hashes=state.strings,
        min_time_ms=state.retention_floor_ms("profiles"),
    )
    if decoded.rejected and not decoded.items:
        raise BadRequest("no profile of the export can be stored: " + "; ".join(decoded.problems))
    works = [
        Work(
            tables={},
            key=("profiles", it.tenant, it.profile_id),
            profile_items=[it],
            rows=int(it.row_value.size),
        )
        for it in decoded.items
    ]
    return works, decoded


def decode_for_replay(state: ServerState, rec: Record) -> list[Work]:
    return decode_record(state, rec)[0]


def _accept(state: ServerState, rec: Record) -> Decoded:
    """Decode, log, hand to the writer (called off the event loop or by a gRPC worker)."""
    works, decoded = decode_record(state, rec)
    if works:
        state.accept(rec, works)
    state.counters.profiles += len(works)
    state.counters.samples += sum(w.rows for w in works)
    return decoded


# -- OTLP/HTTP ----------------------------------------------------------------------------
def _codec(request: Request) -> str:
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype in PROTO_TYPES:
        return "proto"
    if ctype == "application/json":
        return "json"
    raise UnsupportedMediaType(
        f"unsupported content type {ctype!r}: OTLP/HTTP is application/x-protobuf or "
        "application/json"
    )


async def export(request: Request) -> Response:
    """``POST /v1development/profiles``: an ``ExportProfilesServiceRequest``."""
    state: ServerState = request.app.state.server
    codec = "proto"
    try:
        codec = _codec(request)
        rec = Record(
            kind="otlp",
            tenant=tenant_of(request),
            received_ms=int(time.time() * 1000),
            meta={"codec": codec, "encoding": request.headers.get("content-encoding", "")},
            body=await read_body(request, state.limits.max_body_bytes),
        )
        decoded = await run_blocking(_accept, state, rec)
    except RequestError as e:
        state.counters.count(state.counters.rejected, type(e).__name__)
        return error_response(e, codec)
    answer = _otlp().response(decoded)
    return _message(answer, codec, 200)


def _message(message, codec: str, status: int, headers: dict[str, str] | None = None) -> Response:  # type: ignore[no-untyped-def]
    if codec == "json":
        from google.protobuf import json_format

        text = json_format.MessageToJson(message, indent=None)
        return Response(text, status, headers, media_type="application/json")
    return Response(message.SerializeToString(), status, headers, "application/x-protobuf")


def error_response(e: RequestError, codec: str = "proto") -> Response:
    """A ``google.rpc.Status`` in the request's encoding, as OTLP/HTTP answers errors."""
    headers = {"Retry-After": str(max(1, round(e.retry_after)))} if e.retry_after else {}
    try:
        from google.rpc import status_pb2
    except ImportError:  # without googleapis-common-protos: the message as text
        return Response(e.message, e.status, headers, media_type="text/plain")
    status = status_pb2.Status(code=_RPC_CODES.get(e.status, 2), message=e.message)
    return _message(status, codec, e.status, headers)


def codec_of_content_type(content_type: str) -> str:
    ctype = content_type.split(";")[0].strip().lower()
    return "json" if ctype == "application/json" else "proto"


# -- OTLP/gRPC ----------------------------------------------------------------------------
def _tenant(value: str) -> str:
    """The tenant of gRPC metadata, checked as ``X-Scope-OrgID`` is."""
    scope = {"type": "http", "headers": [(b"x-scope-orgid", value.encode("latin-1", "replace"))]}
    return tenant_of(Request({**scope, "query_string": b""}))


class GrpcServer:
    """``opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export`` on
    its own port (gRPC needs HTTP/2); its workers decode and log as the HTTP route does."""

    def __init__(
        self,
        state: ServerState,
        listen: str,
        tls: tuple[bytes, bytes] | None = None,
        workers: int = 4,
    ) -> None:
        import grpc
        from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2

        self.state = state
        service = profiles_service_pb2.DESCRIPTOR.services_by_name["ProfilesService"]
        method = grpc.unary_unary_rpc_method_handler(self._export)  # raw bytes in and out
        handler = grpc.method_handlers_generic_handler(service.full_name, {"Export": method})
        limit = state.limits.max_body_bytes
        self.server = grpc.server(
            concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="aiflame-otlp"),
            handlers=[handler],
            options=[
                ("grpc.max_receive_message_length", limit),
                ("grpc.max_send_message_length", 1 << 20),
            ],
            maximum_concurrent_rpcs=64,
        )
        if tls is None:
            self.port = self.server.add_insecure_port(listen)
        else:
            creds = grpc.ssl_server_credentials([(tls[1], tls[0])])
            self.port = self.server.add_secure_port(listen, creds)
        if not self.port:
            raise OSError(f"cannot listen on {listen}")

    def start(self) -> None:
        self.server.start()

    def stop(self, grace: float = 5.0) -> None:
        self.server.stop(grace).wait(grace + 1)

    def _export(self, raw: bytes, context: grpc.ServicerContext) -> bytes:
        import grpc

        state = self.state
        md = {k.lower(): v for k, v in context.invocation_metadata() if isinstance(v, str)}
        try:
            state.tokens.require(md.get("authorization"), "ingest")
            rec = Record(
                kind="otlp",
                tenant=_tenant(md.get("x-scope-orgid", "")),
                received_ms=int(time.time() * 1000),
                meta={"codec": "proto", "encoding": ""},  # gRPC inflates its own compression
                body=raw,
            )
            decoded = _accept(state, rec)
        except RequestError as e:
            state.counters.count(state.counters.rejected, type(e).__name__)
            code = {
                401: grpc.StatusCode.UNAUTHENTICATED,
                403: grpc.StatusCode.PERMISSION_DENIED,
                413: grpc.StatusCode.RESOURCE_EXHAUSTED,
                501: grpc.StatusCode.UNIMPLEMENTED,
                503: grpc.StatusCode.UNAVAILABLE,
            }.get(e.status, grpc.StatusCode.INVALID_ARGUMENT)
            context.abort(code, e.message)
        except Exception:
            log.exception("OTLP/gRPC export failed")
            context.abort(grpc.StatusCode.INTERNAL, "internal server error")
        return bytes(_otlp().response(decoded).SerializeToString())
