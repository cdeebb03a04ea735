"""``--tls-cert``/``--tls-key``: the server speaks HTTPS (a self-signed certificate made for
the test with openssl), and a push over it is stored."""

from __future__ import annotations

import http.client
import shutil
import ssl
import subprocess
import time

import payloads
import pytest
from serverproc import ServerProcess

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


def test_https_push_and_query(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    srv = ServerProcess(tmp_path / "data", ["--tls-cert", str(cert), "--tls-key", str(key)])
    srv.url = srv.url.replace("http://", "https://")
    ctx = ssl.create_default_context(cafile=str(cert))
    try:
        srv.start(ssl_context=ctx)
        body, _, _ = payloads.cpu_push({"service_name": "tls"}, 11, time.time_ns())
        conn = http.client.HTTPSConnection("127.0.0.1", srv.port, context=ctx, timeout=60)
        conn.request(
            "POST", "/push.v1.PusherService/Push", body, {"Content-Type": "application/proto"}
        )
        assert conn.getresponse().status == 200
        conn = http.client.HTTPSConnection("127.0.0.1", srv.port, context=ctx, timeout=60)
        conn.request("POST", "/api/v1/admin/flush", b"")
        assert conn.getresponse().status == 200
        conn = http.client.HTTPSConnection("127.0.0.1", srv.port, context=ctx, timeout=60)
        conn.request("GET", "/api/v1/labels?name=service_name&from=now-1h")
        resp = conn.getresponse()
        assert resp.status == 200 and b'"tls"' in resp.read()
        # Plain HTTP to the TLS port gets no answer it could use.
        plain = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
        with pytest.raises((http.client.HTTPException, ConnectionError, OSError)):
            plain.request("GET", "/ready")
            r = plain.getresponse()
            if r.status != 200:
                raise http.client.HTTPException(r.status)
            raise AssertionError("plain HTTP was served on the TLS port")
    finally:
        srv.stop()
