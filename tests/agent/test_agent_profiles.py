"""The agent against this machine's real processes: a Python program with known hot
functions, in a Kubernetes pod's cgroup, with Slurm, torchrun and team variables; its
continuous profile shows those functions with the right labels; SIGTERM detaches every
BPF program and flushes the period in progress."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from agent_helpers import CONTAINER_ID, POD_UID, SRC

pytestmark = pytest.mark.usefixtures("ebpf")
PROGRAMS = Path(__file__).parent / "programs"
POD = "train-7b-0"  # the pod kube_cgroup puts the program in
ENV = {
    "AIFLAME_TEAM": "search",
    "AIFLAME_MODEL": "llama-7b",
    "SLURM_JOB_ID": "4242",
    "SLURM_JOB_USER": "alice",
    "RANK": "1",
    "LOCAL_RANK": "1",
    "WORLD_SIZE": "2",
}


def spooled(spool: Path, queue: str = "local") -> list[tuple[dict, Path]]:
    """(metadata, payload path) of each entry of a spool queue, oldest first."""
    out = []
    for meta_path in sorted((spool / queue).glob("*.json")):
        meta = json.loads(meta_path.read_text())
        out.append((meta, meta_path.parent / f"{meta_path.stem}.{meta['ext']}"))
    return out


def test_continuous_profile_of_a_python_program(agents, tmp_path, short_tmp, kube_cgroup):
    import bpfstate  # tests/ebpf: what BPF objects a process holds

    prog = subprocess.Popen(
        [sys.executable, str(PROGRAMS / "hot_model.py"), "150"],
        env={"PATH": os.environ["PATH"], **ENV},
    )
    try:
        kube_cgroup(prog.pid)
        config = tmp_path / "agent.toml"
        config.write_text(f'[labels]\nkube_log_dir = "{kube_cgroup.log_dir}"\n')
        agent = agents(
            [
                "--config", str(config), "--period", "2", "--metrics-listen", "", "--no-nvml",
                "--no-kineto-abstract", "--api-socket", str(short_tmp / "agent.sock"),
                "--trace-dir", str(tmp_path / "t"), "--label", "cluster=lab",
                # 19 Hz throughout, whatever else this machine runs (the budget's own test
                # is in tests/unit), so that enough samples come soon
                "--cpu-budget-percent", "0",
            ],
            tmp_path / "spool",
        )  # fmt: skip
        held = bpfstate.bpf_fds(agent.pid)
        assert any(kind == "prog" for kind, _ in held)
        # 300 samples: the split checked below (2:1) is then 3 standard deviations inside its bounds
        deadline = time.monotonic() + 120
        mine: list = []
        while time.monotonic() < deadline:
            mine = [m for m, _ in spooled(tmp_path / "spool") if m["labels"].get("pod") == POD]
            if sum(m["samples"] for m in mine) >= 300:
                break
            time.sleep(0.5)
        status = agent.stop()
    finally:
        prog.kill()
        prog.wait()
    assert status == 0, agent.output()
    assert "no GPU telemetry" not in agent.output()  # --no-nvml: nothing to say
    assert "stopped: every BPF program detached" in agent.output()
    assert not bpfstate.still_loaded(held), "BPF objects left after SIGTERM"

    entries = [(m, p) for m, p in spooled(tmp_path / "spool") if m["labels"].get("pod") == POD]
    cpu = [(m, p) for m, p in entries if m["profile_type"] == "process_cpu"]
    assert cpu, agent.output()
    labels = cpu[-1][0]["labels"]
    assert labels["namespace"] == "llm" and labels["pod"] == "train-7b-0"
    assert labels["container"] == "trainer" and labels["container_id"] == CONTAINER_ID
    assert labels["pod_uid"] == POD_UID
    assert labels["service_name"] == "llm/train-7b-0"
    assert (labels["team"], labels["model"]) == ("search", "llama-7b")
    assert (labels["job_id"], labels["job_user"]) == ("4242", "alice")
    assert (labels["rank"], labels["local_rank"], labels["world_size"]) == ("1", "1", "2")
    assert labels["cluster"] == "lab" and labels["user"] == "root"
    # the series is the workload's: neither the process id nor its command line
    assert "pid" not in labels and "command" not in labels
    assert len({m["start"] for m, _ in cpu}) == len(cpu)  # one profile of it per period

    from aiflame.sources import load

    attention = mlp = total = 0.0
    for meta, path in cpu:
        profile = load(str(path))
        assert [t.name for t in profile.sample_types] == ["samples", "cpu"]
        # the rate is jittered: each period says the sampling period it had
        nominal = 1e9 / meta["rate_hz"]
        assert 0.79 * nominal <= profile.meta["period"] <= 1.21 * nominal  # type: ignore[operator]
        assert any("jittered" in c for c in profile.meta["comments"])  # type: ignore[union-attr]
        col = profile.values[:, 0]
        for sid, value in profile.iter_stack_values(0):
            names = profile.stack_names(sid)
            total += value
            if any(n.startswith("Model > forward") for n in names):
                if any(n.startswith("attention") for n in names):
                    attention += value
                elif any(n.startswith("mlp") for n in names):
                    mlp += value
        assert col.sum() == meta["samples"]
    assert attention + mlp >= 0.7 * total, (attention, mlp, total)
    assert 1.3 < attention / max(mlp, 1) < 3.5, (attention, mlp)

    # the spool's pprof files are what aiflame flamegraph reads
    out = tmp_path / "flame.html"
    run = subprocess.run(
        [sys.executable, "-m", "aiflame", "flamegraph", *[str(p) for _, p in cpu], "-o", str(out)],
        env={**os.environ, "PYTHONPATH": str(SRC)},
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert out.stat().st_size > 10_000
