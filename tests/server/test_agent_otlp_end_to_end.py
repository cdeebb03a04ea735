"""``aiflame agent --otlp URL --otlp-header Authorization=...`` sending to ``aiflame server``'s
OTLP/HTTP receiver (as root, with the agent's eBPF collectors): a Python program's hot
function arrives through the spool's ``otlp`` queue as OpenTelemetry profiles, with its
workload labels and its Python frames' kind, and is read back through the querier API."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

pytest.importorskip(
    "opentelemetry.proto", reason="OTLP needs the fleet extra: pip install -e '.[fleet]'"
)

from serverproc import SRC, ServerProcess
from srvclient import Client

from aiflame.model import FrameKind
from aiflame.proto.pyroscope.querier.v1 import querier_pb2 as q
from aiflame.sources.inputs import Input
from aiflame.sources.pprof import importer as pprof_source

pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("aiflame.agent") is None,
        reason="aiflame agent is not in this tree",
    ),
    pytest.mark.skipif(os.geteuid() != 0, reason="the agent's eBPF collectors need root"),
    pytest.mark.slow,
]

TOKEN = "agent-otlp-ingest-token-0123"
ADMIN = "agent-otlp-admin-token-01234"
HOT = textwrap.dedent(
    """
    import time
    def agent_otlp_hot_function():
        t = time.time()
        while time.time() - t < 0.2:
            pass
    end = time.time() + 40
    while time.time() < end:
        agent_otlp_hot_function()
    """
)


def test_agent_sends_otlp_profiles_to_the_server(tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{TOKEN} ingest\n{ADMIN} admin\n")
    server = ServerProcess(tmp_path / "data", args=["--token-file", str(tokens)]).start()
    prog = tmp_path / "hot.py"
    prog.write_text(HOT)
    run = uuid.uuid4().hex[:12]
    hot = subprocess.Popen([sys.executable, str(prog)])
    agent = subprocess.Popen(
        [
            sys.executable, "-m", "aiflame", "agent",
            "--otlp", server.url,  # no path: /v1development/profiles
            "--otlp-header", f"Authorization=Bearer {TOKEN}",
            "--label", f"e2e_run={run}",
            "--period", "2",
            "--spool", str(tmp_path / "spool"),
            "--metrics-listen", "",
            "--api-socket", str(tmp_path / "agent.sock"),
            "--no-nvml",
        ],
        env=dict(os.environ, PYTHONPATH=str(SRC)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    c = Client(server.url, token=ADMIN, admin_token=ADMIN)
    try:
        deadline = time.monotonic() + 90
        fg = None
        while time.monotonic() < deadline:
            time.sleep(2)
            now = int(time.time() * 1000)
            req = q.SelectMergeStacktracesRequest(
                profile_typeID="process_cpu:cpu:nanoseconds:cpu:nanoseconds",
                label_selector=f'{{e2e_run="{run}"}}',
                start=now - 600_000,
                end=now + 60_000,
            )
            fg = c.connect("SelectMergeStacktraces", req, q.SelectMergeStacktracesResponse)
            if any("agent_otlp_hot_function" in n for n in fg.flamegraph.names):
                break
        else:
            pytest.fail("the agent's OTLP profile of the hot program did not reach the server")
        assert fg.flamegraph.total > 0
        status, data, _ = c.request(
            "GET",
            "/api/v1/flamegraph",
            params={
                "profile_type": "process_cpu:cpu:nanoseconds:cpu:nanoseconds",
                "selector": f'{{e2e_run="{run}"}}',
                "from": now - 600_000,
                "to": now + 60_000,
                "format": "pprof",
            },
        )
        assert status == 200
        path = tmp_path / "got.pb.gz"
        path.write_bytes(data)
        prof = pprof_source.load(Input(str(path)))
        fr = prof.frames
        kinds = {
            fr.strings[fr.name[i]]: FrameKind(fr.kind[i])
            for i in range(len(fr))
            if "agent_otlp_hot_function" in fr.strings[fr.name[i]]
        }
        assert kinds and set(kinds.values()) == {FrameKind.PYTHON}, kinds
        labels = c.get_json("/api/v1/labels", selector=f'{{e2e_run="{run}"}}')
        assert {"host", "service_name", "comm"} <= set(labels["names"])
    finally:
        agent.terminate()
        out, _ = agent.communicate(timeout=60)
        hot.kill()
        hot.wait()
        server.stop()
    assert f"otlp {server.url}/v1development/profiles" in out  # its start line
