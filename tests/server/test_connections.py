"""Idle and slow connections are cut (real sockets against a real server): headers that never
end, a body trickled a byte at a time, and more connections from one address than its cap."""

from __future__ import annotations

import socket
import time

import payloads
import pytest
from serverproc import ServerProcess
from srvclient import Client

PUSH = "/push.v1.PusherService/Push"
HEADER_TIMEOUT = 1.5
IDLE_TIMEOUT = 3.0
CAP = 6


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    s = ServerProcess(
        tmp_path_factory.mktemp("conn") / "data",
        args=[
            "--header-timeout",
            str(HEADER_TIMEOUT),
            "--idle-timeout",
            str(IDLE_TIMEOUT),
            "--max-connections-per-client",
            str(CAP),
        ],
    ).start()
    yield s
    s.stop()


def _connect(srv: ServerProcess, source: str = "127.0.0.1") -> socket.socket:
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=30, source_address=(source, 0))
    return s


def _closed_within(s: socket.socket, seconds: float) -> tuple[float, bytes]:
    """Seconds until the server closed ``s`` (reading what it said before), or fail."""
    t0 = time.monotonic()
    s.settimeout(seconds)
    got = b""
    try:
        while chunk := s.recv(65536):
            got += chunk
    except TimeoutError:
        pytest.fail(f"still open after {seconds} s (got {got[:200]!r})")
    except ConnectionResetError:
        pass
    return time.monotonic() - t0, got


def _response(s: socket.socket) -> bytes:
    """One whole response (headers and a Content-Length body) read from ``s``."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        assert chunk, data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += s.recv(65536)
    return head + b"\r\n\r\n" + body


def test_headers_that_never_end_are_cut_off(guarded):
    silent = _connect(guarded, "127.0.0.2")  # connects and says nothing
    partial = _connect(guarded, "127.0.0.2")
    partial.sendall(b"POST /ingest?name=a.cpu HTTP/1.1\r\nHost: x\r\n")  # ... and no more
    trickle = _connect(guarded, "127.0.0.2")
    t0 = time.monotonic()
    for ch in b"GET /ready HTTP/1.1\r\nHost: x\r\n":  # a header byte every 0.2 s
        try:
            trickle.sendall(bytes([ch]))
        except OSError:
            break
        time.sleep(0.2)
        if time.monotonic() - t0 > HEADER_TIMEOUT + 3:
            break
    for s in (partial, trickle):
        _, said = _closed_within(s, HEADER_TIMEOUT + 5)
        assert said.startswith(b"HTTP/1.1 408"), said[:100]
        s.close()
    assert time.monotonic() - t0 < HEADER_TIMEOUT + 5
    # A connection that never says a word is idle: closed at the idle timeout, silently.
    _, said = _closed_within(silent, IDLE_TIMEOUT + 5)
    assert said == b"" and time.monotonic() - t0 < IDLE_TIMEOUT + 5
    silent.close()


def test_a_body_trickled_at_a_byte_a_second_is_cut_off(guarded):
    s = _connect(guarded, "127.0.0.3")
    s.sendall(
        b"POST /ingest?name=slow.cpu HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
        b"Content-Length: 1000\r\n\r\n"
    )
    t0 = time.monotonic()
    closed = False
    while time.monotonic() - t0 < HEADER_TIMEOUT + 10:
        try:
            s.sendall(b"a")
        except OSError:
            closed = True
            break
        s.settimeout(1.0)
        try:
            if s.recv(65536, socket.MSG_PEEK) is not None:
                closed = True
                break
        except TimeoutError:
            continue
        except OSError:
            closed = True
            break
    assert closed, "the trickled body was read for as long as it came"
    took = time.monotonic() - t0
    _, said = _closed_within(s, 5)
    assert said.startswith(b"HTTP/1.1 408") and b"slower than" in said, said[:200]
    assert took < HEADER_TIMEOUT + 5
    # The server goes on: a push at a normal pace is taken.
    c = Client(guarded.url, tenant="conn")
    body, _, _ = payloads.cpu_push({"service_name": "conn"}, 1, time.time_ns())
    assert c.post(PUSH, body)[0] == 200


def test_a_client_address_holds_at_most_its_cap_of_connections(guarded):
    held = [_connect(guarded, "127.0.0.4") for _ in range(CAP)]
    time.sleep(0.3)
    extra = _connect(guarded, "127.0.0.4")
    _, said = _closed_within(extra, 5)
    assert said.startswith(b"HTTP/1.1 429") and b"retry-after" in said.lower(), said[:200]
    extra.close()
    # Another address is not affected, and a connection freed is one more for the first.
    assert Client(guarded.url).request("GET", "/ready")[0] == 200
    held.pop().close()
    time.sleep(0.3)
    again = _connect(guarded, "127.0.0.4")
    again.sendall(b"GET /ready HTTP/1.1\r\nHost: x\r\n\r\n")
    again.settimeout(5)
    assert _response(again).startswith(b"HTTP/1.1 200")
    for s in [*held, again]:
        s.close()


def test_a_kept_alive_connection_and_a_slow_request_are_not_cut(guarded):
    """Timeouts bound a client's sending, not the server's work nor a pause between
    requests of a kept-alive connection (that is the idle timeout's), nor a wait before a
    new connection's first request."""
    s = _connect(guarded, "127.0.0.5")
    s.settimeout(30)
    time.sleep(HEADER_TIMEOUT + 0.5)
    for _ in range(2):
        s.sendall(b"GET /ready HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _response(s).startswith(b"HTTP/1.1 200")
        time.sleep(HEADER_TIMEOUT + 0.5)  # a pause longer than the header timeout
    # A flush waits for the writer (longer than the header timeout if need be): answered.
    s.sendall(b"POST /api/v1/admin/flush HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
    assert _response(s).startswith(b"HTTP/1.1 200")
    s.close()
