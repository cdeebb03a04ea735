"""On-demand traces of an unmodified PyTorch program: the CPU wheel's own libkineto, started
with KINETO_USE_DAEMON=1 and KINETO_IPC_SOCKET_DIR, polls the agent; ``aiflame trace --pid``
of its launcher traces it (the launcher, which runs no PyTorch, is skipped), the trace has
aten ops under the script's Python functions, and a second request while the first runs is
refused in one clear line."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from agent_helpers import SRC, need

from aiflame.agent.api import unix_request

pytestmark = pytest.mark.usefixtures("ebpf")
PROGRAMS = Path(__file__).parent / "programs"


def trace_cmd(sock: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "aiflame", "trace", "--agent", str(sock), *args]


def test_trace_a_pytorch_training_loop_on_demand(agents, tmp_path, short_tmp):
    try:
        import torch  # noqa: F401
    except ImportError:
        need(False, "PyTorch is not installed (pip install torch; the CPU wheel will do)")
    sock = short_tmp / "agent.sock"
    kineto_dir = short_tmp / "k"
    agent = agents(
        ["--period", "5", "--metrics-listen", "", "--no-kineto-abstract", "--no-cuda",
         "--no-nvml", "--kineto-socket-dir", str(kineto_dir), "--api-socket", str(sock),
         "--trace-dir", str(tmp_path / "traces")],
        tmp_path / "spool",
    )  # fmt: skip
    env = {**os.environ, "KINETO_USE_DAEMON": "1", "KINETO_IPC_SOCKET_DIR": str(kineto_dir)}
    ready = tmp_path / "ready"  # the loop is past its start (imports, the first steps)
    # a launcher that stays the parent (as torchrun does), with the training loop below it
    launcher = subprocess.Popen(
        ["bash", "-c", f"{sys.executable} {PROGRAMS / 'train_loop.py'} 150 {ready}; true"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    run_env = {**os.environ, "PYTHONPATH": str(SRC)}
    polling: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (polling and ready.exists()):
            status, answer = unix_request(str(sock), "GET", "/v1/status", None, 10)
            assert status == 200
            polling = answer["kineto_processes"]
            time.sleep(0.5)
        assert len(polling) == 1, "the training loop never polled the agent"
        child = polling[0]
        assert child != launcher.pid
        out = tmp_path / "out"
        t0 = time.monotonic()
        first = subprocess.Popen(
            trace_cmd(sock, "--pid", str(launcher.pid), "--duration-ms", "1000", "-o", str(out)),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=run_env,
        )  # fmt: skip
        time.sleep(2.0)  # the first request is waiting for the process's next poll
        second = subprocess.run(
            trace_cmd(sock, "--pid", str(child)), capture_output=True, text=True, env=run_env,
            timeout=120,
        )  # fmt: skip
        stdout, stderr = first.communicate(timeout=300)
        latency = time.monotonic() - t0
    finally:
        for pid in [p for p in polling if p != launcher.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        launcher.kill()
        launcher.wait()
    assert second.returncode == 1
    assert second.stderr.strip() == f"aiflame: error: a trace of PID {child} is already running"
    assert first.returncode == 0, stderr + agent.output()
    assert f"skipped PID {launcher.pid}: a launcher" in stderr
    paths = stdout.split()
    assert (
        len(paths) == 1 and Path(paths[0]).parent == out and paths[0].endswith(".pt.trace.json.gz")
    )
    assert latency < 120

    from aiflame.sources import load

    profile = load(paths[0])  # the Kineto importer: Python frames -> ops
    under_step = set()
    for sid, _ in profile.iter_stack_values(profile.type_index("cpu-time")):
        names = profile.stack_names(sid)
        steps = [i for i, n in enumerate(names) if n.startswith("train_step")]
        if steps:
            under_step.update(n for n in names[steps[0] + 1 :] if n.startswith("aten::"))
    assert {"aten::addmm", "aten::relu"} <= under_step, sorted(under_step)
    assert any(
        n.startswith("Net > forward")
        for sid, _ in profile.iter_stack_values(0)
        for n in profile.stack_names(sid)
    )
    # nothing left in the program's /tmp (its own files: others' may be there meanwhile)
    left = list(Path("/tmp").glob(f"aiflame-trace-*_{child}.json*"))
    assert not left, f"trace files left behind: {left}"


def test_a_fleet_wide_request_from_the_server_is_traced_and_uploaded(agents, tmp_path, short_tmp):
    """The server asks in its answer to a heartbeat; the agent traces the job's processes
    and uploads each trace with its labels and the request's id."""
    try:
        import torch  # noqa: F401
    except ImportError:
        need(False, "PyTorch is not installed (pip install torch; the CPU wheel will do)")
    from standin_server import StandIn

    server = StandIn()
    server.start()
    kineto_dir = short_tmp / "k"
    # libkineto binds its own endpoint in the directory once, when it starts: the directory
    # must exist by then (the agent, started after the program here, serves it later)
    kineto_dir.mkdir()
    ready = tmp_path / "ready"
    env = {
        **os.environ, "KINETO_USE_DAEMON": "1", "KINETO_IPC_SOCKET_DIR": str(kineto_dir),
        "SLURM_JOB_ID": "8812", "AIFLAME_TEAM": "search",
    }  # fmt: skip
    loop = subprocess.Popen(
        [sys.executable, str(PROGRAMS / "train_loop.py"), "150", str(ready)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        agent = agents(
            ["--server", server.url, "--period", "2", "--metrics-listen", "", "--no-cuda",
             "--no-nvml", "--no-kineto-abstract", "--kineto-socket-dir", str(kineto_dir),
             "--api-socket", str(short_tmp / "a.sock"), "--trace-dir", str(tmp_path / "traces")],
            tmp_path / "spool",
        )  # fmt: skip
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not ready.exists():
            time.sleep(0.5)
        time.sleep(6)  # one poll: the process is known to the agent
        server.heartbeat_answer = {
            "requests": [{"request_id": "r-19", "selector": {"job_id": "8812"}, "duration_ms": 800}]
        }
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not server.got.traces:
            time.sleep(0.5)
        assert agent.stop() == 0
    finally:
        loop.kill()
        loop.wait()
        server.stop()
    assert server.got.heartbeats, "no heartbeat"
    beat = server.got.heartbeats[0]
    assert beat["host"] and beat["sampling_rate_hz"] >= 1 and "spool_bytes" in beat
    assert len(server.got.traces) == 1, agent.output()
    (trace,) = server.got.traces.values()
    assert trace["request_id"] == "r-19"
    assert trace["labels"]["job_id"] == "8812" and trace["labels"]["team"] == "search"
    assert trace["labels"]["pid"] == str(loop.pid)
    import gzip
    import json

    events = json.loads(gzip.decompress(trace["bytes"]))["traceEvents"]
    assert any(e.get("name", "").startswith("aten::") for e in events)


def test_a_pod_without_mounts_is_traced_in_its_own_network_namespace(agents, tmp_path, short_tmp):
    """A PyTorch program in a network namespace of its own (``unshare --net``, as a pod
    without hostNetwork), started with KINETO_USE_DAEMON=1 and nothing else (no socket
    directory, nothing mounted): the agent serves @dynolog inside that namespace, the
    program polls it there, and ``aiflame trace --pid`` traces it."""
    try:
        import torch  # noqa: F401
    except ImportError:
        need(False, "PyTorch is not installed (pip install torch; the CPU wheel will do)")
    unshare = shutil.which("unshare")
    need(unshare is not None and os.geteuid() == 0, "needs root and unshare (util-linux)")
    sock = short_tmp / "agent.sock"
    ready = tmp_path / "ready"
    env = {**os.environ, "KINETO_USE_DAEMON": "1"}  # abstract @dynolog, as a pod has it
    env.pop("KINETO_IPC_SOCKET_DIR", None)
    loop = subprocess.Popen(
        [unshare, "--net", sys.executable, str(PROGRAMS / "train_loop.py"), "150", str(ready)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    # not the agent's (the host's) network namespace: unreachable by its own @dynolog
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{loop.pid}/ns/net") != os.readlink("/proc/self/ns/net"):
                break
        time.sleep(0.05)
    assert os.readlink(f"/proc/{loop.pid}/ns/net") != os.readlink("/proc/self/ns/net")
    run_env = {**os.environ, "PYTHONPATH": str(SRC)}
    try:
        agent = agents(
            ["--period", "5", "--metrics-listen", "", "--no-cuda", "--no-nvml",
             "--api-socket", str(sock), "--trace-dir", str(tmp_path / "traces")],
            tmp_path / "spool",
        )  # fmt: skip
        polling: list[int] = []
        status: dict = {}
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline and not (polling and ready.exists()):
            code, status = unix_request(str(sock), "GET", "/v1/status", None, 10)
            assert code == 200
            polling = status["kineto_processes"]
            time.sleep(0.5)
        assert polling == [loop.pid], (status, agent.output())
        assert status["kineto_namespaces"] >= 1
        out = tmp_path / "out"
        run = subprocess.run(
            trace_cmd(sock, "--pid", str(loop.pid), "--duration-ms", "800", "-o", str(out)),
            capture_output=True, text=True, env=run_env, timeout=300,
        )  # fmt: skip
    finally:
        loop.kill()
        loop.wait()
    assert run.returncode == 0, run.stderr + agent.output()
    paths = run.stdout.split()
    assert len(paths) == 1 and Path(paths[0]).parent == out

    from aiflame.sources import load

    profile = load(paths[0])
    names = {n for sid, _ in profile.iter_stack_values(0) for n in profile.stack_names(sid)}
    assert any(n.startswith("aten::addmm") for n in names), sorted(names)[:20]
    assert agent.stop() == 0


def test_only_real_libkineto_clients_count(agents, tmp_path, short_tmp):
    """Anything may send to the world-writable endpoint: a Python program without PyTorch
    that polls from an endpoint named as libkineto's is not a PyTorch process."""
    sock = short_tmp / "agent.sock"
    kineto_dir = short_tmp / "k"
    agent = agents(
        ["--period", "5", "--metrics-listen", "", "--no-cuda", "--no-nvml",
         "--no-kineto-abstract", "--no-kineto-netns", "--kineto-socket-dir", str(kineto_dir),
         "--api-socket", str(sock), "--trace-dir", str(tmp_path / "traces")],
        tmp_path / "spool",
    )  # fmt: skip
    poser = subprocess.Popen(
        [sys.executable, "-c", POSER, str(kineto_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        answered, _ = poser.communicate(timeout=60)
        code, status = unix_request(str(sock), "GET", "/v1/status", None, 10)
    finally:
        poser.kill()
    assert answered.strip() == "answered", answered
    assert code == 200 and status["kineto_processes"] == [], status
    assert agent.stop() == 0


# A poser: polls the agent's directory endpoint as libkineto does, from a Python process
# that never loaded PyTorch; prints "answered" once the agent has answered its polls.
POSER = """
import os, socket, struct, sys, uuid
d = sys.argv[1]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(os.path.join(d, "dynoconfigclient" + str(uuid.uuid4())))
s.settimeout(5)
me = os.getpid()
for kind, payload in (("ctxt", struct.pack("=iiq", 0, me, 0)),
                      ("req", struct.pack("=iiq", 2, 1, 0) + struct.pack("=i", me))):
    s.sendto(struct.pack("=Q32s", len(payload), kind.encode()) + payload,
             os.path.join(d, "dynolog"))
    s.recv(4096)
print("answered")
"""
