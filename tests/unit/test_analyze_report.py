"""The outputs of aiflame analyze: terminal report, HTML report, flame graph links, timeline."""

from __future__ import annotations

import gzip
import io
import json
import re
from pathlib import Path
from urllib.parse import parse_qs

import pytest
from rich.console import Console

from aiflame.analysis.busy_timeline import busy_timeline
from aiflame.analysis.links import StackFinder, fragment
from aiflame.analysis.report import analyze
from aiflame.analysis.schema import to_builtins
from aiflame.analysis.timeline import time_breakdown
from aiflame.cli.main import main
from aiflame.render.analyze_html import roofline_data
from aiflame.render.analyze_terminal import render_terminal, render_text
from aiflame.render.html import extract_data
from aiflame.sources.kineto.names import python_frame
from aiflame.sources.registry import load_trace_input as load_input

DATA = Path(__file__).resolve().parents[1] / "data" / "kineto" / "tracelens"
H100 = DATA / "h100" / "gaunernst_bert-small-uncased__1016001.json.gz"
TRITON = DATA / "torch_compile_triton" / "trace.json.gz"
HOSTILE = '</script><img src=x onerror="alert(1)">[bold red]k[/]&amp;'


def report_data(page: str) -> dict:
    m = re.search(r'<script id="aiflame-report" type="application/json">(.*?)</script>', page, re.S)
    assert m, "no report data in the page"
    return json.loads(m.group(1))


def hostile_trace(tmp_path: Path) -> Path:
    """The H100 trace with its first kernel (and launches of it) renamed to HOSTILE."""
    trace = json.loads(gzip.decompress(H100.read_bytes()))
    first = next(e["name"] for e in trace["traceEvents"] if e.get("cat") == "kernel")
    for e in trace["traceEvents"]:
        if e.get("name") == first:
            e["name"] = HOSTILE
    out = tmp_path / "hostile.json"
    out.write_text(json.dumps(trace))
    return out


# -- terminal -----------------------------------------------------------------------------


def test_piped_report_is_plain_and_fits_100_columns(capsys):
    assert main(["analyze", str(H100)]) == 0
    out = capsys.readouterr().out
    assert "\x1b[" not in out
    assert max(len(line) for line in out.splitlines()) <= 100
    assert all(line == line.rstrip() for line in out.splitlines())
    # The numbers are the JSON's: computation 307.197 us, one high finding (launch-bound
    # phases and the dispatch around them: one fix, one finding).
    assert re.search(r"^computation\s+307\.20 us\s+7\.9%", out, re.M)
    assert out.count("[high]") == 1 and "fix:" in out and "from:" in out and "estimate:" in out


def test_terminal_report_has_colour_on_a_terminal_and_keeps_its_width():
    loaded = load_input(str(H100))
    report = analyze([loaded.trace])
    buf = io.StringIO()
    # A 72x24 terminal: with no height rich takes 80x25 where TERM=dumb, whatever the width.
    console = Console(file=buf, force_terminal=True, color_system="standard", width=72, height=24)
    render_terminal(report, 5, console)
    text = buf.getvalue()
    assert "\x1b[" in text
    plain = re.sub(r"\x1b\[[0-9;]*m", "", text)
    assert max(len(line) for line in plain.splitlines()) <= 72


def test_trace_names_are_text_not_markup(tmp_path):
    report = analyze([load_input(str(hostile_trace(tmp_path))).trace])
    text = render_text(report, 20)
    assert "[bold red]k[/]" in text  # printed as written, not interpreted by rich


# -- HTML -------------------------------------------------------------------------------


def test_html_report_embeds_the_json_and_writes_the_flame_graph(tmp_path, capsys):
    out, js = tmp_path / "r.html", tmp_path / "r.json"
    assert main(["analyze", str(H100), "-o", str(out), "--json", str(js)]) == 0
    page = out.read_text(encoding="utf-8")
    data = report_data(page)
    assert data["report"] == json.loads(js.read_text())
    assert data["flame"] == "r.flame.html"
    flame = (tmp_path / "r.flame.html").read_text(encoding="utf-8")
    header, _ = extract_data(flame)
    assert header["types"][0]["name"] == "gpu-time"
    # Offline: no URL to fetch anything from.
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page + flame)
    (timeline,) = data["timelines"][0].values()
    assert timeline["bins"] > 0 and len(timeline["computation"]) == timeline["bins"]


def test_html_report_needs_a_file(capsys):
    assert main(["analyze", str(H100), "-o", "-"]) == 1
    assert "-o needs a file name" in capsys.readouterr().err


def test_hostile_names_stay_data(tmp_path, capsys):
    out = tmp_path / "r.html"
    assert main(["analyze", str(hostile_trace(tmp_path)), "-o", str(out)]) == 0
    for page in (out.read_text(encoding="utf-8"), (tmp_path / "r.flame.html").read_text()):
        assert "<img" not in page and "</script><" not in page
    data = report_data(out.read_text(encoding="utf-8"))
    names = [k["name"] for k in data["report"]["ranks"][0]["top_kernels"]]
    assert HOSTILE in names


# -- links into the flame graph -------------------------------------------------------------


def test_launch_bound_link_zooms_to_a_launching_stack():
    loaded = load_input(str(H100))
    report = analyze([loaded.trace])
    finder = StackFinder(loaded.profile())
    f = next(f for f in report.ranks[0].findings if f.rule == "launch_bound")
    main_frag, per_stack = fragment(f, finder, {"gpu-time", "wall-time", "gpu-idle"}, None)
    q = parse_qs(main_frag)
    assert q["metric"] == ["gpu-idle"]  # the idle the launches leave
    assert re.match(q["search"][0], "cudaLaunchKernel")
    # The launch-bound phases and the dispatch around them are one finding (one fix).
    assert f.merged == ["host_overhead"]
    assert len(per_stack) == len(f.top_stacks) and per_stack[0] == main_frag
    for stack, frag in zip(f.top_stacks, per_stack, strict=True):
        path = parse_qs(frag)["path"]
        # The stack is cut at 12 frames; the link has the full path from the root, to the
        # stack's innermost frame as the flame graph names it (a Python frame by its class)
        assert len(path) > len(stack.stack)
        inner = python_frame(stack.stack[-1], "raw")
        assert path[-1] == stack.stack[-1] or path[-1].endswith(
            f"{inner.func} ({inner.file}:{inner.line})"
        )
        assert path[0].startswith("ProfilerStep#") or "forward" in " ".join(path)


def test_stacks_of_repeated_steps_are_one_and_link_to_a_step():
    tb_plugin = Path(__file__).resolve().parents[1] / "data/kineto/kineto_tb_plugin"
    trace = next(tb_plugin.glob("*.json.gz"))
    loaded = load_input(str(trace))
    (rank,) = analyze([loaded.trace]).ranks
    stacks = [s.stack for f in rank.findings for s in f.top_stacks]
    assert any("ProfilerStep#*" in s for s in stacks)
    assert not any(re.match(r"ProfilerStep#\d", x) for s in stacks for x in s)
    finder = StackFinder(loaded.profile())
    step = next(s for s in stacks if "ProfilerStep#*" in s)
    found = finder.find(step)
    assert found is not None and any(re.match(r"ProfilerStep#\d+$", x) for x in found)


def test_stack_finder_returns_none_for_a_stack_not_in_the_graph():
    finder = StackFinder(load_input(str(H100)).profile())
    assert finder.find(["no such frame"]) is None
    assert finder.find([]) is None


# -- timeline and roofline data ----------------------------------------------------------------


@pytest.mark.parametrize("path", [H100, TRITON])
def test_busy_timeline_adds_up_to_the_breakdown(path):
    t = load_input(str(path)).trace
    for dev, tl in busy_timeline(t).items():
        m = t.gpu_device == t.names.index(dev)
        tb = to_builtins(time_breakdown(t.gpu_ts[m], t.gpu_dur[m], t.gpu_kind[m]).to_record())
        width = tl["total_us"] / tl["bins"]
        for key in ("computation", "exposed_communication", "exposed_memcpy"):
            # fractions are rounded to 4 decimals per bin
            assert sum(tl[key]) * width == pytest.approx(tb[key], abs=tl["bins"] * width * 1e-4)
        assert tl["total_us"] == pytest.approx(tb["total"])
        longest = max(d for _, d in tl["idle_gaps"])
        assert longest <= tb["idle"] and tl["idle_gap_count"] >= len(tl["idle_gaps"])


def test_roofline_points_are_the_gemm_rows_and_roofs_need_peaks():
    rank = to_builtins(analyze([load_input(str(H100)).trace]).ranks[0])
    rank.pop("efficiency", None)  # the GEMM table alone, as without a modelled device
    rf = roofline_data(rank)
    assert [(p["ai"], p["tflops"]) for p in rf["points"]] == [
        (g["flops_per_byte"], g["tflops_per_s"]) for g in rank["gemm"]
    ]
    assert rf["peak_tflops"] is None and any("peak" in m for m in rf["missing"])
    with_peaks = dict(rank, device={"peak_tflops": 989.0, "peak_tb_per_s": 3.35})
    rf = roofline_data(with_peaks)
    assert (rf["peak_tflops"], rf["peak_tb_per_s"], rf["missing"]) == (989.0, 3.35, [])
    rf = roofline_data(dict(rank, gemm=[], unavailable={}))
    assert rf["points"] == [] and "record_shapes=True" in rf["missing"][0]


def test_roofline_from_the_efficiency_section_has_a_roof_per_precision():
    rank = to_builtins(analyze([load_input(str(H100)).trace]).ranks[0])
    eff = {
        "device": {"name": "X", "source": "test", "tflops": {"bf16": 989.4, "fp32": 67.0},
                   "tb_per_s": 3.35},
        "ops": [
            {"op": "aten::mm", "params": {"B": 1, "M": 8, "N": 8, "K": 8}, "precision": "bf16",
             "flops_per_byte": 2.0, "tflops_per_s": 1.5, "kernel_time_us": {"sum": 3.0},
             "pct_of_roofline": 0.2, "bound": "memory"},
            {"op": "aten::conv2d", "params": {"stride": [1, 1]}, "precision": "fp32",
             "flops_per_byte": 50.0, "tflops_per_s": 20.0, "kernel_time_us": {"sum": 9.0}},
        ],
    }  # fmt: skip
    rf = roofline_data(dict(rank, efficiency=eff))
    assert [p["name"] for p in rf["points"]] == ["aten::mm 8x8x8", "aten::conv2d stride=1x1"]
    assert rf["roofs"] == [{"label": "fp32", "tflops": 67.0}, {"label": "bf16", "tflops": 989.4}]
    assert rf["peak_tb_per_s"] == 3.35 and rf["missing"] == [] and rf["source"] == "efficiency"


def test_stack_finder_follows_a_stack_through_merged_module_instances():
    qwen = DATA / "h100" / "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
    finder = StackFinder(load_input(str(qwen)).profile())
    assert finder.merged_modules
    # A launch stack as the trace names it: module frames with their instance numbers.
    raw = [
        s.split(";")
        for s in raw_stacks(qwen)
        if "nn.Module: Qwen2Attention_5;" in s and "nn.Module: Linear_" in s
    ]
    stack = max(raw, key=len)
    stack = stack[: stack.index("-")]  # down to the runtime call, like the evidence
    path = finder.find(stack[-12:])  # cut at the top, as the report cuts its stacks
    assert path is not None and path[-1] == stack[-1]
    assert not [p for p in path if p.startswith("nn.Module: ")]
    # Not the Linear calls of the MLP, which take more time: the attention's.
    attention = "Qwen2Attention > forward (transformers/models/qwen2/modeling_qwen2.py:150)"
    assert attention in path and path[path.index(attention) + 1].startswith("Linear > forward")


def raw_stacks(path: Path) -> list[str]:
    from aiflame.sources import load

    profile = load(str(path), python_names="raw", module_instances=True)
    return [";".join(profile.stack_names(s)) for s, _ in profile.iter_stack_values(0)]
