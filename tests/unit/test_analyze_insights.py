"""Insight rules: each on a real trace where its pattern occurs and on one where it does not."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from aiflame.analysis import devices, insights
from aiflame.sources.registry import load_trace as read_trace

DATA = Path(__file__).resolve().parents[1] / "data" / "kineto"
BERT = DATA / "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"
VIT = DATA / "tracelens/h100/Falconsai_nsfw_image_detection__1016002.json.gz"
COMPILED = DATA / "tracelens/torch_compile_triton/trace.json.gz"  # GPU busy end to end
RESNET = DATA / "param/resnet_kineto.iteration.json.gz"
RESNET_V100 = DATA / "kineto_tb_plugin/resnet50_num_workers_4_worker0.step6.pt.trace.json.gz"
GPU_ONLY = DATA / "tracelens/mi210/gpu_only_trace.json.gz"
SAMPLED = DATA / "hta/trace_filter/sampled_rank-0.json.gz"
TOY = DATA / "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"
_cache: dict[Path, insights.Context] = {}


def ctx(path: Path) -> insights.Context:
    if path not in _cache:
        t = read_trace(str(path))
        _cache[path] = insights.Context(t, devices.resolve(t.device_info)[0])
    return _cache[path]


def test_launch_bound_on_eager_bert_inference():
    c = ctx(BERT)
    f = insights.launch_bound(c)
    assert f is not None and f.severity == "high"
    host = c.idle["categories"]["host_wait"]["time_us"]
    assert 0 < f.cost_us <= host  # the host-wait idle inside the launch-bound phases
    assert f.evidence["launches"] == 61 and f.evidence["shorter_than_launch"] == 40
    assert f.evidence["median_launch_us"] > f.evidence["median_gpu_us"]
    assert any("aten::addmm" in s["stack"] for s in f.evidence["top_stacks"])
    assert "CUDA graphs" in f.fix


def test_launch_bound_not_on_a_gpu_bound_compiled_trace():
    assert insights.launch_bound(ctx(COMPILED)) is None
    assert ctx(COMPILED).launch["shorter_than_launch"] == 0


def test_host_wait_dominated_on_a_toy_training_loop():
    c = ctx(TOY)  # 98% of its GPU timeline idle, waiting for the host
    f = insights.host_wait_dominated(c)
    assert f is not None
    assert f.evidence["idle_us"] >= insights.IDLE_SHARE * c.total_ns / 1e3
    assert f.cost_us == pytest.approx(
        f.evidence["host_wait_us"] - f.evidence["host_wait_in_launch_bound_phases_us"]
    )
    assert f.evidence["top_stacks"]


def test_host_wait_dominated_and_launch_bound_split_the_host_wait():
    c = ctx(BERT)
    a, b = insights.launch_bound(c), insights.host_wait_dominated(c)
    assert a is not None and b is not None
    assert a.cost_us + b.cost_us == pytest.approx(c.idle["categories"]["host_wait"]["time_us"])


def test_no_host_wait_finding_where_the_gpu_is_busy():
    assert insights.host_wait_dominated(ctx(COMPILED)) is None
    assert insights.host_wait_dominated(ctx(GPU_ONLY)) is None  # 11% idle


def test_sync_stall_from_item_in_bert_mask_preparation():
    f = insights.sync_stalls(ctx(BERT))
    assert f is not None
    assert f.evidence["calls"]["cudaStreamSynchronize"]["count"] == 1
    assert f.evidence["causes"]["aten::is_nonzero"]["gpu_idle_after_us"] == pytest.approx(f.cost_us)
    stack = f.evidence["top_stacks"][0]["stack"]
    assert "aten::item" in stack
    assert any("_prepare_4d_attention_mask_for_sdpa" in s for s in stack)
    assert f.cost_us == pytest.approx(153.855)  # the gap from the GPU running dry to refilling


def test_final_synchronize_after_the_last_kernel_is_no_stall():
    c = ctx(COMPILED)
    names = np.array(c.t.names)[c.t.cpu_name]
    assert np.any(names == "hipDeviceSynchronize")  # the pattern's calls are there
    assert insights.sync_stalls(c) is None


def test_pageable_copies_counted_like_the_trace():
    with gzip.open(RESNET, "rt", encoding="utf-8") as fh:
        events = json.load(fh)["traceEvents"]
    expected = [e for e in events if e.get("name") == "Memcpy HtoD (Pageable -> Device)"]
    f = insights.pageable_copies(ctx(RESNET))
    assert f is not None and f.evidence["copies"] == len(expected) > 0
    assert f.evidence["gpu_time_us"] == pytest.approx(sum(e["dur"] for e in expected))
    assert f.evidence["bytes"] == sum(e["args"]["bytes"] for e in expected)
    assert f.cost_us >= f.evidence["gpu_time_us"]
    assert "aten::copy_" in f.evidence["top_stacks"][0]["stack"]
    assert "pin_memory" in f.fix


def test_no_pageable_finding_for_pinned_copies():
    c = ctx(BERT)  # one DtoH copy into pinned memory
    assert np.any(np.array(c.t.names)[c.t.gpu_name] == "Memcpy DtoH (Device -> Pinned)")
    assert insights.pageable_copies(c) is None


def test_many_small_copies_found_with_lower_thresholds(monkeypatch):
    # No trace in the data has small copies costing 1% of its GPU time (the default bar):
    # the sampled recommender rank has 29 real ones costing 0.12%. With the bar lowered the rule
    # finds exactly those.
    c = ctx(SAMPLED)
    assert insights.many_small_copies(c) is None
    monkeypatch.setattr(insights, "REPORT_FROM", 0.001)
    f = insights.many_small_copies(c)
    assert f is not None and f.evidence["copies"] == 29
    with gzip.open(SAMPLED, "rt", encoding="utf-8") as fh:
        copies = [e for e in json.load(fh)["traceEvents"] if e.get("cat") == "gpu_memcpy"]
    small = [e for e in copies if e["args"]["bytes"] < 64 * 1024]
    assert len(small) == 29 and f.evidence["bytes"] == sum(e["args"]["bytes"] for e in small)
    assert f.evidence["top_stacks"]


def test_no_small_copies_finding_for_one_copy():
    assert insights.many_small_copies(ctx(BERT)) is None


def test_below_roofline_on_small_bert_gemms():
    c = ctx(BERT)
    f = insights.below_roofline(c)
    assert f is not None and f.evidence["device"] == "NVIDIA H100 SXM"
    top = f.evidence["top_shapes"][0]
    assert top["pct_of_roofline"] < insights.ROOFLINE_LOW
    assert f.evidence["memory_bound_time_us"] > 0
    assert 0 < f.evidence["mfu"] < 0.01


def test_below_roofline_flags_attention_not_the_big_gemms_of_the_compiled_trace():
    f = insights.below_roofline(ctx(COMPILED))
    assert f is not None
    assert {s["family"] for s in f.evidence["top_shapes"]} == {"attention"}
    gemms = [r for r in ctx(COMPILED).efficiency["ops"] if r["family"] == "gemm"]
    assert gemms and all(r["pct_of_roofline"] >= insights.ROOFLINE_LOW for r in gemms)


def test_no_roofline_finding_where_modelled_ops_cost_little():
    c = ctx(RESNET_V100)  # 3 fp32 GEMM calls, 0.08% of the busy time
    assert c.efficiency["modelled"]["calls"] == 3
    assert insights.below_roofline(c) is None


def test_no_roofline_finding_without_a_known_device():
    c = ctx(TOY)  # 'AMD Radeon Graphics': not in the table
    assert c.spec is None and c.efficiency["modelled"]["calls"] > 0
    assert insights.below_roofline(c) is None


def test_findings_are_ranked_by_cost():
    found = insights.find(ctx(BERT))
    assert [f.rule for f in found] == [
        "launch_bound", "host_wait_dominated", "below_roofline", "sync_stalls",
    ]  # fmt: skip
    keys = {"rule", "severity", "cost_us", "fix", "evidence"}
    assert all(set(f.to_json()) >= keys for f in found)
