"""GPU memory snapshots on request (``aiflame trace --memory-snapshot``) of PyTorch programs
started with the aiflame bootstrap and AIFLAME_SNAPSHOT=1: the agent asks through the
signal the program announced, the program answers with ``torch.cuda.memory._snapshot()``
and the agent writes it where ``aiflame memory`` reads it. No GPU here: one program's
``_snapshot`` answers with a real snapshot recorded on a GPU (tests/data/memory), the
other runs the CPU wheel's own call, which fails and is said in one line."""

from __future__ import annotations

import gzip
import os
import pickle
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from agent_helpers import SRC, need

pytestmark = pytest.mark.usefixtures("ebpf")
PROGRAMS = Path(__file__).parent / "programs"
BOOTSTRAP = SRC / "aiflame" / "collectors" / "torch_bootstrap"
RECORDED = Path(__file__).parents[1] / "data" / "memory" / "cs336_forward_memory_snapshot.pickle.gz"


def start(ready: Path, *args: str) -> subprocess.Popen:
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(BOOTSTRAP), "AIFLAME_SNAPSHOT": "1"}
    program = [sys.executable, str(PROGRAMS / "snapshot_model.py"), str(ready), *args]
    return subprocess.Popen(program, env=env)


def test_memory_snapshot_on_request(agents, tmp_path, short_tmp):
    try:
        import torch  # noqa: F401
    except ImportError:
        need(False, "PyTorch is not installed (pip install torch; the CPU wheel will do)")
    sock = short_tmp / "agent.sock"
    agent = agents(
        ["--period", "5", "--metrics-listen", "", "--no-kineto-abstract", "--no-cuda",
         "--no-nvml", "--api-socket", str(sock), "--trace-dir", str(tmp_path / "traces")],
        tmp_path / "spool",
    )  # fmt: skip
    good = start(tmp_path / "ready-good", str(RECORDED))
    cpu_only = start(tmp_path / "ready-cpu")
    plain = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    run_env = {**os.environ, "PYTHONPATH": str(SRC)}
    out = tmp_path / "out"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not all(
            (tmp_path / f"ready-{n}").exists() for n in ("good", "cpu")
        ):
            time.sleep(0.2)
        cmd = [sys.executable, "-m", "aiflame", "trace", "--agent", str(sock),
               "--memory-snapshot", "-o", str(out), "--pid"]  # fmt: skip
        ok = subprocess.run([*cmd, str(good.pid)], capture_output=True, text=True, env=run_env,
                            timeout=120)  # fmt: skip
        bad = subprocess.run([*cmd, str(cpu_only.pid), str(plain.pid)], capture_output=True,
                             text=True, env=run_env, timeout=120)  # fmt: skip
        alive = good.poll() is None and cpu_only.poll() is None
    finally:
        for p in (good, cpu_only, plain):
            p.kill()
            p.wait()
    assert agent.stop() == 0, agent.output()
    assert alive, "a program did not survive the request"

    assert ok.returncode == 0, ok.stderr
    path = Path(ok.stdout.strip())
    assert path.parent == out
    assert re.search(rf"-{good.pid}-[0-9a-f]{{12}}\.memory-snapshot\.pickle\.gz$", path.name)
    with gzip.open(path, "rb") as f, gzip.open(RECORDED, "rb") as g:
        assert pickle.load(f) == pickle.load(g)  # the program's snapshot, byte for byte
    html = tmp_path / "mem.html"
    memory = subprocess.run([sys.executable, "-m", "aiflame", "memory", str(path), "-o", str(html)],
                            capture_output=True, text=True, env=run_env)  # fmt: skip
    assert memory.returncode == 0, memory.stderr
    assert html.stat().st_size > 10_000
    assert not list(Path("/tmp").glob(f"aiflame-snapshot-{good.pid}-*"))  # nothing left behind

    assert bad.returncode != 0
    lines = bad.stderr.strip().splitlines()
    assert any(f"PID {cpu_only.pid}: the snapshot failed: AttributeError" in x for x in lines), (
        lines
    )
    assert any(f"PID {plain.pid}: does not serve memory snapshots" in x for x in lines), lines
    assert lines[-1] == "aiflame: error: no memory snapshot was written", lines


def test_snapshots_asked_by_the_server_and_by_trace_server_are_uploaded(
    agents, tmp_path, short_tmp
):
    """A fleet request of kind memory-snapshot (in the answer to a heartbeat) and
    ``aiflame trace --memory-snapshot --server``: the snapshot is written and uploaded with
    the process's labels, the first with the server's request id."""
    try:
        import torch  # noqa: F401
    except ImportError:
        need(False, "PyTorch is not installed (pip install torch; the CPU wheel will do)")
    from standin_server import StandIn

    server = StandIn()
    server.start()
    sock = short_tmp / "agent.sock"
    good = start(tmp_path / "ready-good", str(RECORDED))
    run_env = {**os.environ, "PYTHONPATH": str(SRC)}
    try:
        agent = agents(
            ["--server", server.url, "--period", "2", "--metrics-listen", "",
             "--no-kineto-abstract", "--no-cuda", "--no-nvml", "--api-socket", str(sock),
             "--trace-dir", str(tmp_path / "traces")],
            tmp_path / "spool",
        )  # fmt: skip
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (tmp_path / "ready-good").exists():
            time.sleep(0.2)
        server.heartbeat_answer = {
            "requests": [
                {"request_id": "r-7", "kind": "memory-snapshot", "selector": {"pids": [good.pid]}}
            ]
        }
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not server.got.traces:
            time.sleep(0.3)
        cli = subprocess.run(
            [sys.executable, "-m", "aiflame", "trace", "--agent", str(sock), "--memory-snapshot",
             "--server", "--pid", str(good.pid)],
            capture_output=True, text=True, env=run_env, timeout=120,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(server.got.traces) < 2:
            time.sleep(0.3)
        assert agent.stop() == 0, agent.output()
    finally:
        good.kill()
        good.wait()
        server.stop()
    assert cli.returncode == 0, cli.stderr
    assert Path(cli.stdout.strip()).name.endswith(".memory-snapshot.pickle.gz")
    assert len(server.got.traces) == 2, agent.output()
    by_request = {t["request_id"]: t for t in server.got.traces.values()}
    assert "r-7" in by_request, by_request.keys()
    with gzip.open(RECORDED, "rb") as g:
        recorded = pickle.load(g)
    for t in server.got.traces.values():
        assert t["labels"]["pid"] == str(good.pid) and t["labels"]["host"]
        assert pickle.loads(gzip.decompress(t["bytes"])) == recorded
