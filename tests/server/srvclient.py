"""A small HTTP client for the server tests (the standard library only)."""

from __future__ import annotations

import base64
import http.client
import json
from urllib.parse import urlencode, urlsplit


class Client:
    def __init__(self, url: str, token: str | None = None, tenant: str | None = None) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname, parts.port
        self.token, self.tenant = token, tenant

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        params: dict | None = None,
        timeout: float = 60,
    ) -> tuple[int, bytes, dict[str, str]]:
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
