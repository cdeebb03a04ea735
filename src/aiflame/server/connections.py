"""Connections as a production HTTP server bounds them: slow and idle clients are cut off.

uvicorn closes a connection idle between requests (``timeout_keep_alive``) and caps the
connections of the whole server (``limit_concurrency``), but it waits forever for a request
whose headers never end and reads a body trickled at a byte a second for as long as it
comes. This protocol (uvicorn's httptools protocol, with timers) adds what nginx and Go's
``http.Server`` have:

- **idle timeout**: a new connection that sends nothing is closed after ``idle_s`` (the
  keep-alive timeout, which bounds the wait between two requests the same way);
- **header timeout**: a request's headers must be complete within ``header_timeout_s`` of
  its first byte;
- **body rate**: a request's body must arrive at ``min_rate`` bytes/s on average after a
  first ``body_timeout_s`` (a 60 KB push at any real link speed passes; a trickle does not);
  time while the server itself is not reading (flow control) is not counted against it;
- **connections per client address**: at most ``max_per_client`` open at once; one more is
  answered ``429`` with ``Retry-After`` and closed (0: no cap).

A request cut off this way is answered ``408 Request Timeout`` and its connection closed.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger("aiflame.server")


@dataclass
class ConnectionLimits:
    idle_s: float = 30.0
    header_timeout_s: float = 10.0
    body_timeout_s: float = 10.0
    min_rate: float = 16 << 10  # bytes per second
    max_per_client: int = 256


@dataclass
class ConnectionCounts:
    """What the guards did (the server's /metrics)."""

    idle_closed: int = 0
    header_timeouts: int = 0
    body_timeouts: int = 0
    refused: int = 0  # connections over a client address's cap
    open_by_client: dict[str, int] = field(default_factory=dict)


COUNTS = ConnectionCounts()

_REFUSED = (
    b"HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\n"
    b"retry-after: 5\r\nconnection: close\r\ncontent-length: %d\r\n\r\n%s"
)
_TIMEOUT = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
    b"connection: close\r\ncontent-length: %d\r\n\r\n%s"
)


def _response(template: bytes, message: str) -> bytes:
    body = b'{"error": "' + message.encode() + b'"}'
    return template % (len(body), body)


def guarded_protocol(limits: ConnectionLimits) -> type[HttpToolsProtocol]:
    """uvicorn's ``http=`` protocol class with these limits."""

    class GuardedProtocol(_Guarded):
        pass

    GuardedProtocol.limits = limits
    return GuardedProtocol


class _Guarded(HttpToolsProtocol):
    limits = ConnectionLimits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._timer: asyncio.TimerHandle | None = None
        self._address: str | None = None  # counted against its cap while open
        self._body_start = 0.0
        self._body_bytes = 0
        self._reading_body = False

    # -- the connection ---------------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        address = self.client[0] if self.client else ""
        cap = self.limits.max_per_client
        open_now = COUNTS.open_by_client.get(address, 0)
        if cap and open_now >= cap:
            COUNTS.refused += 1
            if COUNTS.refused in (1, 100) or COUNTS.refused % 10_000 == 0:
                log.warning(
                    "connections: %s holds %d open connections (the cap); refusing more "
                    "(%d refused so far)",
                    address,
                    open_now,
                    COUNTS.refused,
                )
            message = f"more than {cap} open connections from this address"
            transport.write(_response(_REFUSED, message))
            transport.close()
            return
        self._address = address
        COUNTS.open_by_client[address] = open_now + 1
        self._arm(self.limits.idle_s, self._idle_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._address is not None:
            left = COUNTS.open_by_client.get(self._address, 1) - 1
            if left > 0:
                COUNTS.open_by_client[self._address] = left
            else:
                COUNTS.open_by_client.pop(self._address, None)
            self._address = None
        super().connection_lost(exc)

    # -- the parser's events ----------------------------------------------------------------
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm(self.limits.header_timeout_s, self._header_timeout)

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()
        if self.transport.is_closing():
            return
        self._reading_body = True
        self._body_start = self.loop.time()
        self._body_bytes = 0
        self._arm(self.limits.body_timeout_s, self._body_check)

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._reading_body = False
        self._disarm()
        super().on_message_complete()

    # -- timers -----------------------------------------------------------------------------
    def _arm(self, delay: float, callback: Any) -> None:
        self._disarm()
        self._timer = self.loop.call_later(delay, callback)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _idle_timeout(self) -> None:
        self._timer = None
        COUNTS.idle_closed += 1
        if not self.transport.is_closing():
            self.transport.close()  # nothing was asked: nothing to answer

    def _header_timeout(self) -> None:
        self._timer = None
        COUNTS.header_timeouts += 1
        self._cut(f"the request's headers did not arrive within {self.limits.header_timeout_s:g} s")

    def _body_check(self) -> None:
        """Due when the body should have reached the minimum rate: cut it off if it has
        not, else look again when the bytes received so far would be too few."""
        self._timer = None
        if not self._reading_body or self.transport.is_closing():
            return
        now = self.loop.time()
        if self.flow.read_paused:
            # The server is not reading (the request waits for it): not the client's time.
            self._body_start += 1.0
            self._arm(1.0, self._body_check)
            return
        lim = self.limits
        due = self._body_start + lim.body_timeout_s + self._body_bytes / lim.min_rate
        if now < due:
            self._arm(due - now, self._body_check)
            return
        COUNTS.body_timeouts += 1
        self._cut(
            f"the request's body arrived slower than {lim.min_rate / 1024:g} KiB/s "
            f"({self._body_bytes} bytes in {now - self._body_start:.0f} s)"
        )

    def _cut(self, message: str) -> None:
        if self.transport.is_closing():
            return
        cycle = self.cycle
        if cycle is None or cycle.response_complete or not cycle.response_started:
            self.transport.write(_response(_TIMEOUT, message))
        if cycle is not None and not cycle.response_complete:
            # The request's handler (if it started) sees the client gone.
            cycle.disconnected = True
            cycle.message_event.set()
        self.transport.close()
