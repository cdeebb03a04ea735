"""aiflame analyze against Meta HTA: temporal breakdown and idle-time classification.

``hta_expected/analyze.json`` holds HTA 0.5.0's numbers for the test traces (written by
``benchmarks/hta_analyze_reference.py``, exact times: HTA_DISABLE_NS_ROUNDING=1); one test
runs HTA itself when it is installed (``pip install '.[compare]'``).
"""

from __future__ import annotations

import gzip
import json
import logging
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

from aiflame.analysis import analyze, hta_compat
from aiflame.analysis.report import idle_analysis
from aiflame.analysis.schema import to_builtins
from aiflame.analysis.timeline import time_breakdown
from aiflame.sources.registry import load_trace as read_trace

DATA = Path(__file__).resolve().parents[1] / "data" / "kineto"
EXPECTED = json.loads((DATA / "hta_expected" / "analyze.json").read_text())
# Traces where HTA counts Kineto's GPU-side `cuda_sync` events (Event/Stream/Context Sync,
# Stream Wait Event) as GPU activity; aiflame, like TraceLens, counts kernels, copies and
# memsets only. Their idle-by-stream numbers agree; the temporal ones differ by those events.
CUDA_SYNC = {
    "hta/critical_path/cuda_event_sync/event_sync_trace.json.gz",
    "hta/critical_path/cuda_event_sync_multi_stream/event_sync_trace.json.gz",
    "hta/critical_path/simple_add/benchmark_result_493459_1694039959_trace.json.gz",
}
# A trimmed trace whose first GPU activities were launched before the cut: HTA compares their
# start with the time of the file's first event (its index 0 stands in for a missing launch).
TRIMMED = "param/resnet_kineto.iteration.json.gz"
_cache: dict[str, object] = {}


def ours(name: str):  # type: ignore[no-untyped-def]
    if name not in _cache:
        t = read_trace(str(DATA / name))
        _cache[name] = (t, t.select_gpu(hta_compat.step_filter(t)))
    return _cache[name]


@pytest.mark.parametrize("name", sorted(set(EXPECTED) - CUDA_SYNC))
def test_temporal_breakdown_equals_hta(name):
    _, t = ours(name)
    mine = to_builtins(hta_compat.temporal_breakdown(t))
    for key, theirs in EXPECTED[name]["temporal"].items():
        assert mine[key] == pytest.approx(theirs, abs=0.001), key  # to the ns (HTA: floats)


@pytest.mark.parametrize("name", sorted(set(EXPECTED) - {TRIMMED}))
def test_idle_by_stream_equals_hta(name):
    _, t = ours(name)
    mine = {r["stream"]: r for r in to_builtins(hta_compat.idle_by_stream(t))}
    for stream, cats in EXPECTED[name]["idle_by_stream"].items():
        for key, theirs in cats.items():
            # HTA rounds this table to 0.01 us
            assert mine[stream][key] == pytest.approx(theirs, abs=0.006), (stream, key)


def test_trimmed_trace_differs_only_by_the_unlinked_gaps():
    full, t = ours(TRIMMED)
    (theirs,) = EXPECTED[TRIMMED]["idle_by_stream"].values()
    (mine,) = to_builtins(hta_compat.idle_by_stream(t))
    unlinked = to_builtins(idle_analysis(full))["categories"]["unlinked"]["time_us"]
    assert unlinked > 0
    assert theirs["host_wait_us"] - mine["host_wait_us"] == pytest.approx(unlinked)
    assert mine["kernel_wait_us"] - theirs["kernel_wait_us"] == pytest.approx(unlinked)


def _cuda_sync_union_us(name: str) -> tuple[float, float]:
    """(first GPU start, span) in us over kernels, copies, memsets AND cuda_sync events."""
    with gzip.open(DATA / name, "rt", encoding="utf-8") as f:
        events = json.load(f)["traceEvents"]
    cats = {"kernel", "gpu_memcpy", "gpu_memset", "cuda_sync"}
    spans = [
        (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("cat") in cats and (e.get("args") or {}).get("stream", -1) != -1
    ]
    lo, hi = min(s for s, _ in spans), max(e for _, e in spans)
    return lo, hi - lo


@pytest.mark.parametrize("name", sorted(CUDA_SYNC))
def test_cuda_sync_events_explain_the_temporal_difference(name):
    _, t = ours(name)
    theirs = EXPECTED[name]["temporal"]
    # HTA's span is over the cuda_sync events too; with them the spans agree exactly
    _, span = _cuda_sync_union_us(name)
    assert theirs["total_us"] == pytest.approx(span)
    mine = to_builtins(hta_compat.temporal_breakdown(t))
    assert mine["total_us"] <= theirs["total_us"]
    busy_mine = mine["compute_us"] + mine["non_compute_us"]
    busy_theirs = theirs["compute_us"] + theirs["non_compute_us"]
    assert busy_mine < busy_theirs  # the sync events are busy time to HTA


@pytest.mark.parametrize(
    "name",
    [
        "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz",
        "tracelens/mi300/gaunernst_bert-small-uncased__1016001.json.gz",
        "tracelens/h100/Falconsai_nsfw_image_detection__1016002.json.gz",
    ],
)
def test_device_level_classification_equals_hta_on_one_stream(name):
    full, _ = ours(name)
    c = to_builtins(idle_analysis(full))
    (theirs,) = EXPECTED[name]["idle_by_stream"].values()
    for key, value in c["hta_categories"].items():
        assert value == pytest.approx(theirs.get(key, 0.0), abs=0.006), key
    tb = time_breakdown(full.gpu_ts, full.gpu_dur, full.gpu_kind)
    assert c["total_us"] == pytest.approx(tb.idle / 1e3)
    assert sum(v["time_us"] for v in c["categories"].values()) == pytest.approx(c["total_us"])


def test_hta_itself_agrees(tmp_path, monkeypatch):
    pytest.importorskip("hta", reason="needs HTA (pip install -e '.[compare]')")
    monkeypatch.setenv("HTA_DISABLE_NS_ROUNDING", "1")
    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    from hta.trace_analysis import TraceAnalysis

    try:
        for name in (
            "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz",
            "hta/trace_filter/sampled_rank-0.json.gz",
        ):
            d = tmp_path / name.replace("/", "_")
            d.mkdir()
            shutil.copy(DATA / name, d)
            ta = TraceAnalysis(trace_dir=str(d))
            temporal = ta.get_temporal_breakdown(visualize=False).iloc[0]
            _, t = ours(name)
            mine = to_builtins(hta_compat.temporal_breakdown(t))
            assert mine["idle_us"] == pytest.approx(float(temporal["idle_time(us)"]))
            assert mine["compute_us"] == pytest.approx(float(temporal["compute_time(us)"]))
            assert mine["total_us"] == pytest.approx(float(temporal["kernel_time(us)"]))
            table, _ = ta.get_idle_time_breakdown(ranks=ta.t.get_ranks(), visualize=False)
            rows = {r["stream"]: r for r in to_builtins(hta_compat.idle_by_stream(t))}
            for row in table.itertuples():
                key = f"{row.idle_category}_us"
                # HTA's table: sums of gaps rounded to 0.01 us
                assert rows[str(row.stream)][key] == pytest.approx(row.idle_time, abs=0.02)
    finally:
        logging.disable(logging.NOTSET)


def test_step_filter_keeps_work_launched_before_the_last_step():
    t, kept = ours("hta/trace_filter/sampled_rank-0.json.gz")
    assert 0 < kept.gpu_ts.size < t.gpu_ts.size  # the last of its steps is dropped, as HTA does
    bert, same = ours("tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz")
    assert same.gpu_ts.size == bert.gpu_ts.size  # one step: nothing dropped
    assert np.all(kept.gpu_launch >= 0)


def report_fields(name: str) -> dict:
    (r,) = analyze([str(DATA / name)]).ranks
    return to_builtins(r)


# Traces with two or more ProfilerStep annotations, where HTA leaves out the last step.
MULTI_STEP = ("hta/trace_filter/sampled_rank-0.json.gz", "hta/trace_filter/sampled_rank-1.json.gz")


@pytest.mark.parametrize("name", MULTI_STEP)
def test_report_fields_are_htas_numbers_after_its_last_step_filter(name):
    """The report's hta_* fields are what HTA itself prints for a trace of several steps
    (its last step left out), not the whole trace's numbers."""
    r = report_fields(name)
    temporal = r["hta_temporal_breakdown"]
    assert temporal["left_out_activities"] > 0
    for key, theirs in EXPECTED[name]["temporal"].items():
        assert temporal[key] == pytest.approx(theirs, abs=0.001), key
    rows = {x["stream"]: x for x in r["idle_by_stream_hta"]}
    for stream, cats in EXPECTED[name]["idle_by_stream"].items():
        for key, theirs in cats.items():
            assert rows[stream][key] == pytest.approx(theirs, abs=0.006), (stream, key)
    # the whole trace differs: the filter is what makes them equal
    assert r["time_breakdown"]["idle"] != pytest.approx(temporal["idle_us"], rel=1e-3)


def test_report_fields_equal_hta_itself_on_traces_of_several_steps(tmp_path, monkeypatch):
    pytest.importorskip("hta", reason="needs HTA (pip install -e '.[compare]')")
    monkeypatch.setenv("HTA_DISABLE_NS_ROUNDING", "1")
    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    from hta.trace_analysis import TraceAnalysis

    try:
        # DDP (3 steps) and a 128-rank job's sampled rank (2 steps): the report as written
        for name in ("hta/nccl_parser_config/nccl_data.json.gz", MULTI_STEP[0]):
            d = tmp_path / name.replace("/", "_")
            d.mkdir()
            shutil.copy(DATA / name, d)
            ta = TraceAnalysis(trace_dir=str(d))
            temporal = ta.get_temporal_breakdown(visualize=False).iloc[0]
            r = report_fields(name)
            mine = r["hta_temporal_breakdown"]
            assert mine["left_out_activities"] > 0
            assert mine["idle_us"] == pytest.approx(float(temporal["idle_time(us)"]), abs=0.001)
            assert mine["compute_us"] == pytest.approx(
                float(temporal["compute_time(us)"]), abs=0.001
            )
            assert mine["total_us"] == pytest.approx(float(temporal["kernel_time(us)"]), abs=0.001)
            table, _ = ta.get_idle_time_breakdown(ranks=ta.t.get_ranks(), visualize=False)
            rows = {x["stream"]: x for x in r["idle_by_stream_hta"]}
            assert {str(s) for s in table["stream"]} == set(rows)
            for row in table.itertuples():
                key = f"{row.idle_category}_us"
                # HTA's table: sums of gaps rounded to 0.01 us
                assert rows[str(row.stream)][key] == pytest.approx(row.idle_time, abs=0.02)
    finally:
        logging.disable(logging.NOTSET)
