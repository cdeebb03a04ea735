"""A small HTTP client for the server tests (the standard library only)."""

from __future__ import annotations

import base64
import http.client
import json
from urllib.parse import urlencode, urlsplit

_INGEST = (
    "/push.v1.",
    "/ingest",
    "/api/v1/telemetry",
    "/api/v1/traces",
    "/api/v1/agents/heartbeat",
)
_dirty: set[tuple[str, int]] = set()  # servers that accepted pushes not yet settled


class Client:
    def __init__(
        self,
        url: str,
        token: str | None = None,
        tenant: str | None = None,
        admin_token: str | None = None,
        settle: bool | None = None,
    ) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname, parts.port
        self.token, self.tenant = token, tenant
        self.admin_token = admin_token
        # Settling needs the admin scope: without a token file any client may; with one,
        # only a client given the admin token settles before reading.
        self.auto_settle = (admin_token is not None or token is None) if settle is None else settle

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        params: dict | None = None,
        timeout: float = 60,
    ) -> tuple[int, bytes, dict[str, str]]:
        server = (self.host, self.port)
        if method == "POST" and path.startswith(_INGEST):
            _dirty.add(server)
        elif self.auto_settle and server in _dirty and not path.startswith("/api/v1/admin/"):
            self.settle()  # reading after writing: what was accepted is committed first
        h = dict(headers or {})
        if self.token and "Authorization" not in h:
            h["Authorization"] = f"Bearer {self.token}"
        if self.tenant:
            h.setdefault("X-Scope-OrgID", self.tenant)
        if params:
            path += "?" + urlencode(params)
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            conn.request(method, path, body=body, headers=h)
            resp = conn.getresponse()
            return resp.status, resp.read(), dict(resp.getheaders())
        finally:
            conn.close()

    def post(
        self, path: str, body: bytes, ctype: str = "application/proto", **kw
    ) -> tuple[int, bytes]:
        headers = {"Content-Type": ctype, **kw.pop("headers", {})}
        status, data, _ = self.request("POST", path, body, headers, **kw)
        return status, data

    def settle(self) -> None:
        """Wait until what the server accepted is in the store (a push is answered once it
        is in the write-ahead log, and committed a moment later)."""
        auth = {"Authorization": f"Bearer {self.admin_token}"} if self.admin_token else {}
        status, data, _ = self.request("POST", "/api/v1/admin/flush", b"", headers=auth)
        assert status == 200, (status, data)
        _dirty.discard((self.host, self.port))

    def get_json(self, path: str, **params) -> dict:
        status, data, _ = self.request("GET", path, params=params or None)
        assert status == 200, (status, data[:500])
        return json.loads(data)

    def connect(self, method: str, message, response_type):
        """A Connect unary call of querier.v1.QuerierService, binary protobuf."""
        status, data = self.post(
            f"/querier.v1.QuerierService/{method}", message.SerializeToString()
        )
        assert status == 200, (status, data[:500])
        return response_type.FromString(data)


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
