"""The agent's own API, for ``aiflame trace`` and the server's fleet-wide requests.

HTTP/1.1 over the Unix socket ``/run/aiflame/agent.sock`` (mode 0660: root and the
socket's group), or over TCP (``--api-listen``) only with a token (``--token-file``):
every TCP request must then carry ``Authorization: Bearer TOKEN`` (else 401). Bodies are
at most 64 KiB of JSON; a request runs at most as long as its trace may (bounded by the
trace manager), and at most 8 requests are served at once (else 503).

* ``POST /v1/trace`` -> ``{"traces": [{"pid", "path"}], "skipped": [...], "failed": [...]}``;
  400 for a bad request, 409 while a trace of one of the processes runs;
* ``POST /v1/snapshot`` (``pids`` | ``job_id`` | ``all``, ``output_dir``) -> ``{"snapshots":
  [{"pid", "path"}], "skipped", "failed"}``: GPU memory snapshots (:mod:`.snapshots`);
* ``GET /v1/status`` -> version, uptime, sampling rate, CPU use, spool, GPUs, processes.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
import socket
import socketserver
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from aiflame.agent.snapshots import SnapshotManager, SnapshotRequest
from aiflame.agent.tracing import TraceBusy, TraceError, TraceManager, TraceRequest

MAX_BODY = 64 * 1024
MAX_INFLIGHT = 8


class _Handler(BaseHTTPRequestHandler):
    server_version = "aiflame-agent"
    protocol_version = "HTTP/1.1"
    api: Api  # set on the subclass

    def log_message(self, format: str, *args: object) -> None:
        pass  # the agent logs what matters itself

    def address_string(self) -> str:
        return "unix" if not isinstance(self.client_address, tuple) else self.client_address[0]

    def _reply(self, status: int, body: dict[str, object]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _authorized(self) -> bool:
        token = self.api.token
        if not token or not self.api.tcp:
            return True
        got = self.headers.get("Authorization", "")
        return hmac.compare_digest(got.encode(), f"Bearer {token}".encode())

    def _guarded(self, fn: Callable[[], None]) -> None:
        if not self._authorized():
            self._reply(401, {"error": "a valid token is needed (Authorization: Bearer TOKEN)"})
            return
        if not self.api.slots.acquire(blocking=False):
            self._reply(503, {"error": "the agent is busy: try again"})
            return
        try:
            fn()
        finally:
            self.api.slots.release()

    def do_GET(self) -> None:
        def get() -> None:
            if self.path.split("?", 1)[0] == "/v1/status":
                self._reply(200, self.api.status())
            else:
                self._reply(404, {"error": f"no such endpoint: {self.path}"})

        self._guarded(get)

    def do_POST(self) -> None:
        self._guarded(self._post)

    def _post(self) -> None:
        endpoint = self.path.split("?", 1)[0]
        if endpoint not in ("/v1/trace", "/v1/snapshot"):
            self._reply(404, {"error": f"no such endpoint: {self.path}"})
            return
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY:
            self._reply(413 if length > MAX_BODY else 400, {"error": "body: at most 64 KiB"})
            return
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
            if not isinstance(body, dict):
                raise ValueError("not an object")
            if endpoint == "/v1/snapshot":
                snap = SnapshotRequest.from_json(body)
                if self.api.tcp:
                    snap.output_dir = ""
                result = self.api.snapshots.run(snap)
            else:
                req = TraceRequest.from_json(body, self.api.traces.max_duration_ms)
                if self.api.tcp:
                    req.output_dir = ""  # remote callers write only where the agent keeps traces
                result = self.api.traces.run(req)
        except (ValueError, TraceError) as e:
            self._reply(400, {"error": str(e)})
            return
        except TraceBusy as e:
            self._reply(e.status, {"error": str(e)})
            return
        except Exception as e:  # the agent's fault, said in one line
            self._reply(500, {"error": f"the agent failed: {type(e).__name__}: {e}"})
            return
        self._reply(200, result)


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class Api:
    """Serves the API on a thread; :meth:`close` stops it and removes the socket."""

    def __init__(
        self,
        traces: TraceManager,
        status: Callable[[], dict[str, object]],
        socket_path: str = "",
        listen: str = "",
        token: str = "",
        snapshots: SnapshotManager | None = None,
    ) -> None:
        self.traces = traces
        self.snapshots = snapshots or SnapshotManager(traces.identities, traces.output_dir)
        self.status = status
        self.token = token
        self.tcp = bool(listen)
        self.slots = threading.BoundedSemaphore(MAX_INFLIGHT)
        handler = type("Handler", (_Handler,), {"api": self})
        self.socket_path = ""
        if listen:
            host, _, port = listen.rpartition(":")
            self.server: socketserver.BaseServer = ThreadingHTTPServer(
                (host.strip("[]"), int(port)), handler
            )
        else:
            os.makedirs(os.path.dirname(socket_path) or ".", mode=0o755, exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                if _is_socket(socket_path):
                    os.unlink(socket_path)
            old = os.umask(0o117)  # the socket is created 0660
            try:
                self.server = _UnixServer(socket_path, handler)
            finally:
                os.umask(old)
            self.socket_path = socket_path
        self.thread = threading.Thread(
            target=self.server.serve_forever, name="aiflame-api", daemon=True
        )
        self.thread.start()

    @property
    def address(self) -> str:
        if self.socket_path:
            return self.socket_path
        address = self.server.server_address
        assert isinstance(address, tuple)  # TCP: (host, port)
        return f"{address[0]}:{address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)
        if self.socket_path:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.socket_path)


def _is_socket(path: str) -> bool:
    import stat

    try:
        return stat.S_ISSOCK(os.lstat(path).st_mode)
    except OSError:
        return False


def unix_request(
    path: str, method: str, target: str, body: dict | None, timeout: float
) -> tuple[int, dict]:
    """One request to the API over its Unix socket (for ``aiflame trace``)."""
    import http.client

    class Conn(http.client.HTTPConnection):
        def connect(self) -> None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            self.sock.connect(path)

    conn = Conn("localhost", timeout=timeout)
    return _exchange(conn, method, target, body, {})


def tcp_request(
    address: str, method: str, target: str, body: dict | None, timeout: float, token: str
) -> tuple[int, dict]:
    import http.client

    host, _, port = address.removeprefix("http://").rpartition(":")
    conn = http.client.HTTPConnection(host.strip("[]"), int(port), timeout=timeout)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return _exchange(conn, method, target, body, headers)


def _exchange(
    conn, method: str, target: str, body: dict | None, headers: dict[str, str]
) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    if data is not None:
        headers = {**headers, "Content-Type": "application/json"}
    try:
        conn.request(method, target, body=data, headers=headers)
        resp = conn.getresponse()
        raw = resp.read(16 << 20)
    finally:
        conn.close()
    try:
        parsed = json.loads(raw or b"{}")
    except ValueError:
        parsed = {"error": raw[:200].decode("utf-8", "replace")}
    return resp.status, parsed if isinstance(parsed, dict) else {"result": parsed}
