"""Tokens with scopes: none or a wrong one is 401, another scope 403, nothing of a refused
request is stored; Bearer and basic auth (the Pyroscope SDKs' way) both work; without a
token file the server refuses to listen beyond loopback."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import payloads
import pytest
from serverproc import SRC, ServerProcess
from srvclient import Client, basic

from aiflame.proto.pyroscope.querier.v1 import querier_pb2 as q

INGEST = "ingest-token-0123456789abcdef"
READ = "read-token-0123456789abcdef00"
ADMIN = "admin-token-0123456789abcdef0"


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    d = tmp_path_factory.mktemp("auth")
    tokens = d / "tokens"
    tokens.write_text(f"# comment\n{INGEST} ingest\n{READ} read\n{ADMIN} admin\n")
    s = ServerProcess(d / "data", ["--token-file", str(tokens)]).start()
    yield s
    s.stop()


def _stored(url: str, tenant: str) -> float:
    c = Client(url, token=READ, tenant=tenant, admin_token=ADMIN)
    now = int(time.time() * 1000)
    r = c.connect(
        "SelectMergeStacktraces",
        q.SelectMergeStacktracesRequest(
            profile_typeID=payloads.CPU_TYPE,
            label_selector="{}",
            start=now - 3600_000,
            end=now + 60_000,
        ),
        q.SelectMergeStacktracesResponse,
    )
    return r.flamegraph.total


def test_token_scopes(guarded, tenant):
    body, _, _ = payloads.cpu_push({"service_name": "auth"}, 1, time.time_ns())
    push = "/push.v1.PusherService/Push"
    cases = [
        (None, 401),
        ("Bearer not-a-token-0000000000", 401),
        (basic("user", "wrong-password-000000"), 401),
        (f"Bearer {READ}", 403),
    ]
    for auth, expected in cases:
        headers = {"Authorization": auth} if auth else {}
        status, data = Client(guarded.url, tenant=tenant, settle=False).post(
            push, body, headers=headers
        )
        assert status == expected, (auth, status, data)
    assert _stored(guarded.url, tenant) == 0  # nothing of the refused pushes
    # Telemetry and traces refuse the same way.
    doc = payloads.telemetry("b1", "h1", time.time() - 10, time.time(), [], [])
    assert (
        Client(guarded.url, tenant=tenant, settle=False).post(
            "/api/v1/telemetry", doc, "application/json"
        )[0]
        == 401
    )
    # The right scope, as Bearer and as basic auth's password (Pyroscope SDKs, Alloy).
    assert Client(guarded.url, token=INGEST, tenant=tenant, settle=False).post(push, body)[0] == 200
    body2, _, _ = payloads.cpu_push({"service_name": "auth"}, 2, time.time_ns())
    status, _ = Client(guarded.url, tenant=tenant, settle=False).post(
        push, body2, headers={"Authorization": basic(tenant, INGEST)}
    )
    assert status == 200
    assert _stored(guarded.url, tenant) > 0
    # Reading needs read; an ingest token may not read.
    status, _, _ = Client(guarded.url, token=INGEST, tenant=tenant, settle=False).request(
        "GET", "/api/v1/traces"
    )
    assert status == 403
    status, _, headers = Client(guarded.url, tenant=tenant, settle=False).request(
        "GET", "/ui/fleet"
    )
    assert status == 401 and "Basic" in headers.get(
        "www-authenticate", headers.get("WWW-Authenticate", "")
    )
    # Admin covers everything; a fleet-wide trace request needs it.
    req = b'{"selector": {"job_id": "7"}, "duration_ms": 1000}'
    assert (
        Client(guarded.url, token=READ, tenant=tenant, settle=False).post(
            "/api/v1/trace-requests", req, "application/json"
        )[0]
        == 403
    )
    assert (
        Client(guarded.url, token=ADMIN, tenant=tenant, settle=False).post(
            "/api/v1/trace-requests", req, "application/json"
        )[0]
        == 200
    )
    # The load balancer's probe needs no token.
    assert Client(guarded.url, settle=False).request("GET", "/ready")[0] == 200


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(SRC))
    return subprocess.run(
        [sys.executable, "-m", "aiflame", "server", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_no_token_file_means_loopback_only(tmp_path):
    r = run_cli("--store", f"chdb://{tmp_path}/d", "--listen", "0.0.0.0:0")
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        "aiflame: error: --listen 0.0.0.0:0: without --token-file the server only listens on "
        "loopback (127.0.0.1 or ::1); give a token file to serve the network"
    ]


def test_bad_token_file_is_one_line(tmp_path):
    f = tmp_path / "tokens"
    f.write_text("short read\n")
    r = run_cli("--store", f"chdb://{tmp_path}/d", "--token-file", str(f))
    assert r.returncode == 1 and "at least 16 characters" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    f.write_text("0123456789abcdef0123 write\n")
    r = run_cli("--store", f"chdb://{tmp_path}/d", "--token-file", str(f))
    assert r.returncode == 1 and "unknown scope write" in r.stderr
