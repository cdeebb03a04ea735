"""Insight rules one by one: each on a real trace where its pattern occurs and on one where
it does not; graph replays, devices named by their properties, traces without a rank."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from aiflame.analysis import (
    analyze,
    devices,
    insights,
    read,
    rules_copies,
    rules_gpu,
    rules_host,
)
from aiflame.cli.main import main
from aiflame.sources.registry import load_trace

DATA = Path(__file__).resolve().parents[1] / "data" / "kineto"
BERT = DATA / "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"
COMPILED = DATA / "tracelens/torch_compile_triton/trace.json.gz"  # GPU busy end to end
RESNET = DATA / "param/resnet_kineto.iteration.json.gz"
RESNET_V100 = DATA / "kineto_tb_plugin/resnet50_num_workers_4_worker0.step6.pt.trace.json.gz"
GPU_ONLY = DATA / "tracelens/mi210/gpu_only_trace.json.gz"
TOY = DATA / "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"
OWL_MI300 = DATA / "tracelens/mi300/google_owlv2-large-patch14-ensemble__1016001.trimmed.json.gz"
VLLM = DATA / "tracelens/inference/vllm_decode_full"
REPLAY = VLLM / "graph_execution.json.gz"
CAPTURE = next((VLLM / "capture_traces").glob("*.pt.trace.json.gz"))
CLOVER = DATA.parent / "nsys/cloverleaf/perlmutter-cloverleaf-cuda.sqlite"
SGLANG = DATA / "tracelens/inference/sglang_decode"
_cache: dict[Path, insights.Context] = {}


def ctx(path: Path) -> insights.Context:
    if path not in _cache:
        t = load_trace(str(path))
        _cache[path] = insights.Context(t, devices.resolve(t.device_info)[0])
    return _cache[path]


def events(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)["traceEvents"]


def figures(d: insights.Draft) -> dict:
    return {f.label: f.value for f in d.figures}


def test_launch_bound_needs_back_to_back_launches():
    d = rules_host.launch_bound(ctx(BERT))
    assert d is not None
    L = ctx(BERT).launch
    assert L is not None and L.launches == 61 and L.shorter_than_launch == 40
    p = L.launch_bound_phases[0]
    assert p.median_interval_us <= 100 and 0.05 <= p.gpu_busy_share <= 0.5
    assert d.cost_ns == pytest.approx(L.launch_bound.overhead_idle_us * 1e3)
    assert rules_host.launch_bound(ctx(COMPILED)) is None
    assert ctx(COMPILED).launch.shorter_than_launch == 0


def test_host_overhead_on_a_training_step_not_on_a_busy_gpu():
    d = rules_host.host_overhead(ctx(RESNET_V100))
    assert d is not None and d.cost_ns > 0.05 * ctx(RESNET_V100).total_ns
    assert rules_host.host_overhead(ctx(COMPILED)) is None


def test_sync_stalls_on_a_program_that_synchronizes_after_each_kernel():
    c = ctx(CLOVER)  # cudaDeviceSynchronize after each of 1,312 kernels
    d = rules_host.sync_stalls(c)
    assert d is not None and c.sync is not None
    assert c.sync.by_call["cudaDeviceSynchronize"].count == 1312
    # charged only the time the calls held the CPU back, not all the idle after them
    assert (
        d.cost_ns
        <= c.sync.gpu_idle_after_us * 1e3 + figures(d)["of it in synchronous copies"] * 1e3
    )


def test_no_sync_stall_where_the_cpu_was_busy_after_the_call():
    # MI300X OWLv2: a hipMemcpyWithStream spans the moment the GPU runs dry, then the CPU
    # preprocesses the next image for 138 ms: that gap is not the copy's doing.
    c = ctx(OWL_MI300)
    assert c.sync is not None and c.sync.gpu_idle_after_us > 100_000
    assert c.sync.gpu_idle_caused_us < 0.02 * c.sync.gpu_idle_after_us
    assert rules_host.sync_stalls(c) is None


def test_final_synchronize_after_the_last_kernel_is_no_stall():
    c = ctx(COMPILED)
    names = np.array(c.t.names)[c.t.cpu_name]
    assert np.any(names == "hipDeviceSynchronize")  # the pattern's calls are there
    assert rules_host.sync_stalls(c) is None


def test_pageable_copies_counted_like_the_trace():
    expected = [e for e in events(RESNET) if e.get("name") == "Memcpy HtoD (Pageable -> Device)"]
    d = rules_copies.pageable_copies(ctx(RESNET))
    assert d is not None and figures(d)["copies"] == len(expected) > 0
    assert figures(d)["copy time on the GPU"] == pytest.approx(sum(e["dur"] for e in expected))
    assert figures(d)["bytes"] == sum(e["args"]["bytes"] for e in expected)
    assert d.parts["exposed_memcpy"] <= figures(d)["copy time on the GPU"] * 1e3
    assert "aten::copy_" in d.top_stacks[0].stack
    assert "pin_memory" in d.fix


def test_no_pageable_finding_for_pinned_copies():
    c = ctx(BERT)  # one DtoH copy into pinned memory
    assert np.any(np.array(c.t.names)[c.t.gpu_name] == "Memcpy DtoH (Device -> Pinned)")
    assert rules_copies.pageable_copies(c) is None


def test_below_roofline_on_small_bert_gemms():
    d = rules_gpu.below_roofline(ctx(BERT))
    assert d is not None and figures(d)["device"] == "NVIDIA H100 SXM"
    assert 0 < figures(d)["MFU"] < 0.01 and figures(d)["of it memory-bound"] > 0
    assert "addmm" in d.items[0].name


def test_below_roofline_flags_attention_not_the_big_gemms_of_the_compiled_trace():
    d = rules_gpu.below_roofline(ctx(COMPILED))
    assert d is not None and all("attention" in i.name for i in d.items)
    gemms = [r for r in ctx(COMPILED).efficiency.ops if r.family == "gemm"]
    assert gemms and all((r.pct_of_roofline or 0) >= rules_gpu.ROOFLINE_LOW for r in gemms)


def test_no_roofline_finding_where_modelled_ops_cost_little_or_no_device():
    c = ctx(RESNET_V100)  # 3 fp32 GEMM calls, 0.08% of the busy time
    assert c.efficiency.modelled.calls == 3 and rules_gpu.below_roofline(c) is None
    c = ctx(TOY)  # 'AMD Radeon Graphics': not in the table
    assert c.spec is None and c.efficiency.modelled.calls > 0
    assert rules_gpu.below_roofline(c) is None


def test_unexplained_idle_on_a_trace_without_python_frames():
    c = ctx(GPU_ONLY)  # runtime calls only: what the CPU did between them is not recorded
    d = rules_host.unexplained_idle(c)
    assert d is not None and "with_stack=True" in d.fix
    assert rules_host.unexplained_idle(ctx(BERT)) is None


def test_graph_replays_without_their_capture_are_said_to_have_no_op():
    (r,) = analyze([str(REPLAY)]).ranks
    g = r.graph_replays
    ev = events(REPLAY)
    graph = {e["args"]["correlation"] for e in ev if e.get("name") == "hipGraphLaunch"}
    gpu = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    replayed = sum(e["dur"] for e in gpu if e["args"].get("correlation") in graph)
    total = sum(e["dur"] for e in gpu)
    assert g is not None and g.gpu_time_us == pytest.approx(replayed)
    assert g.share_of_gpu_time == pytest.approx(replayed / total) and g.share_of_gpu_time > 0.9
    assert g.attributed_us == 0 and g.capture is None
    # top ops are shares of the whole GPU time, the rest is said to have no op
    mm = next(o for o in r.top_ops if o.name == "aten::mm")
    assert mm.share == pytest.approx(mm.total_us / total) and mm.share < 0.05
    assert r.top_ops_unattributed_us == pytest.approx(total - sum(o.total_us for o in r.top_ops))
    assert any("--capture-trace" in n for n in r.notes)


def test_graph_replays_hang_under_the_ops_that_captured_them(capsys):
    (r,) = analyze([str(REPLAY)], capture=str(CAPTURE)).ranks
    g = r.graph_replays
    assert g is not None and g.attributed_us == pytest.approx(g.gpu_time_us)
    assert r.top_ops[0].name == "vllm::moe_forward" and r.top_ops[0].share > 0.5
    assert r.top_ops_unattributed_us < 0.05 * g.gpu_time_us
    cats = {c.category: c.share for c in r.op_categories}
    assert cats["gemm"] > 0.5 and cats["attention"] > 0
    assert main(["analyze", str(REPLAY), "--capture-trace", str(CAPTURE)]) == 0
    assert "hung under the captured ops" in " ".join(capsys.readouterr().out.split())


def test_sglang_graph_replay_ops_equal_tracelens_with_the_same_capture():
    """TraceLens' ops table of this SGLang decode step, computed with its capture trace:
    the same GPU time per op (TraceLens drops the numeric suffix of profiler ranges)."""
    import csv
    import re
    from collections import Counter

    step, capture = (
        SGLANG / "sglang_Qwen3-8B_decode.json.gz",
        SGLANG / "capture_traces/bs_32_rank0.json.gz",
    )
    (r,) = analyze([str(step)], capture=str(capture)).ranks
    assert r.graph_replays is not None and r.graph_replays.attributed_us == pytest.approx(
        r.graph_replays.gpu_time_us
    )
    with open(SGLANG / "perf_csvs/ops_summary.csv", encoding="utf-8") as f:
        expected: Counter[str] = Counter()
        for row in csv.DictReader(f):
            expected[row["name"]] += float(row["total_direct_kernel_time_sum"])
    ours = {re.sub(r"_\d+$", "", o.name): o.total_us for o in r.top_ops}
    for name, us in expected.most_common(10):
        assert ours[name] == pytest.approx(us, rel=1e-4), name  # times kept in whole ns
    with open(SGLANG / "perf_csvs/ops_summary_by_category.csv", encoding="utf-8") as f:
        by_cat: Counter[str] = Counter()
        for row in csv.DictReader(f):
            by_cat[row["op category"]] += float(row["total_direct_kernel_time_ms"]) * 1e3
    cats = {c.category: c for c in r.op_categories}
    for ours_, theirs in (("gemm", "GEMM"), ("normalization", "RMSNorm"), ("reduction", "reduce")):
        assert cats[ours_].time_us == pytest.approx(by_cat[theirs], rel=1e-4)
    # the fused activation and rotary kernels of inference engines are elementwise, the
    # KV-cache write is attention (TraceLens: RoPE_fwd, elementwise, InferenceAttention)
    assert {"sgl_kernel::silu_and_mul", "sgl_kernel::rotary_embedding"} <= set(
        cats["elementwise"].top
    )
    assert "sglang::store_cache" in cats["attention"].top
    # the capture's own synchronizing calls happened when it was captured, not in this step
    assert r.sync is not None and r.sync.calls == 1


def test_unnamed_device_is_identified_by_its_properties():
    (r,) = analyze([str(REPLAY)]).ranks  # deviceProperties name '' (ROCm), 304 CUs, 206 GB
    assert r.devices == ["AMD Instinct MI300X (by its properties)"]
    assert "mfu" not in r.unavailable and r.efficiency is not None
    assert r.efficiency.device is not None and "properties" in r.efficiency.device.source


def test_a_trace_without_a_rank_is_named_by_its_file(capsys):
    (r,) = analyze([str(BERT)]).ranks
    assert r.rank is None and r.name == BERT.name
    assert main(["analyze", str(BERT)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(BERT.name) and "rank ?" not in out


def test_launches_before_the_window_are_said_beside_the_breakdown(capsys):
    (r,) = analyze([str(OWL_MI300)]).ranks
    ev = events(OWL_MI300)
    runtime = {e["args"].get("correlation") for e in ev if e.get("cat") == "cuda_runtime"}
    outside = [
        e for e in ev
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
        and e["args"].get("correlation") not in runtime
    ]  # fmt: skip
    o = r.launch_not_in_trace
    assert o is not None and o.activities == len(outside) > 0
    assert o.gpu_time_us == pytest.approx(sum(e["dur"] for e in outside))
    assert main(["analyze", str(OWL_MI300)]) == 0
    assert "launched before the" in capsys.readouterr().out


def _gpu_time_under(profile, frame: str) -> float:  # type: ignore[no-untyped-def]
    """Share of the profile's GPU time whose stack holds ``frame``."""
    from aiflame.render.folded import render_folded

    gpu = profile.sample_types.index(next(t for t in profile.sample_types if t.name == "gpu-time"))
    profile.meta["default_type"] = gpu
    lines = [line.rsplit(" ", 1) for line in render_folded(profile).splitlines()]
    total = sum(float(v) for _, v in lines)
    return sum(float(v) for s, v in lines if frame in s.split(";")) / total


def test_flame_graph_says_what_runs_in_graph_replays():
    plain = read(str(REPLAY)).profile()
    (r,) = analyze([str(REPLAY)]).ranks
    share = _gpu_time_under(plain, "[graph replay: no operator known]")
    assert share == pytest.approx(r.graph_replays.share_of_gpu_time, rel=1e-6)
    hung = read(str(REPLAY), str(CAPTURE)).profile()
    assert _gpu_time_under(hung, "[graph replay]") == pytest.approx(share, rel=1e-6)
    assert _gpu_time_under(hung, "vllm::moe_forward") > 0.5
    assert _gpu_time_under(hung, "[graph replay: no operator known]") == 0


SIMPLE_ADD = DATA / "hta/critical_path/simple_add/benchmark_result_493459_1694039959_trace.json.gz"
SAMPLED = DATA / "hta/trace_filter/sampled_rank-0.json.gz"
DDP = DATA / "hta/nccl_parser_config/nccl_data.json.gz"
QWEN = DATA / "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"


MULTI_STREAM = DATA / "hta/critical_path/cuda_event_sync_multi_stream/event_sync_trace.json.gz"


def test_allocation_where_the_step_allocates_not_in_bert():
    d = rules_host.allocation(ctx(MULTI_STREAM))
    assert d is not None and {"cudaFree", "cudaMalloc"} & set(d.top_stacks[0].stack)
    assert rules_host.allocation(ctx(BERT)) is None
    # cuDNN's first cudaFree/cudaMalloc calls of seconds are its setup: initialization
    assert rules_host.allocation(ctx(SIMPLE_ADD)) is None
    d = rules_host.initialization(ctx(SIMPLE_ADD))
    assert d is not None and d.top_stacks[0].stack[-1] == "cudaFree"
    assert rules_host.initialization(ctx(BERT)) is None


def test_cpu_ops_are_operators_that_compute_not_views():
    d = rules_host.cpu_ops(ctx(DDP))
    assert d is not None and d.top_stacks[0].stack[-1] == "aten::unflatten_dense_tensors"
    assert rules_host.cpu_ops(ctx(BERT)) is None  # its permutes and views are dispatch


def test_dependency_waits_and_launch_gaps():
    assert rules_host.dependency_waits(ctx(SAMPLED)) is not None
    assert rules_host.dependency_waits(ctx(BERT)) is None
    assert rules_host.launch_gaps(ctx(QWEN)) is not None
    assert rules_host.launch_gaps(ctx(COMPILED)) is None
