"""The command line on PyTorch profiler traces: flamegraph, convert, info, several ranks."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from aiflame.cli.main import main
from aiflame.render import flamedata
from aiflame.render.folded import render_folded
from aiflame.render.html import extract_data
from aiflame.sources import load_many
from aiflame.sources.inputs import Input
from aiflame.sources.kineto import importer as kineto

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
    # the two cutlass kernels of this trace: folded, but to what tells them apart
    assert (
        ";-;cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_256x128_64x3_tn_align2> "
        in short
    )
    kernels = [line.split(";-;", 1)[1] for line in short.splitlines() if ";-;" in line]
    # no parameter lists after the template arguments (lambdas keep their own)
    assert kernels and not any(re.search(r">\(.*\) \d+$", k) for k in kernels)
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


QWEN = DATA / "tracelens" / "h100" / "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
STEP6 = DATA / "kineto_tb_plugin" / "resnet50_num_workers_4_worker0.step6.pt.trace.json.gz"


def frame_names(folded_text: str) -> set[str]:
    return {f for line in folded_text.splitlines() for f in line.rsplit(" ", 1)[0].split(";")}


def test_module_instances_and_merged_steps_on_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    merged = frame_names(run(capsys, "convert", str(QWEN), "-f", "folded", "-o", "-"))
    assert not [n for n in merged if n.startswith("nn.Module: Qwen2DecoderLayer")]
    each = frame_names(
        run(capsys, "convert", str(QWEN), "-f", "folded", "-o", "-", "--module-instances")
    )
    layers = {n for n in each if n.startswith("nn.Module: Qwen2DecoderLayer_")}
    assert len(layers) == 24
    steps = run(capsys, "convert", str(STEP6), "-f", "folded", "-o", "-", "--merge-steps")
    assert "ProfilerStep#*" in frame_names(steps)
    # diff and analyze's flame graph page take the same options.
    out = tmp_path / "d.folded"
    run(capsys, "diff", str(QWEN), str(QWEN), "-o", str(out), "--module-instances")
    assert "nn.Module: Qwen2DecoderLayer_23" in out.read_text(encoding="utf-8")
    report = tmp_path / "r.html"
    run(capsys, "analyze", str(QWEN), "-o", str(report), "--module-instances")
    page = (tmp_path / "r.flame.html").read_text(encoding="utf-8")
    header, payload = extract_data(page)
    strings = flamedata.unpack(header, payload)["strings"]
    assert "nn.Module: Qwen2DecoderLayer_23" in strings
    run(capsys, "analyze", str(QWEN), "-o", str(report))
    header, payload = extract_data((tmp_path / "r.flame.html").read_text(encoding="utf-8"))
    assert "nn.Module: Qwen2DecoderLayer_23" not in flamedata.unpack(header, payload)["strings"]
