"""Joining GPU PC samples to the launch stacks of a trace: a real PyTorch profiler trace
(BERT-small on an H100) and CUPTI dumps naming kernels of that trace (counts made up,
written by NVIDIA's writer), by kernel name and by correlation id."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

import pytest
from cupti_dumps import Buf, Rec, find_util, reason_table, write_dump

from aiflame.cli.main import main
from aiflame.model import FrameKind, gpu
from aiflame.sources import load, load_many

TRACE = (
    Path(__file__).parents[1]
    / "data"
    / "kineto"
    / "tracelens"
    / "h100"
    / "gaunernst_bert-small-uncased__1016001.json.gz"
)
GEMM = "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>"
LAYER_NORM = "vectorized_layer_norm_kernel"

pytestmark = pytest.mark.skipif(find_util() is None, reason="libpcsamplingutil not installed")
REASONS = reason_table()
LONG_SB = next(i for i, n in REASONS.items() if n.endswith("_long_scoreboard"))


def kernel_names() -> dict[str, str]:
    profile = load(str(TRACE))
    out = {}
    for f in range(len(profile.frames)):
        fr = profile.frames.get(f)
        if fr.kind == FrameKind.GPU_KERNEL:
            out[fr.name] = fr.name
    return out


def full_name(part: str) -> str:
    return next(n for n in kernel_names() if part in n)


def launch_times(kernel: str) -> dict[tuple[str, ...], float]:
    """GPU time per launch stack (frames down to '-') of one kernel, from the trace alone."""
    profile = load(str(TRACE))
    col = profile.type_index("gpu-time")
    out: dict[tuple[str, ...], float] = defaultdict(float)
    for s, v in profile.iter_stack_values(col):
        names = profile.stack_names(s)
        if names and names[-1] == kernel:
            out[tuple(names[:-1])] += v
    return out


def test_join_by_kernel_name_spreads_by_gpu_time(tmp_path):
    gemm, norm = full_name(GEMM), full_name(LAYER_NORM)
    dump = tmp_path / "pc.dat"
    write_dump(
        str(dump),
        [Buf([Rec(0, gemm, 0x100, [(LONG_SB, 1000)]), Rec(0, norm, 0x40, [(LONG_SB, 10)])])],
        REASONS,
    )
    joined = load_many([str(TRACE), str(dump)])
    col = joined.type_index("gpu-samples")
    got: dict[tuple[str, ...], float] = defaultdict(float)
    for s, v in joined.iter_stack_values(col):
        names = joined.stack_names(s)
        if names[-3:-2] == [gemm]:
            got[tuple(names[:-3])] += v
    times = launch_times(gemm)
    assert len(times) >= 3  # several launch stacks (module instances merged by default)
    total = sum(times.values())
    assert got.keys() == times.keys()
    for prefix, t in times.items():
        assert got[prefix] == pytest.approx(1000 * t / total)
    assert joined.totals()[col] == pytest.approx(1010)
    assert "kernel name (2 of 2 kernels)" in joined.meta[gpu.META_JOIN]


def correlations() -> list[tuple[int, str, str]]:
    """(correlation, kernel name, runtime call name) of launches in the trace JSON."""
    events = json.loads(gzip.decompress(TRACE.read_bytes()))["traceEvents"]
    runtime = {
        e["args"]["correlation"]: e["name"]
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }
    return [
        (e["args"]["correlation"], e["name"], runtime[e["args"]["correlation"]])
        for e in events
        if e.get("cat") == "kernel" and e.get("args", {}).get("correlation") in runtime
    ]


def test_join_by_correlation_id_takes_the_exact_launch(tmp_path):
    corr, kernel, call = next(c for c in correlations() if GEMM in c[1])
    dump = tmp_path / "pc.dat"
    write_dump(str(dump), [Buf([Rec(0, kernel, 0x80, [(LONG_SB, 42)], correlation=corr)])], REASONS)
    joined = load_many([str(TRACE), str(dump)])
    col = joined.type_index("gpu-samples")
    stacks = [(joined.stack_names(s), v) for s, v in joined.iter_stack_values(col) if v]
    assert len(stacks) == 1  # not spread: one launch
    names, value = stacks[0]
    assert value == 42
    i = names.index("-")
    assert names[i - 1] == call and names[i + 1] == kernel
    assert tuple(names[: i + 1]) in launch_times(kernel)
    assert "correlation id (1 of 1 kernels)" in joined.meta[gpu.META_JOIN]


def test_flamegraph_of_trace_and_samples_says_the_join(tmp_path):
    dump = tmp_path / "pc.dat"
    write_dump(str(dump), [Buf([Rec(0, full_name(GEMM), 0x100, [(LONG_SB, 5)])])], REASONS)
    out = tmp_path / "joined.html"
    assert main(["flamegraph", str(TRACE), str(dump), "-o", str(out)]) == 0
    assert "joined to launch stacks by kernel name" in out.read_text()


def test_kernels_not_in_the_trace_keep_their_stacks(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # demangled in process: no c++filt (binutils)
    dump = tmp_path / "pc.dat"
    write_dump(str(dump), [Buf([Rec(0, "_Z9not_therev", 0x10, [(LONG_SB, 3)])])], REASONS)
    joined = load_many([str(TRACE), str(dump)])
    col = joined.type_index("gpu-samples")
    stacks = [joined.stack_names(s) for s, v in joined.iter_stack_values(col) if v]
    assert stacks == [["not_there()", "+0x10", "long_scoreboard"]]
    assert "not joined" in joined.meta[gpu.META_JOIN]
