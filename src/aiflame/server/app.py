"""The ASGI application: routes, the scope every path needs, and errors as clear 4xx.

Authorization is decided here for every path at once (nothing is reachable without its
scope when a token file is given), before a request's body is read, so a refused request
stores nothing.
"""

from __future__ import annotations

import errno
import logging
import traceback

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from aiflame.server import (
    connect,
    routes_api,
    routes_drilldown,
    routes_ingest,
    routes_otlp,
    routes_query,
    routes_ui,
)
from aiflame.server.admission import AdmitQueries
from aiflame.server.errors import Overloaded, RequestError
from aiflame.server.state import Decoder, ServerState
from aiflame.server.store.connection import query_error

log = logging.getLogger("aiflame.server")

INGEST_POSTS = (
    "/push.v1.PusherService/",
    "/ingest",
    "/api/v1/telemetry",
    "/api/v1/traces",
    "/api/v1/agents/heartbeat",
    routes_otlp.HTTP_PATH,
)
ADMIN_POSTS = ("/api/v1/trace-requests",)
OPEN = ("/ready", "/healthz")


# Each kind of logged request and its decoder, for replaying the write-ahead log at start.
WAL_DECODERS: dict[str, Decoder] = {
    **routes_ingest.DECODERS,
    "otlp": routes_otlp.decode_for_replay,
}


def scope_of(method: str, path: str) -> str | None:
    """The token scope a request needs (None: none, e.g. the load balancer's probe)."""
    if path in OPEN:
        return None
    if method == "POST" and any(path == p or path.startswith(p) for p in INGEST_POSTS):
        if path.startswith("/api/v1/traces/"):
            return "read"  # POST /api/v1/traces is an upload; below it, queries
        return "ingest"
    if method in ("POST", "DELETE") and any(path.startswith(p) for p in ADMIN_POSTS):
        return "admin"
    if method == "DELETE" or path.startswith("/api/v1/admin/"):
        return "admin"
    return "read"


def _is_connect(path: str) -> bool:
    return path.startswith(("/push.v1.", "/querier.v1.", "/settings.v1."))


def error_response(request_path: str, e: RequestError, content_type: str = "") -> Response:
    if request_path == routes_otlp.HTTP_PATH:
        return routes_otlp.error_response(e, routes_otlp.codec_of_content_type(content_type))
    if _is_connect(request_path):
        return connect.error_response(e)
    headers = {"Retry-After": str(max(1, int(e.retry_after)))} if e.retry_after else {}
    if e.status == 401:
        headers["WWW-Authenticate"] = 'Basic realm="aiflame", charset="UTF-8"'
    return JSONResponse({"error": e.message}, status_code=e.status, headers=headers)


class Guard:
    """Pure ASGI middleware: token scopes, and every error as a clean response."""

    def __init__(self, app: ASGIApp, state: ServerState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path, method = scope["path"], scope["method"]
        needed = scope_of(method, path)
        counters = self.state.counters
        started = False
        ctype = dict(scope["headers"]).get(b"content-type", b"").decode("latin-1")

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                counters.count(counters.requests, str(message["status"]))
            await send(message)

        try:
            if needed:
                headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
                self.state.tokens.require(headers.get("authorization"), needed)
            await self.app(scope, receive, tracking_send)
        except RequestError as e:
            if started:
                raise
            counters.count(counters.rejected, type(e).__name__)
            await error_response(path, e, ctype)(scope, receive, tracking_send)
        except ClientDisconnect:
            pass  # the client left (or was cut off: connections.py): nobody to answer
        except Exception as e:
            # The store's own errors are said as what they are (a 400 for a query its
            # arguments make invalid, a 503 for a store that fails); a full disk is a 503.
            mapped = query_error(e, self.state.config.query_timeout_s) or _resource_error(e)
            if mapped is not None:
                if mapped.status >= 500:
                    log.warning("%s %s: %s", method, path, mapped.message)
                if not started:
                    counters.count(counters.rejected, type(mapped).__name__)
                    await error_response(path, mapped, ctype)(scope, receive, tracking_send)
                return
            # A bug of the server (never a client's mistake): logged once, answered 500.
            log.error("%s %s failed:\n%s", method, path, traceback.format_exc())
            if not started:
                resp = JSONResponse({"error": "internal server error"}, status_code=500)
                await resp(scope, receive, tracking_send)


_RESOURCE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EMFILE, errno.ENFILE)


def _resource_error(e: BaseException) -> RequestError | None:
    """A full disk (or no file descriptor left) while serving a request: the server cannot
    do it now, which is a 503 with Retry-After, not a bug."""
    if isinstance(e, OSError) and e.errno in _RESOURCE_ERRNOS:
        return Overloaded(f"the server cannot write now ({e.strerror})", retry_after=10)
    return None


async def ready(request: Request) -> Response:
    """For load balancers: 503 while the store (or the write-ahead log) cannot write."""
    state: ServerState = request.app.state.server
    why = state.ready()
    if why is not None:
        retry = str(state.writer.health.retry_after_s())
        return PlainTextResponse(f"not ready: {why}\n", 503, headers={"Retry-After": retry})
    return PlainTextResponse("ready\n")


async def root(request: Request) -> Response:
    return RedirectResponse("/ui/fleet", status_code=302)


def build_app(state: ServerState) -> ASGIApp:
    routes = [
        Route("/", root),
        Route("/ready", ready),
        Route("/healthz", ready),
        Route("/push.v1.PusherService/Push", routes_ingest.push, methods=["POST"]),
        Route("/ingest", routes_ingest.ingest, methods=["POST"]),
        Route("/api/v1/telemetry", routes_ingest.post_telemetry, methods=["POST"]),
        Route("/api/v1/traces", routes_ingest.post_trace, methods=["POST"]),
        Route("/api/v1/agents/heartbeat", routes_ingest.heartbeat, methods=["POST"]),
        Route(routes_otlp.HTTP_PATH, routes_otlp.export, methods=["POST"]),
        Route("/querier.v1.QuerierService/{method}", routes_query.querier, methods=["POST"]),
        *routes_api.ROUTES,
        *routes_drilldown.ROUTES,
        *routes_ui.ROUTES,
    ]

    async def on_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestError)
        state.counters.count(state.counters.rejected, type(exc).__name__)
        return error_response(request.url.path, exc, request.headers.get("content-type", ""))

    app = Starlette(routes=routes, exception_handlers={RequestError: on_error})
    app.state.server = state
    return Guard(AdmitQueries(app, state.admission), state)
