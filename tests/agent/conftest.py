"""``aiflame agent`` run for real: as root, in a process of its own, against this machine's
processes, a stand-in NVML library built here, Prometheus and PyTorch. Tests that need
root and eBPF skip elsewhere, unless AIFLAME_REQUIRE_EBPF=1 (CI), where that is a failure.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from agent_helpers import CONTAINER_ID, HERE, POD_UID, SRC, need, need_fleet_extra

sys.path.append(str(HERE.parent / "ebpf"))  # bpfstate: what BPF objects a process holds


@pytest.fixture(scope="session")
def ebpf() -> None:
    from aiflame.collectors.ebpf.support import unavailable_reason

    reason = unavailable_reason()
    need(not reason, f"the agent's tests: {reason}")


@pytest.fixture(scope="session")
def nvml_lib(tmp_path_factory) -> Path:
    """The stand-in libnvidia-ml.so.1 (nvml/fake_nvml.c), in a directory of its own."""
    gcc = shutil.which("gcc")
    need(gcc is not None, "gcc is not installed")
    out = tmp_path_factory.mktemp("nvml")
    subprocess.run(
        [gcc, "-O1", "-g", "-Wall", "-shared", "-fPIC", "-Wl,-soname,libnvidia-ml.so.1",
         "-o", str(out / "libnvidia-ml.so.1"), str(HERE / "nvml" / "fake_nvml.c")],
        check=True,
    )  # fmt: skip
    return out


@pytest.fixture
def short_tmp():
    """A short directory for Unix sockets (their paths are limited to 107 bytes)."""
    d = tempfile.mkdtemp(prefix="aft", dir="/tmp")
    yield Path(d)
    shutil.rmtree(d, ignore_errors=True)


@dataclass
class AgentProcess:
    proc: subprocess.Popen
    spool: Path
    lines: list[str] = field(default_factory=list)
    metrics_port: int = 0

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_line(self, text: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if text in line:
                    return line
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"the agent did not print {text!r}:\n{self.output()}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(
                f"the agent did not stop within {timeout:g} s:\n{self.output()}"
            ) from None


def start_agent(args: list[str], spool: Path, env: dict[str, str] | None = None) -> AgentProcess:
    """``aiflame agent ARGS --spool SPOOL`` started, its stderr collected; returns once it
    says it started."""
    need_fleet_extra()
    full_env = {**os.environ, "PYTHONPATH": str(SRC), **(env or {})}
    proc = subprocess.Popen(
        [sys.executable, "-m", "aiflame", "agent", "--spool", str(spool), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=full_env,
    )
    agent = AgentProcess(proc, spool)

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            agent.lines.append(line.rstrip("\n"))

    threading.Thread(target=read, daemon=True).start()
    started = agent.wait_line("aiflame agent: started", timeout=120)
    if "/metrics on " in started:
        agent.metrics_port = int(started.split("/metrics on ")[1].split(",")[0].rsplit(":", 1)[1])
    return agent


@pytest.fixture
def agents():
    """Agents started in a test are stopped at its end, whatever happens."""
    started: list[AgentProcess] = []

    def run(args: list[str], spool: Path, env: dict[str, str] | None = None) -> AgentProcess:
        a = start_agent(args, spool, env)
        started.append(a)
        return a

    yield run
    for a in started:
        if a.proc.poll() is None:
            a.proc.kill()
            a.proc.wait(10)


@pytest.fixture
def kube_cgroup(tmp_path):
    """``place(pid)``: moves a process into a containerd pod cgroup of the systemd layout
    (created under this machine's cgroup2 hierarchy, removed at the end), with the
    kubelet's log link of its container in ``tmp_path/containers``."""
    from aiflame.collectors.ebpf.cgroups import cgroup2_root

    root = cgroup2_root()
    need(os.geteuid() == 0 and root is not None and os.access(root, os.W_OK),
         "needs root and a writable cgroup2 hierarchy")  # fmt: skip
    uid_ = POD_UID.replace("-", "_")
    rel = (
        f"aiflame-test-{os.getpid()}/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{uid_}.slice/cri-containerd-{CONTAINER_ID}.scope"
    )
    made: list[Path] = []
    path = Path(root)
    for part in rel.split("/"):
        path = path / part
        if not path.exists():
            path.mkdir()
            made.append(path)
    logs = tmp_path / "containers"
    logs.mkdir()
    (logs / f"train-7b-0_llm_trainer-{CONTAINER_ID}.log").symlink_to("/dev/null")

    def place(pid: int) -> None:
        (path / "cgroup.procs").write_text(str(pid))

    place.log_dir = str(logs)  # type: ignore[attr-defined]
    yield place
    for d in reversed(made):
        for _ in range(100):
            try:
                d.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.1)
