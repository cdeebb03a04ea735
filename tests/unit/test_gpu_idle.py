"""The gpu-idle flame graph: on every trace of the test data its total is the timeline's
idle time to the nanosecond, its widest stack is the stack of the finding it belongs to,
and it works wherever a metric does (flamegraph, convert, diff)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aiflame.analysis import analyze, read
from aiflame.analysis.links import StackFinder
from aiflame.analysis.timeline import time_breakdown
from aiflame.cli.main import main
from aiflame.model import Profile
from aiflame.render.html import extract_data
from aiflame.sources.gpu_idle_samples import LATENCY, OUTSIDE, UNEXPLAINED

DATA = Path(__file__).resolve().parents[1] / "data"
TRACES = sorted(
    p
    for p in [*DATA.glob("kineto/**/*.json.gz"), *DATA.glob("nsys/**/*.sqlite")]
    if "capture" not in p.parts[-2] and "hta_expected" not in str(p)
) + sorted((DATA / "trace_events").glob("*.json"))
BERT = DATA / "kineto/tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"
MI300_BERT = DATA / "kineto/tracelens/mi300/gaunernst_bert-small-uncased__1016001.json.gz"


def idle_total(p: Profile) -> float:
    names = [t.name for t in p.sample_types]
    return float(p.totals()[names.index("gpu-idle")]) if "gpu-idle" in names else 0.0


def heaviest(p: Profile) -> tuple[list[str], float]:
    """The leaf stack with the most gpu-idle, and its ns."""
    column = p.type_index("gpu-idle")
    by_stack: dict[int, float] = {}
    for stack, value in zip(p.sample_stack.tolist(), p.values[:, column].tolist(), strict=True):
        if value:
            by_stack[stack] = by_stack.get(stack, 0.0) + value
    stack, ns = max(by_stack.items(), key=lambda kv: kv[1])
    return p.stack_names(stack), ns


@pytest.mark.parametrize("path", TRACES, ids=lambda p: str(p.relative_to(DATA))[:60])
def test_gpu_idle_totals_the_timeline_idle_exactly(path):
    found = read(str(path))
    t = found.trace
    idle = time_breakdown(t.gpu_ts, t.gpu_dur, t.gpu_kind).idle
    assert idle_total(found.profile()) == idle  # to the nanosecond


# Traces whose idle findings name stacks (their launches are in the trace).
WITH_STACKS = [
    p
    for p in TRACES
    if p.suffix != ".json" and "mi210" not in str(p) and "cupti" not in str(p)
    and "cpu_only" not in str(p) and "triton_example" not in str(p)
    and "dtu_mlops" not in str(p) and "recorded" not in str(p)
]  # fmt: skip


@pytest.mark.parametrize("path", WITH_STACKS, ids=lambda p: str(p.relative_to(DATA))[:60])
def test_the_widest_gpu_idle_stack_is_the_first_stack_of_its_finding(path):
    """The finding a user reads about the idle time and the gpu-idle flame graph agree:
    where the graph's widest stack is one a finding names, it is that finding's first."""
    found = read(str(path), merge_steps=True)  # the report's stacks merge the steps too
    profile = found.profile()
    if idle_total(profile) == 0:
        return
    (r,) = analyze([found.trace]).ranks
    widest, ns = heaviest(profile)
    finder = StackFinder(profile)
    holders = []
    for f in r.findings:
        paths = [finder.find(s.stack) for s in f.top_stacks]
        if widest in paths or (widest[-1] in (LATENCY,) and widest[:-1] in paths):
            holders.append((f, paths))
    if widest[0] == UNEXPLAINED and widest[-1] == OUTSIDE:
        assert not holders  # launched outside the trace: no finding can fix it
        return
    for f, paths in holders:
        first = paths[0]
        assert first == widest or first == widest[:-1], (f.rule, first, widest)
    share = ns / (r.time_breakdown.total * 1e3)
    if share >= 0.05 and widest[-1] != LATENCY:  # a reportable cause: some finding names it
        assert holders, widest


def test_flamegraph_convert_and_diff_take_the_gpu_idle_metric(tmp_path, capsys):
    t = read(str(BERT)).trace
    idle = time_breakdown(t.gpu_ts, t.gpu_dur, t.gpu_kind)
    page = tmp_path / "idle.html"
    assert main(["flamegraph", str(BERT), "--metric", "gpu-idle", "-o", str(page)]) == 0
    header, _ = extract_data(page.read_text(encoding="utf-8"))
    shown = header["types"][header["metric"]]
    assert shown["name"] == "gpu-idle" and shown["total"] == idle.idle
    folded = tmp_path / "idle.folded"
    assert (
        main(["convert", str(BERT), "-f", "folded", "--metric", "gpu-idle", "-o", str(folded)]) == 0
    )
    lines = folded.read_text(encoding="utf-8").splitlines()
    assert sum(float(line.rsplit(" ", 1)[1]) for line in lines) == idle.idle
    assert any(line.startswith("ProfilerStep#") or "forward" in line for line in lines)
    diff = tmp_path / "diff.html"
    assert main(["diff", str(BERT), str(MI300_BERT), "--metric", "gpu-idle", "-o", str(diff)]) == 0
    capsys.readouterr()
    cpu_only = DATA / "kineto/hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
    assert main(["flamegraph", str(cpu_only), "--metric", "gpu-idle", "-o", str(page)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "gpu-idle" in err[0]


def test_the_analyze_report_links_idle_findings_to_the_gpu_idle_graph(tmp_path):
    out = tmp_path / "r.html"
    js = tmp_path / "r.json"
    assert main(["analyze", str(BERT), "-o", str(out), "--json", str(js)]) == 0
    (rank,) = json.loads(js.read_text())["ranks"]
    idle_rules = {"launch_bound", "host_overhead", "sync_stalls", "unexplained_idle"}
    assert {f["rule"] for f in rank["findings"]} & idle_rules
    for f in rank["findings"]:
        if f["rule"] in idle_rules:
            assert f["flame"]["metric"] == "gpu-idle"
    page = out.read_text(encoding="utf-8")
    assert "metric=gpu-idle" in page
    header, _ = extract_data((tmp_path / "r.flame.html").read_text(encoding="utf-8"))
    assert "gpu-idle" in [t["name"] for t in header["types"]]
