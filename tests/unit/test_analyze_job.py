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


def test_the_job_comes_first_and_each_rank_is_a_row(capsys):
    """Of several ranks the terminal shows the job, then a row per rank; a rank's full
    report is asked for with --rank (every rank's is in --json and -o)."""
    assert main(["analyze", *map(str, RANKS)]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert lines[0].startswith("job ─") and lines[1].startswith("job: 2 ranks")
    rows = [line for line in lines if line.startswith(("rank 0", "rank 1"))]
    assert [r.split()[1] for r in rows] == ["0", "1"]
    assert "queued work waits on a dependency" in rows[1]
    assert "Top kernels by GPU time" not in text and "--rank all" in text
    assert len(lines) < 40
    assert main(["analyze", *map(str, RANKS), "--rank", "1"]) == 0
    one = capsys.readouterr().out
    assert one.splitlines()[: len(rows) + 12] == lines[: len(rows) + 12]  # the job, the rows
    assert one.count("Top kernels by GPU time") == 1 and "rank 1 ─" in one
    assert "rank 0 ─" not in one
    assert main(["analyze", *map(str, RANKS), "--rank", "all"]) == 0
    every = capsys.readouterr().out
    assert every.count("Top kernels by GPU time") == 2 and "--rank all" not in every
    assert main(["analyze", *map(str, RANKS), "--rank", "7"]) == 1
    err = capsys.readouterr().err
    assert err.strip() == "aiflame: error: --rank 7: no such rank among the traces (0, 1)"
