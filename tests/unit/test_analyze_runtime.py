"""Launch overhead, synchronisation stalls and memory traffic, checked against the raw events."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from aiflame.analysis import launch, memcpy
from aiflame.analysis.insights import Context
from aiflame.analysis.report import idle_analysis
from aiflame.analysis.schema import to_builtins
from aiflame.analysis.stacks import innermost_at
from aiflame.sources.registry import load_trace as read_trace

DATA = Path(__file__).resolve().parents[1] / "data" / "kineto"
BERT = DATA / "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"
COMPILED = DATA / "tracelens/torch_compile_triton/trace.json.gz"
RESNET = DATA / "param/resnet_kineto.iteration.json.gz"
STEP = DATA / "kineto_tb_plugin/resnet50_num_workers_4_worker0.step6.pt.trace.json.gz"
_cache: dict[Path, object] = {}


def trace(path: Path):  # type: ignore[no-untyped-def]
    if path not in _cache:
        _cache[path] = read_trace(str(path))
    return _cache[path]


def section(path: Path, name: str) -> dict:
    """A section of the analysis (launch, sync, memory) as the report's JSON has it."""
    return to_builtins(getattr(Context(trace(path)), name))


def events(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)["traceEvents"]


def test_launch_statistics_equal_the_runtime_events():
    ev = events(BERT)
    gpu = {e["args"]["correlation"]: e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy")}
    rt = [e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    calls = [e for e in rt if e["args"].get("correlation") in gpu]
    L = section(BERT, "launch")
    assert L["launches"] == len(calls) == 61
    assert L["launch_cpu_time_us"] == pytest.approx(sum(e["dur"] for e in calls))
    shorter = sum(gpu[e["args"]["correlation"]]["dur"] < e["dur"] for e in calls)
    assert L["shorter_than_launch"] == shorter
    delays = [gpu[e["args"]["correlation"]]["ts"] - e["ts"] for e in calls]
    assert L["launch_to_start_us"]["median"] == pytest.approx(np.median(delays), abs=1e-3)
    assert L["by_call"]["cudaLaunchKernel"]["count"] == sum(
        e["name"] == "cudaLaunchKernel" for e in calls
    )


def test_queue_depth_of_a_starved_and_of_a_fed_gpu():
    starved = to_builtins(launch.queue_depth(trace(BERT)))
    assert starved["max"] == 1  # each kernel is launched after the previous one ended
    # the time with nothing queued is the idle time minus the launch-to-start latency
    idle_share = to_builtins(idle_analysis(trace(BERT)))["total_us"] / 3907.825
    assert 0.5 * idle_share < starved["share_empty"] <= idle_share
    fed = to_builtins(launch.queue_depth(trace(COMPILED)))
    assert fed["share_empty"] == 0 and fed["max"] == 11 and fed["mean"] > 5
    bins = fed["bins"]["mean_depth"]
    assert len(bins) == 200 and np.mean(bins) == pytest.approx(fed["mean"], abs=1e-3)


def test_launch_bound_phases_need_short_work_and_an_idle_gpu():
    phases = section(BERT, "launch")
    assert phases["launch_bound"]["phases"] >= 1
    for p in phases["launch_bound_phases"]:
        assert p["shorter_than_launch"] > p["launches"] / 2 and p["gpu_busy_share"] <= 0.5
    assert section(COMPILED, "launch")["launch_bound"]["phases"] == 0


def test_sync_stalls_by_call_and_cause_on_resnet_input_copies():
    s = section(RESNET, "sync")
    ev = events(RESNET)
    syncs = [e for e in ev if e.get("name") == "cudaStreamSynchronize"]
    assert s["by_call"]["cudaStreamSynchronize"]["count"] == len(syncs) > 0
    assert s["by_call"]["cudaStreamSynchronize"]["blocked_us"] == pytest.approx(
        sum(e["dur"] for e in syncs)
    )
    # the syncs come from copying the (pageable) input batch: aten::to is what was called
    assert next(iter(s["by_cause"])) == "aten::to"
    stack = s["top_stacks"][0]["stack"]
    assert stack[-3:] == ["aten::_to_copy", "aten::copy_", "cudaStreamSynchronize"]
    sync_wait = to_builtins(idle_analysis(trace(RESNET)))["categories"]["sync_wait"]["time_us"]
    assert s["gpu_idle_after_us"] == sync_wait


def test_explicit_synchronize_is_its_own_cause():
    s = section(BERT, "sync")
    assert s["by_cause"]["explicit synchronize"]["count"] == 2  # torch.cuda.synchronize()
    assert s["by_cause"]["explicit synchronize"]["gpu_idle_after_us"] == 0


def test_memory_traffic_table_equals_the_copies():
    ev = events(RESNET)
    copies = [e for e in ev if e.get("cat") == "gpu_memcpy"]
    m = section(RESNET, "memory")
    assert m["copies"] == len(copies)
    for row in m["by_kind"]:
        mine = [e for e in copies if e["name"] == row["name"]]
        assert row["count"] == len(mine)
        assert row["bytes"] == sum(e["args"]["bytes"] for e in mine)
        assert row["gpu_time_us"] == pytest.approx(sum(e["dur"] for e in mine))
    pageable = next(r for r in m["by_kind"] if r["src"] == "Pageable")
    assert (pageable["direction"], pageable["dst"]) == ("HtoD", "Device")
    small = [e for e in copies if e["args"]["bytes"] < memcpy.SMALL_COPY_BYTES]
    assert m["small_copies"]["count"] == len(small)


def test_copies_inside_the_profiler_step():
    m = section(STEP, "memory")
    loop = m["in_step_loop"]
    assert loop is not None and loop["steps"] == 1
    assert loop["copies"] == loop["copies_per_step_median"] > 0
    assert loop["htod_copies"] >= 1 and loop["htod_bytes"] > 0
    # BERT's one DtoH copy is launched 0.8 ms into ProfilerStep#6, an annotation that starts
    # inside _record_function_enter_new and outlives it: it still encloses the step.
    bert = section(BERT, "memory")["in_step_loop"]
    assert bert is not None and (bert["steps"], bert["copies"], bert["htod_copies"]) == (1, 1, 0)


def test_copy_names_parse():
    assert memcpy.parse("Memcpy HtoD (Pageable -> Device)") == ("HtoD", "Pageable", "Device")
    assert memcpy.parse("Memcpy DtoD (Device -> Device)") == ("DtoD", "Device", "Device")
    assert memcpy.parse("Memcpy HtoD") == ("HtoD", None, None)
    assert memcpy.parse("Memset (Device)") == ("unknown", None, None)


def test_innermost_slice_at_a_time():
    t = trace(BERT)
    thread = t.cpu_thread
    i = int(np.argmax(t.cpu_dur))  # the outermost, longest slice
    inside = innermost_at(t, thread[[i]], t.cpu_ts[[i]] + 1)
    j = int(inside[0])
    assert j >= 0 and t.cpu_ts[j] <= t.cpu_ts[i] + 1 < t.cpu_ts[j] + t.cpu_dur[j]
    before = innermost_at(t, thread[[i]], np.array([t.cpu_ts.min() - 10]))
    assert before[0] == -1
