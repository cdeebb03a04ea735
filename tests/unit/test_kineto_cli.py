"""The command line on PyTorch profiler traces: flamegraph, convert, info, several ranks."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiflame.cli.main import main
from aiflame.render.folded import render_folded
from aiflame.sources import kineto, load_many
from aiflame.sources.inputs import Input

DATA = Path(__file__).resolve().parents[1] / "data" / "kineto"
BERT = DATA / "tracelens" / "h100" / "gaunernst_bert-small-uncased__1016001.json.gz"
RANKS = DATA / "hta" / "trace_filter"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def test_convert_folded_gpu_time_keeps_trace_names(capsys: pytest.CaptureFixture[str]) -> None:
    out = run(capsys, "convert", str(BERT), "-f", "folded", "--metric", "gpu-time", "-o", "-")
    assert out == render_folded(kineto.load(Input(str(BERT))), "gpu-time")
    assert "aten::addmm;cuLaunchKernel;-;void cutlass::Kernel2<cutlass_80_" in out
    short = run(capsys, "convert", str(BERT), "-f", "folded", "-o", "-", "--kernel-names", "short")
    assert ";-;cutlass::Kernel2<…> " in short
    raw = run(capsys, "convert", str(BERT), "-f", "folded", "-o", "-", "--python-names", "raw")
    assert "torch/nn/modules/linear.py(124): forward" in raw


def test_cpu_time_still_names_the_slice_metric(capsys: pytest.CaptureFixture[str]) -> None:
    wall = run(capsys, "convert", str(BERT), "-f", "folded", "--metric", "wall-time", "-o", "-")
    old = run(capsys, "convert", str(BERT), "-f", "folded", "--metric", "cpu-time", "-o", "-")
    assert old == wall and ";ProfilerStep#6;" in wall


def test_several_ranks_from_a_directory(capsys: pytest.CaptureFixture[str]) -> None:
    files = sorted(str(p) for p in RANKS.glob("*.json.gz"))
    merged = load_many([str(RANKS)])
    assert merged.meta["sources"] == files
    separate = [kineto.load(Input(f)) for f in files]
    assert merged.totals().tolist() == pytest.approx(sum(p.totals() for p in separate).tolist())
    assert {dict(ls).get("rank") for ls in merged.label_sets} == {None, "0", "1"}
    assert merged.meta["gpu_time_ns"] == sum(p.meta["gpu_time_ns"] for p in separate)
    assert str(merged.meta["info:rank"]) == "rank 0: 0 | rank 1: 1"
    out = run(capsys, "convert", str(RANKS), "-f", "folded", "-o", "-", "--group-by", "rank")
    roots = {line.split(";", 1)[0] for line in out.splitlines()}
    assert roots == {"rank 0", "rank 1"}
    by_file = run(capsys, "convert", *files, "-f", "folded", "-o", "-", "--group-by", "rank")
    assert by_file == out


def test_flamegraph_and_info(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    html = tmp_path / "bert.html"
    assert main(["flamegraph", str(BERT), "-o", str(html), "--group-by", "stream"]) == 0
    assert html.stat().st_size > 10_000
    capsys.readouterr()
    info = run(capsys, "info", str(BERT))
    assert "gpu-time [nanoseconds] total 309.437 us  (default)" in info
    assert "unlinked gpu time: 0 ns (0.0%)" in info
    assert "60 kernels, 1 memcpy, 0 memset" in info
