"""Nothing lost: profiles cut while the server is down wait in the spool; the agent is killed
with SIGKILL and started again on the same spool, the server comes back, and every CPU
sample the ledger says was spooled (minus those it says were dropped) reaches the server,
each profile once (its id), in order."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from standin_server import StandIn

from aiflame.agent.spool import LEDGER, ledger_totals

pytestmark = pytest.mark.usefixtures("ebpf")
HOT = Path(__file__).resolve().parent / "programs" / "hot_model.py"


def queued(spool, queue="server") -> list[str]:
    return sorted(p.name for p in (spool / queue).glob("*.json"))


def test_spool_and_replay_across_a_server_outage_and_a_sigkill(agents, tmp_path, short_tmp):
    server = StandIn()
    server.start()
    port = server.port
    server.stop()  # down from the start
    spool = tmp_path / "spool"
    args = [
        "--server", f"http://127.0.0.1:{port}", "--period", "2", "--metrics-listen", "",
        "--no-cuda", "--no-nvml", "--no-kineto-abstract", "--api-socket", str(short_tmp / "a.sock"),
        "--trace-dir", str(tmp_path / "t"),
    ]  # fmt: skip
    # A program busy all along, so that every period has samples to spool whatever else
    # the machine runs (an idle one gives the agent periods without any).
    busy = subprocess.Popen([sys.executable, str(HOT), "300"], stdout=subprocess.DEVNULL)
    try:
        first = agents(args, spool)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(queued(spool)) < 6:
            time.sleep(0.2)
        assert len(queued(spool)) >= 6, first.output()
        first.stop(signal.SIGKILL)  # no flush, no goodbye
        waiting = queued(spool)
        second = agents(args, spool)
        assert (
            f"({len(waiting)} entries to send)" in second.output()
            or "entries to send" in second.output()
        )
        time.sleep(3)  # still down: the restarted agent spools too
        server.start(port)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and queued(spool):
            time.sleep(0.5)
        assert second.stop() == 0, second.output()  # SIGTERM: the last period is pushed too
    finally:
        busy.kill()
        busy.wait()
        server.stop()
    assert not queued(spool), "entries left unsent"
    totals = ledger_totals(str(spool / LEDGER), queue="server")
    assert totals["spooled"] > len(waiting)  # both runs spooled
    assert server.cpu_samples() == totals["spooled_samples"] - totals["dropped_samples"]
    assert server.cpu_samples() > 0
    # every spooled profile arrived, once
    spooled_ids = []
    for line in (spool / LEDGER).read_text().splitlines():
        rec = json.loads(line)
        if rec["op"] == "spool" and rec["kind"] == "profile":
            spooled_ids.append(rec["id"])
    dropped = {
        json.loads(x)["id"] for x in (spool / LEDGER).read_text().splitlines() if '"op":"drop"' in x
    }
    assert set(server.got.profiles) == set(spooled_ids) - dropped
    # order: the first run's entries came before the second run's
    arrived = list(server.got.profiles)
    assert arrived[: len(spooled_ids[:3])] == [i for i in spooled_ids if i not in dropped][:3]
    assert server.got.telemetry == {}  # --no-nvml: no telemetry documents
