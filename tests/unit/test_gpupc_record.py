"""``aiflame record --gpu-pc-sampling`` around the collector (which needs a GPU to sample):
the merge of what it leaves in a recording directory, on recorded data (a real PyTorch
profiler trace, and a dump in NVIDIA's format whose correlation ids are launches of that
trace), and the collector's start in a real interpreter without a GPU."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cupti_dumps import Buf, Rec, find_util, reason_table, write_dump

from aiflame.collectors.gpupc import collector_env, join_with_windows, load_gpu_samples
from aiflame.collectors.torchtrace import load_torch_traces
from aiflame.model import FrameKind, gpu

DATA = Path(__file__).parents[1] / "data"
TRACE = DATA / "kineto" / "tracelens" / "h100" / "gaunernst_bert-small-uncased__1016001.json.gz"
BOOTSTRAP = Path(__file__).parents[2] / "src" / "aiflame" / "collectors" / "torch_bootstrap"
PID = 4321
REASONS = reason_table()
LONG_SB = next(i for i, n in REASONS.items() if n.endswith("_long_scoreboard"))
NOT_ISSUED = next(i for i, n in REASONS.items() if n.endswith("_long_scoreboard_not_issued"))


def launches(n: int) -> list[tuple[int, str]]:
    events = json.loads(gzip.decompress(TRACE.read_bytes()))["traceEvents"]
    out = [
        (e["args"]["correlation"], e["name"])
        for e in events
        if e.get("cat") == "kernel" and "correlation" in e.get("args", {})
    ]
    return out[:n]


@pytest.fixture
def record_dir(tmp_path) -> Path:
    if find_util() is None:
        pytest.skip("libpcsamplingutil not installed")
    d = tmp_path / "rec"
    d.mkdir()
    (d / f"torch-{PID}.json").write_bytes(gzip.decompress(TRACE.read_bytes()))
    recs = [
        Rec(0, name, 0x10 * (k + 1), [(LONG_SB, 10 + k), (NOT_ISSUED, 9)], correlation=corr)
        for k, (corr, name) in enumerate(launches(6))
    ]
    write_dump(str(d / f"gpupc-{PID}.dat"), [Buf(recs[:3]), Buf(recs[3:])], REASONS)
    (d / f"gpupc-{PID}.error").write_text("GPU PC sampling is not permitted (example line)\n")
    return d


def test_recorded_samples_join_the_window_of_their_process(record_dir):
    notes: list[str] = []
    labels = {PID: {"rank": "0"}}
    torch = load_torch_traces(str(record_dir), labels, notes)
    samples = load_gpu_samples(str(record_dir), labels, notes)
    assert len(torch) == 1 and len(samples) == 1
    (joined,) = join_with_windows(torch, samples)
    assert "correlation id (" in joined.meta[gpu.META_JOIN]
    col = joined.type_index("gpu-samples")
    assert joined.totals()[col] == sum(10 + k for k in range(6))  # not_issued left out
    for s in range(len(joined)):
        frames = joined.stack_frames(int(joined.sample_stack[s]))
        kinds = [f.kind for f in frames]
        i = kinds.index(FrameKind.DELIMITER)
        assert kinds[i - 1] == FrameKind.RUNTIME  # the launch call of that correlation id
        assert kinds[i + 1] == FrameKind.GPU_KERNEL
        assert joined.labels_of(s)["pid"] == str(PID)
        assert joined.labels_of(s)["rank"] == "0"
    assert any("not permitted" in n and str(PID) in n for n in notes)


def test_other_processes_are_not_joined(record_dir):
    notes: list[str] = []
    shutil.move(record_dir / f"torch-{PID}.json", record_dir / "torch-999.json")
    torch = load_torch_traces(str(record_dir), {}, notes)
    (joined,) = join_with_windows(torch, load_gpu_samples(str(record_dir), {}, notes))
    assert gpu.META_JOIN not in joined.meta  # correlation ids of another process mean nothing


def test_mode_follows_the_window():
    assert collector_env(5.0) == {"AIFLAME_GPU_PC_SAMPLING": "serialized"}
    assert collector_env(0.0) == {"AIFLAME_GPU_PC_SAMPLING": "continuous"}


def test_collector_without_a_gpu_leaves_the_program_alone(tmp_path):
    env = dict(os.environ)
    env.update(
        PYTHONPATH=str(BOOTSTRAP),
        AIFLAME_RECORD_DIR=str(tmp_path),
        AIFLAME_GPU_PC_SAMPLING="serialized",
        AIFLAME_TORCH_WINDOW="0",
    )
    out = subprocess.run(
        [sys.executable, "-c", "print(sum(range(10)))"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and out.stdout == "45\n" and out.stderr == ""
    errors = list(tmp_path.glob("gpupc-*.error"))
    assert errors, "the collector says why it recorded nothing"
    text = errors[0].read_text()
    assert text.count("\n") >= 1 and ("CUPTI" in text or "libcupti" in text)


def test_record_needs_a_command():
    from aiflame.cli.main import main

    assert main(["record", "--gpu-pc-sampling", "--pid", "1"]) == 1
