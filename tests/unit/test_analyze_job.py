"""The job across its ranks: summed breakdown, straggler, findings counted across ranks."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from aiflame.analysis.job import job_summary
from aiflame.analysis.report import analyze
from aiflame.cli.main import main
from aiflame.sources.registry import load_trace

RANKS = sorted((Path(__file__).parents[1] / "data/kineto/hta/trace_filter").glob("*.json.gz"))


def test_two_real_ranks(tmp_path, capsys):
    out = tmp_path / "a.json"
    assert main(["analyze", *map(str, RANKS), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    report = json.loads(out.read_text())
    job, ranks = report["job"], report["ranks"]
    assert job["ranks"] == len(ranks) == 2 and job["same_job"] is True
    for key in ("total", "busy", "idle", "computation", "exposed_communication"):
        assert job["time_breakdown_sum"][key] == pytest.approx(
            sum(r["time_breakdown"][key] for r in ranks)
        )
    compute = {r["name"]: r["time_breakdown"]["computation"] for r in ranks}
    slow, fast = max(compute, key=compute.get), min(compute, key=compute.get)
    assert job["slowest_rank"] == slow
    assert job["computation_spread"] == pytest.approx(
        (compute[slow] - compute[fast]) / compute[slow]
    )
    # Rank 1 computes 29% longer than rank 0 here: with two ranks the median is their mean.
    assert [s["rank"] for s in job["stragglers"]] == [slow]
    rules = {f["rule"] for r in ranks for f in r["findings"]}
    assert {f["rule"] for f in job["findings"]} == rules
    assert f"straggler: {slow}" in text and slow == "rank 1"


def test_no_straggler_among_equal_ranks_and_no_gpu():
    (r0,) = analyze([load_trace(str(RANKS[0]))]).ranks
    r1 = msgspec.structs.replace(r0, rank="1", name="rank 1")
    job = job_summary([r0, r1])
    assert job.same_job and job.stragglers == [] and job.computation_spread == 0.0
    cpu_only = next((Path(__file__).parents[1] / "data/kineto/hta/cpu_only").glob("*.json.gz"))
    none = job_summary(analyze([load_trace(str(cpu_only))]).ranks)
    assert none.ranks_with_gpu_activity == 0 and none.unavailable


def test_traces_of_separate_runs_are_summed_but_have_no_straggler(tmp_path, capsys):
    folder = Path(__file__).parents[1] / "data/kineto/tracelens/h100"
    # A ViT and a BERT run, no distributedInfo rank in either.
    h100 = [
        folder / "Falconsai_nsfw_image_detection__1016002.json.gz",
        folder / "gaunernst_bert-small-uncased__1016001.json.gz",
    ]
    out = tmp_path / "a.json"
    assert main(["analyze", *map(str, h100), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    report = json.loads(out.read_text())
    job = report["job"]
    assert [r["rank"] for r in report["ranks"]] == [None, None]
    assert job["same_job"] is False and job["stragglers"] == []
    assert job["time_breakdown_sum"]["total"] == pytest.approx(
        sum(r["time_breakdown"]["total"] for r in report["ranks"])
    )
    assert "not one job" in text and "straggler" not in text
