"""A failing store is said, not hidden: with the store's disk full (a real, full tmpfs) a push
is a 503 with Retry-After, /ready fails, the log says it once; once there is room again the
server recovers by itself, says so, and stores again."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time

import payloads
import pytest
from serverproc import ServerProcess
from srvclient import Client

PUSH = "/push.v1.PusherService/Push"


@pytest.fixture
def small_disk(tmp_path):
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mnt)], capture_output=True
    )
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def _fill(path) -> None:
    """Write zeros until the disk is full."""
    block = b"\0" * (1 << 20)
    with open(path, "ab", buffering=0) as f:
        with contextlib.suppress(OSError):
            while True:
                f.write(block)
        with contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * 4096)


def _ready(c: Client) -> tuple[int, bytes, dict]:
    status, data, headers = c.request("GET", "/ready")
    return status, data, {k.lower(): v for k, v in headers.items()}


def test_a_full_disk_is_503_and_not_ready_then_recovers_by_itself(small_disk, tmp_path):
    srv = ServerProcess(small_disk / "data")
    srv.log = tmp_path / "server.log"  # not on the disk that fills up
    srv.start()
    try:
        c = Client(srv.url, tenant="full", settle=False)
        body, _, _ = payloads.cpu_push({"service_name": "full"}, 1, time.time_ns())
        assert c.post(PUSH, body)[0] == 200
        c.settle()
        _fill(small_disk / "filler")

        # (the store's merges free a little now and then: the disk is filled again each time)
        refused = 0
        for seed in range(2, 8):
            _fill(small_disk / "filler")
            body, _, _ = payloads.cpu_push({"service_name": "full"}, seed, time.time_ns())
            status, data, headers = c.request(
                "POST", PUSH, body, {"Content-Type": "application/proto"}
            )
            assert status in (200, 503), (status, data[:300])
            if status == 503:
                refused += 1
                assert json.loads(data)["code"] == "unavailable"
                assert int({k.lower(): v for k, v in headers.items()}["retry-after"]) >= 1
        assert refused >= 3
        _fill(small_disk / "filler")
        status, data, headers = _ready(c)
        assert status == 503 and b"cannot write" in data and "retry-after" in headers
        # A request that waits for its commit hears 503 too (the store's own write fails).
        hb = json.dumps({"host": "h"}).encode()
        status, _, _ = c.request("POST", "/api/v1/admin/flush", b"")
        assert status in (200, 503)
        assert c.post("/api/v1/agents/heartbeat", hb, "application/json")[0] in (200, 503)

        os.unlink(small_disk / "filler")
        deadline = time.monotonic() + 30
        while _ready(c)[0] != 200:
            assert time.monotonic() < deadline, _ready(c)
            time.sleep(0.5)
        body, _, _ = payloads.cpu_push({"service_name": "full"}, 4, time.time_ns())
        assert c.post(PUSH, body)[0] == 200
        c.settle()
        log = srv.log.read_text()
        assert "Traceback" not in log, log[-3000:]
    finally:
        srv.stop()
    log = srv.log.read_text()
    failures = [ln for ln in log.splitlines() if "ERROR" in ln]
    assert 1 <= len(failures) <= 4, failures  # said once (per kind), not once per push
    assert "writing again after" in log
