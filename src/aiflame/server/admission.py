"""Queries in flight, bounded per client and in all: readers cannot starve ingest.

A query holds a reader's thread, a connection of the store's read lane and the store's CPU
until it ends (within the store's time limit). So each token and tenant has a few queries
in flight at once, and the server a few more in all; a query beyond that is answered at once
with 429 and ``Retry-After`` (Pyroscope's and Prometheus' answer to a client over its share)
instead of waiting in a queue that would grow with the flood. Pushes, telemetry and
heartbeats are never counted: they run on threads and connections of their own.
"""

from __future__ import annotations

import hashlib

from starlette.types import ASGIApp, Receive, Scope, Send

from aiflame.server.auth import presented_token
from aiflame.server.errors import TooManyRequests

QUERY_PREFIXES = ("/querier.v1.", "/api/v1/")
RETRY_AFTER_S = 1


def is_query(method: str, path: str) -> bool:
    """The requests that run queries of the store: the querier's calls, Pyroscope's render
    API and the JSON API's reads (not the admin's, not uploads)."""
    if path.startswith(("/querier.v1.", "/pyroscope/")):  # Grafana's and the Drilldown app's
        return True
    return method == "GET" and path.startswith("/api/v1/") and not path.startswith("/api/v1/admin/")


class QueryAdmission:
    """Counts queries in flight per (token, tenant) and in all (the event loop's thread
    only: no lock)."""

    def __init__(self, per_client: int, total: int) -> None:
        self.per_client = per_client
        self.total = total
        self.in_flight: dict[tuple[bytes, str], int] = {}
        self.running = 0
        self.refused = 0  # a metric

    def enter(self, key: tuple[bytes, str]) -> None:
        n = self.in_flight.get(key, 0)
        if n >= self.per_client:
            self.refused += 1
            raise TooManyRequests(
                f"more than {self.per_client} queries at once from this token and tenant; "
                "retry when one has ended",
                retry_after=RETRY_AFTER_S,
            )
        if self.running >= self.total:
            self.refused += 1
            raise TooManyRequests(
                f"the server runs {self.total} queries already; retry in a moment",
                retry_after=RETRY_AFTER_S,
            )
        self.in_flight[key] = n + 1
        self.running += 1

    def leave(self, key: tuple[bytes, str]) -> None:
        self.running -= 1
        n = self.in_flight.get(key, 1) - 1
        if n <= 0:
            self.in_flight.pop(key, None)
        else:
            self.in_flight[key] = n


def client_key(scope: Scope) -> tuple[bytes, str]:
    """(digest of the request's token, its tenant): whose share a query counts against."""
    auth = tenant = ""
    for k, v in scope["headers"]:
        if k == b"authorization":
            auth = v.decode("latin-1")
        elif k == b"x-scope-orgid":
            tenant = v.decode("latin-1").strip()
    token = presented_token(auth) or ""
    return hashlib.sha256(token.encode()).digest()[:16], tenant[:150]


class AdmitQueries:
    """ASGI middleware: queries past their client's share or the server's are a 429."""

    def __init__(self, app: ASGIApp, admission: QueryAdmission) -> None:
        self.app = app
        self.admission = admission

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_query(scope["method"], scope["path"]):
            await self.app(scope, receive, send)
            return
        key = client_key(scope)
        self.admission.enter(key)
        try:
            await self.app(scope, receive, send)
        finally:
            self.admission.leave(key)
