"""`aiflame memory` on PyTorch profiler traces: the [memory] events, charged to operators."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from aiflame.cli.main import main
from aiflame.render.folded import render_folded
from aiflame.render.html import extract_data, render_html
from aiflame.sources.inputs import Input
from aiflame.sources.kineto import memory as kineto_memory

DATA = Path(__file__).parents[1] / "data"
BERT = DATA / "kineto/tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"
VIT = DATA / "kineto/tracelens/h100/Falconsai_nsfw_image_detection__1016002.json.gz"
CPU = DATA / "kineto/recorded/cpu_semicolon_memory.json.gz"
OLD = DATA / "kineto/kineto_tb_plugin/resnet50_num_workers_4_worker0.step6.pt.trace.json.gz"
NO_MEMORY = DATA / "kineto/hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
FOLDED = DATA / "speedscope/stackcollapse/simple.txt"
NSYS = DATA / "nsys/saxpy-mpi-cuda_nsys_perlmutter0.sqlite"  # memcpy bytes, no memory held
WINDOWS_CPU = DATA / "kineto/dtu_mlops/resnet_cpu_profile_memory.json.gz"


def events(path: Path) -> list[dict]:
    with gzip.open(path) as f:
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


def memory_events(path: Path) -> list[dict]:
    return sorted((e for e in events(path) if e.get("name") == "[memory]"), key=lambda e: e["ts"])


def device(e: dict) -> str:
    a = e["args"]
    kind = {0: "cpu", 1: "cuda"}[a["Device Type"]]
    return f"{kind}:{a['Device Id']}" if a["Device Id"] >= 0 else kind


def per_device(profile, metric: str) -> dict[str, float]:
    col = profile.type_index(metric)
    out: Counter = Counter()
    for i in range(len(profile)):
        out[profile.labels_of(i)["device"]] += profile.values[i, col]
    return dict(out)


@pytest.mark.parametrize("path", [BERT, VIT, CPU])
def test_peak_is_the_traces_total_allocated(path):
    p = kineto_memory.load(Input(str(path)))
    mem = memory_events(path)
    for dev in {device(e) for e in mem}:
        peak = max(e["args"]["Total Allocated"] for e in mem if device(e) == dev)
        assert per_device(p, "peak-bytes")[dev] == peak


@pytest.mark.parametrize("path", [BERT, CPU, OLD])
def test_allocations_are_the_positive_events(path):
    p = kineto_memory.load(Input(str(path)))
    mem = memory_events(path)
    for dev in {device(e) for e in mem}:
        sizes = [e["args"]["Bytes"] for e in mem if device(e) == dev and e["args"]["Bytes"] > 0]
        assert per_device(p, "alloc-bytes")[dev] == sum(sizes)
        assert per_device(p, "alloc-count")[dev] == len(sizes)


def innermost(slices: list[dict], e: dict) -> dict | None:
    """The shortest slice of the event's thread running at its instant (brute force)."""
    running = [
        s
        for s in slices
        if s["pid"] == e["pid"] and s["tid"] == e["tid"] and s["ts"] <= e["ts"] < s["ts"] + s["dur"]
    ]
    return min(running, key=lambda s: s["dur"]) if running else None


@pytest.mark.parametrize("path", [BERT, CPU])
def test_each_allocation_is_charged_to_the_operator_running_then(path):
    cats = {"cpu_op", "user_annotation", "python_function", "cuda_runtime", "cuda_driver"}
    slices = [e for e in events(path) if e.get("ph") == "X" and e.get("cat") in cats]
    expected: Counter = Counter()
    for e in memory_events(path):
        if e["args"]["Bytes"] > 0:
            s = innermost(slices, e)
            if s is None:
                expected["[outside any operator]"] += e["args"]["Bytes"]
            elif s["cat"] != "python_function":  # Python frames are renamed; ops keep names
                expected[s["name"]] += e["args"]["Bytes"]
    p = kineto_memory.load(Input(str(path)))
    col = p.type_index("alloc-bytes")
    got: Counter = Counter()
    for i in range(len(p)):
        leaf = p.stack_names(int(p.sample_stack[i]))[-1]
        if p.values[i, col] and leaf in expected:
            got[leaf] += p.values[i, col]
    assert got == expected
    assert sum(expected.values()) > 0.9 * p.values[:, col].sum()


def test_devices_are_roots_and_the_chart_shows_the_gpu():
    p = kineto_memory.load(Input(str(BERT)))
    roots = {p.stack_names(int(s))[0] for s in p.sample_stack if s >= 0}
    assert roots == {"device cuda:0", "device cpu"}
    tl = p.meta["memory_timeline"]
    assert tl["device"] == "cuda:0"
    cuda = [e for e in memory_events(BERT) if device(e) == "cuda:0"]
    assert tl["points"] == len(cuda)
    assert tl["live_bytes"] == [e["args"]["Total Allocated"] for e in cuda]
    assert tl["reserved_bytes"] == [e["args"]["Total Reserved"] for e in cuda]
    header, _ = extract_data(render_html(p))
    assert header["memory"]["peakBytes"] == max(tl["live_bytes"])
    assert header["memory"]["allocations"] == sum(1 for e in cuda if e["args"]["Bytes"] > 0)


def test_memory_before_the_trace_is_a_label():
    p = kineto_memory.load(Input(str(BERT)))
    first = memory_events(BERT)[0]  # a cuda:0 event
    before = first["args"]["Total Allocated"] - first["args"]["Bytes"]
    lines = render_folded(p, "peak-bytes").splitlines()
    label = [ln for ln in lines if "[allocated before recording started]" in ln]
    assert len(label) == 1 and label[0].startswith("device cuda:0;")
    assert 0 < float(label[0].rsplit(" ", 1)[1]) <= before


def test_traces_without_addresses_have_no_peak_view():
    p = kineto_memory.load(Input(str(OLD)))
    assert [t.name for t in p.sample_types] == ["alloc-bytes", "alloc-count"]
    assert "no Addr" in p.meta["info:lifetimes"]
    live = np.cumsum([e["args"]["Bytes"] for e in memory_events(OLD) if device(e) == "cuda:0"])
    assert max(p.meta["memory_timeline"]["live_bytes"]) == live.max()


def test_cli_memory_of_a_trace(tmp_path, capsys):
    out = tmp_path / "bert.html"
    assert main(["memory", str(BERT), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "cuda:0 96.61 MiB (101,305,344 bytes)" in err
    header, _ = extract_data(out.read_text())
    assert header["title"].startswith("GPU memory (peak-bytes): ")
    assert "memory" in header
    folded = tmp_path / "cpu.folded"
    assert main(["memory", str(CPU), "-o", str(folded), "-m", "alloc-bytes"]) == 0
    assert "Linear > forward (torch/nn/modules/linear.py:130);linear;aten::linear;aten::addmm " in (
        folded.read_text()
    )


@pytest.mark.parametrize(
    ("path", "words"),
    [
        (NO_MEMORY, "profile_memory=True"),
        (FOLDED, "no memory data"),
        # wrote a "Memory (gpu-bytes)" page of the bytes memcpys moved
        (NSYS, "gpu-bytes counts the bytes memcpys moved, not memory held"),
    ],
)
def test_inputs_without_memory_data_say_so(path, words, tmp_path, capsys):
    out = tmp_path / "m.html"
    assert main(["memory", str(path), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err
    assert not out.exists()


def test_memory_of_a_cpu_only_trace_recorded_on_windows():
    # No GPU: the CPU allocator's events are the memory charted (their Device Id is -1).
    p = kineto_memory.load(Input(str(WINDOWS_CPU)))
    events = memory_events(WINDOWS_CPU)
    assert {device(e) for e in events} == {"cpu"}
    peak = max(e["args"]["Total Allocated"] for e in events)
    assert p.meta["peak_bytes"] == peak == 117_349_888
    assert p.meta["memory_timeline"]["live_bytes"] == [e["args"]["Total Allocated"] for e in events]
    allocated = sum(e["args"]["Bytes"] for e in events if e["args"]["Bytes"] > 0)
    assert p.totals()[p.type_index("alloc-bytes")] == allocated


def test_a_profile_with_a_bytes_metric_is_accepted(tmp_path, capsys):
    out = tmp_path / "austin.html"
    austin = DATA / "austin" / "austin37_memory.austin.gz"
    assert main(["memory", str(austin), "-o", str(out)]) == 0
    header, _ = extract_data(out.read_text())
    assert header["title"].startswith("Memory (alloc-bytes): ")


def test_device_option_picks_the_charted_device(tmp_path, capsys):
    p = kineto_memory.load(Input(str(BERT)), device="cpu")
    cpu = [e for e in memory_events(BERT) if device(e) == "cpu"]
    assert p.meta["memory_timeline"]["live_bytes"] == [e["args"]["Total Allocated"] for e in cpu]
    out = tmp_path / "m.html"
    assert main(["memory", str(BERT), "-o", str(out), "--device", "cuda:3"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "(the trace has: cpu, cuda:0)" in err
    assert not out.exists()
