"""Insight rules: each on a real trace where its pattern occurs and on one where it does not."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from aiflame.analysis import insights
from aiflame.analysis.timeline import time_breakdown
from aiflame.cli.analyze_input import read_trace

DATA = Path(__file__).resolve().parents[1] / "data" / "kineto"
BERT = DATA / "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"
COMPILED = DATA / "tracelens/torch_compile_triton/trace.json.gz"  # GPU busy end to end
RESNET = DATA / "param/resnet_kineto.iteration.json.gz"
_cache: dict[Path, object] = {}


def trace(path: Path):  # type: ignore[no-untyped-def]
    if path not in _cache:
        _cache[path] = read_trace(str(path))
    return _cache[path]


def test_launch_bound_on_eager_bert_inference():
    t = trace(BERT)
    f = insights.launch_bound(t)
    assert f is not None and f.severity == "high"
    idle = time_breakdown(t.gpu_ts, t.gpu_dur, t.gpu_kind).idle / 1e3
    # host-wait idle is part of the idle time; here nearly all of it (92% of the timeline)
    assert 0.9 * idle <= f.cost_us <= idle
    assert f.evidence["kernels"] == 60
    assert "CUDA graphs" in f.fix


def test_launch_bound_not_on_a_gpu_bound_compiled_trace():
    assert insights.launch_bound(trace(COMPILED)) is None


def test_sync_stall_from_item_in_bert_mask_preparation():
    f = insights.sync_stalls(trace(BERT))
    assert f is not None
    assert f.evidence["calls"]["cudaStreamSynchronize"]["count"] == 1
    stack = f.evidence["top_stacks"][0]["stack"]
    assert "aten::item" in stack
    assert any("_prepare_4d_attention_mask_for_sdpa" in s for s in stack)
    assert f.cost_us > 0


def test_final_synchronize_after_the_last_kernel_is_no_stall():
    t = trace(COMPILED)
    names = np.array(t.names)[t.cpu_name]
    assert np.any(names == "hipDeviceSynchronize")  # the pattern's calls are there
    assert insights.sync_stalls(t) is None


def test_pageable_copies_counted_like_the_trace():
    with gzip.open(RESNET, "rt", encoding="utf-8") as fh:
        events = json.load(fh)["traceEvents"]
    expected = [e for e in events if e.get("name") == "Memcpy HtoD (Pageable -> Device)"]
    f = insights.pageable_copies(trace(RESNET))
    assert f is not None and f.evidence["copies"] == len(expected) > 0
    assert f.evidence["gpu_time_us"] == pytest.approx(sum(e["dur"] for e in expected))
    assert f.cost_us >= f.evidence["gpu_time_us"]
    assert "aten::copy_" in f.evidence["top_stacks"][0]["stack"]
    assert "pin_memory" in f.fix


def test_no_pageable_finding_for_pinned_copies():
    t = trace(BERT)  # one DtoH copy into pinned memory
    assert np.any(np.array(t.names)[t.gpu_name] == "Memcpy DtoH (Device -> Pinned)")
    assert insights.pageable_copies(t) is None


def test_findings_are_ranked_by_cost():
    found = insights.find(trace(BERT))
    assert [f.rule for f in found] == ["launch_bound", "sync_stalls"]
