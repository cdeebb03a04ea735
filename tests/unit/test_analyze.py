"""aiflame analyze against AMD TraceLens' reference tables for the same traces."""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from aiflame.analysis import gemm, kernels
from aiflame.analysis.timeline import time_breakdown
from aiflame.cli.main import main
from aiflame.model.trace import Kind, is_communication
from aiflame.sources.registry import load_trace

DATA = Path(__file__).resolve().parents[1] / "data" / "kineto" / "tracelens"
TRACES = {
    "h100": "h100/gaunernst_bert-small-uncased__1016001",
    "mi300": "mi300/gaunernst_bert-small-uncased__1016001",
    "triton": "torch_compile_triton/trace",
    "mi210": "mi210/gpu_only_trace",
}
_cache: dict[str, object] = {}


def trace(key: str):  # type: ignore[no-untyped-def]
    if key not in _cache:
        _cache[key] = load_trace(str(DATA / f"{TRACES[key]}.json.gz"))
    return _cache[key]


def table(key: str, name: str) -> list[dict[str, str]]:
    path = DATA / f"{TRACES[key]}_perf_report_csvs" / f"{name}.csv"
    if not path.exists():
        pytest.skip(f"TraceLens wrote no {name}.csv for {key}")
    with path.open(encoding="utf-8") as f:
        return list(csv.DictReader(f))


TIMELINE = {
    "total_time": "total",
    "busy_time": "busy",
    "idle_time": "idle",
    "computation_time": "computation",
    "total_comm_time": "communication",
    "total_memcpy_time": "memcpy",
    "exposed_comm_time": "exposed_communication",
    "exposed_memcpy_time": "exposed_memcpy",
}


@pytest.mark.parametrize("key", TRACES)
def test_time_breakdown_equals_tracelens_gpu_timeline(key):
    assert_breakdown_equals(trace(key), table(key, "gpu_timeline"))


def test_time_breakdown_of_a_graph_replay_step_equals_tracelens():
    folder = DATA / "inference/sglang_decode"  # an SGLang decode step, one HIP graph replay
    with (folder / "perf_csvs/gpu_timeline.csv").open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert_breakdown_equals(load_trace(str(folder / "sglang_Qwen3-8B_decode.json.gz")), rows)


def assert_breakdown_equals(t, rows: list[dict[str, str]]) -> None:  # type: ignore[no-untyped-def]
    ours = time_breakdown(t.gpu_ts, t.gpu_dur, t.gpu_kind).to_record()
    ref = {r["type"]: float(r["time ms"]) * 1000 for r in rows}
    total = ref["total_time"]
    assert total > 0
    for theirs, mine in TIMELINE.items():
        # within 0.5%; a component that is ~0 is compared against 0.5% of the total
        assert getattr(ours, mine) == pytest.approx(ref[theirs], rel=0.005, abs=0.005 * total), mine
    assert ours.busy > 0


@pytest.mark.parametrize(
    "name",
    [
        "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*)",
        "void deep_ep::internode_ll::combine<false, 7168>(void*, void*, int*, void*)",
        "void mori::moe::EpDispatchIntraNodeKernel<__hip_bfloat16>(mori::moe::EpDispatchArgs)",
        "void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*)",
        "void tensorrt_llm::kernels::ar_fusion::allreduce_fusion_kernel_oneshot_lamport<bf16, 8>()",
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    ],
)
def test_transfer_kernels_of_expert_parallel_and_symmetric_memory_libraries_are_communication(name):
    assert is_communication(name)


@pytest.mark.parametrize(
    "name",
    ["triton_per_fused_all_0", "void at::native::reduce_kernel<512, 1>()", "sm90_xmma_gemm_bf16"],
)
def test_compute_kernels_are_not_communication(name):
    assert not is_communication(name)


def test_the_multimem_all_reduces_of_a_vllm_trace_are_communication():
    t = load_trace(str(DATA.parent / "tracelens/b200/eager_trace.json.gz"))
    multimem = np.array(["multimem_all_reduce_kernel" in t.names[i] for i in t.gpu_name])
    assert multimem.any()
    assert (t.gpu_kind[multimem] == Kind.COMM).all()


def test_time_breakdown_identity_and_exposure_on_overlaps():
    # compute [0,10), comm [5,20), memcpy [15,30) and [40,50), memset [60,62): by hand
    ts = np.array([0, 5, 15, 40, 60])
    dur = np.array([10, 15, 15, 10, 2])
    kind = np.array([Kind.COMPUTE, Kind.COMM, Kind.MEMCPY, Kind.MEMCPY, Kind.MEMSET])
    b = time_breakdown(ts, dur, kind)
    assert (b.total, b.busy, b.idle) == (62, 42, 20)
    assert (b.computation, b.communication, b.memcpy, b.memset) == (12, 15, 25, 2)
    assert b.exposed_communication == 10  # [10,20)
    assert b.exposed_memcpy == 20  # [20,30) and [40,50)
    assert b.computation + b.exposed_communication + b.exposed_memcpy + b.idle == b.total


@pytest.mark.parametrize("key", TRACES)
def test_top_kernels_equal_kernel_summary(key):
    ref: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for r in table(key, "kernel_summary"):
        ref[r["Kernel name"]][0] += float(r["Kernel duration (µs)_sum"])
        ref[r["Kernel name"]][1] += int(r["Kernel duration (µs)_count"])
    rows = kernels.top_kernels(trace(key), top=10_000)
    assert {r.name for r in rows} == set(ref)
    for r in rows:
        assert r.total_us == pytest.approx(ref[r.name][0], rel=1e-4)
        assert r.count == ref[r.name][1]


@pytest.mark.parametrize("key", ["h100", "mi300", "triton"])
def test_top_ops_equal_ops_summary(key):
    ref = {r["name"]: r for r in table(key, "ops_summary")}
    rows = kernels.top_ops(trace(key), top=10_000)
    assert {r.name for r in rows} == set(ref)
    for r in rows:
        direct = float(ref[r.name]["total_direct_kernel_time_sum"])
        assert r.total_us == pytest.approx(direct, rel=1e-3)
        assert r.count == int(ref[r.name]["Count"])


@pytest.mark.parametrize("key", TRACES)
def test_short_kernel_histogram_equals_tracelens(key):
    ref = table(key, "short_kernel_histogram")
    sk = kernels.short_kernels(trace(key))
    assert sk.histogram.counts == [int(r["count"]) for r in ref]
    assert sk.count == sum(int(r["count"]) for r in ref)
    if ref:
        assert sk.histogram.bin_edges_us[:-1] == pytest.approx([float(r["bin_start"]) for r in ref])


@pytest.mark.parametrize("key", ["h100", "mi300", "triton"])
def test_gemm_flops_bytes_rate_equal_gemm_csv(key):
    ref = table(key, "GEMM")
    ours = {}
    for row in gemm.gemm_table(trace(key)):
        ours[(row.op, row.M, row.N, row.K)] = row
    assert len(ours) == len(ref) > 0
    for r in ref:
        g = ours[(r["name"], int(r["param: M"]), int(r["param: N"]), int(r["param: K"]))]
        assert g.flops / 1e9 == pytest.approx(float(r["GFLOPS_first"]), rel=0.01)
        assert g.bytes / 2**20 == pytest.approx(float(r["Data Moved (MB)_first"]), rel=0.01)
        assert g.tflops_per_s == pytest.approx(float(r["TFLOPS/s_mean"]), rel=0.01)
        assert g.calls == int(r["name_count"])


def test_gemm_shape_model():
    s = gemm.gemm_shape("aten::addmm", [[512], [141, 512], [512, 512]], ["c10::BFloat16"] * 3)
    assert s is not None and (s.m, s.n, s.k, s.bias) == (141, 512, 512, True)
    assert s.flops == 2 * 141 * 512 * 512 + 141 * 512
    b = gemm.gemm_shape("aten::bmm", [[8, 4, 16], [8, 16, 32]], ["float", "float"])
    assert b is not None and b.flops == 8 * 2 * 4 * 32 * 16
    assert b.bytes == 8 * (4 * 16 + 16 * 32 + 4 * 32) * 4
    assert gemm.gemm_shape("aten::mm", [[], []], ["float", "float"]) is None
    assert gemm.gemm_shape("aten::linear", [[2, 3], [3, 4]], ["float"] * 2) is None


def test_cli_json_schema(tmp_path, capsys):
    out = tmp_path / "r.json"
    path = str(DATA / f"{TRACES['h100']}.json.gz")
    assert main(["analyze", path, "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "GPU time breakdown" in text and "aten::addmm" in text
    report = json.loads(out.read_text())
    (rank,) = report["ranks"]
    assert set(rank["time_breakdown"]) >= set(TIMELINE.values())
    assert rank["time_breakdown"]["busy"] == pytest.approx(309.4377, rel=1e-4)  # TraceLens
    g = rank["gemm"][0]
    assert {"flops", "bytes", "tflops_per_s", "M", "N", "K", "dtype"} <= set(g)
    f = rank["findings"][0]
    assert {"rule", "severity", "title", "cost_us", "summary", "assumption", "fix"} <= set(f)
    assert all({"label", "value", "unit"} == set(x) for x in f["figures"])


def test_cli_gpu_only_trace_says_what_is_missing(capsys):
    assert main(["analyze", str(DATA / f"{TRACES['mi210']}.json.gz")]) == 0
    out = capsys.readouterr().out
    assert "no CPU operators" in out and "idle" in out


def test_cli_bad_input_is_one_line(tmp_path, capsys):
    bad = tmp_path / "x.json"
    bad.write_text('{"traceEvents": [')
    assert main(["analyze", str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "x.json" in err
    assert main(["analyze", str(tmp_path / "missing.json")]) == 1
    assert "no such file" in capsys.readouterr().err


def test_cli_cpu_only_trace_says_there_is_no_gpu_activity(capsys):
    cpu_only = next((DATA.parent / "hta" / "cpu_only").glob("*.json.gz"))
    assert main(["analyze", str(cpu_only)]) == 0
    out = capsys.readouterr().out
    assert "no GPU activity" in out and "GPU time breakdown" not in out
