"""The static SVG flame graph: geometry like flamegraph.pl's, page colours, escaping."""

from __future__ import annotations

import html
import itertools
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from aiflame.cli.main import main
from aiflame.model import CallTree, FrameKind
from aiflame.render.palette import PALETTE, STALL_CLASSES, kind_color
from aiflame.render.svg import elide, render_svg
from aiflame.sources import load

DATA = Path(__file__).parents[1] / "data"
PERF = DATA / "speedscope" / "stackcollapse" / "perf-vertx-stacks-01-collapsed-all.txt.gz"
SVG = "{http://www.w3.org/2000/svg}"


def frames_of(svg: str) -> list[dict]:
    """(name, info, x, y, width, fill) of every frame <g> of an SVG flame graph."""
    root = ET.fromstring(svg.encode("utf-8"))
    group = root.find(f".//{SVG}g[@id='frames']")
    out = []
    for g in group:
        rect, title = g.find(f"{SVG}rect"), g.find(f"{SVG}title").text
        text = g.find(f"{SVG}text")
        out.append(
            {
                "info": title,
                "name": title[: title.rindex(" (")],
                "x": float(rect.get("x")),
                "y": float(rect.get("y")),
                "w": float(rect.get("width")),
                "fill": rect.get("fill"),
                "text": text.text if text is not None else "",
            }
        )
    return out


def test_every_frame_of_a_real_profile_is_drawn_at_its_share():
    profile = load(str(PERF))
    svg = render_svg(profile)
    frames = frames_of(svg)
    tree = CallTree.from_profile(profile)
    total = profile.values[:, 0].sum()
    wide = [i for i in range(len(tree)) if tree.total_value[i, 0] / total * 1180 >= 0.1]
    assert len(frames) == len(wide) + 1  # and the "all" root
    assert frames[0]["name"] == "all" and frames[0]["w"] == 1180
    by_name: dict[str, float] = {}
    for i in wide:
        name = re.sub(r"_\[[kwij]\]$", "", profile.frames.name_of(int(tree.frame[i])))
        by_name[name] = by_name.get(name, 0.0) + tree.total_value[i, 0]
    drawn: dict[str, float] = {}
    for f in frames[1:]:
        drawn[f["name"]] = drawn.get(f["name"], 0.0) + f["w"]
    assert drawn.keys() == by_name.keys()
    for name, value in by_name.items():
        assert drawn[name] == pytest.approx(value / total * 1180, abs=1e-3 * len(frames))


def test_children_sit_inside_their_parent_and_siblings_do_not_overlap():
    frames = frames_of(render_svg(load(str(PERF))))
    rows: dict[float, list[dict]] = {}
    for f in frames:
        rows.setdefault(f["y"], []).append(f)
    ys = sorted(rows, reverse=True)  # the root row is the lowest
    for below, above in itertools.pairwise(ys):
        spans = sorted((f["x"], f["x"] + f["w"]) for f in rows[below])
        for f in rows[above]:
            assert any(a - 1e-3 <= f["x"] and f["x"] + f["w"] <= b + 1e-3 for a, b in spans)
        row = sorted(rows[above], key=lambda f: f["x"])
        for a, b in itertools.pairwise(row):
            assert a["x"] + a["w"] <= b["x"] + 1e-3


def test_colours_are_the_pages_by_kind():
    profile = load(str(PERF))
    names = [profile.frames.name_of(i) for i in range(len(profile.frames))]
    kinds = {
        re.sub(r"_\[[kwij]\]$", "", n): (FrameKind(k), n)
        for n, k in zip(names, profile.frames.kind, strict=True)
    }
    frames = frames_of(render_svg(profile))
    seen = set()
    for f in frames[1:]:
        kind, raw = kinds[f["name"]]
        assert f["fill"] == kind_color(kind, raw)
        seen.add(kind)
    assert {FrameKind.KERNEL, FrameKind.JIT} <= seen  # the profile's _[k] and _[j] frames


def test_the_palette_is_the_one_of_the_page():
    js = (Path(__file__).parents[2] / "src/aiflame/render/assets/format.js").read_text()
    table = dict(
        (m.group(1), ((int(m.group(2)), int(m.group(3)), int(m.group(4))),
                      (int(m.group(5)), int(m.group(6)), int(m.group(7)))))
        for m in re.finditer(
            r'"?([\w-]+)"?: \{ label: "[^"]*", base: \[(\d+), (\d+), (\d+)\], '
            r"range: \[(\d+), (\d+), (\d+)\] \}",
            js,
        )
    )  # fmt: skip
    assert table == PALETTE


def test_stall_classes_are_the_ones_of_the_page():
    js = (Path(__file__).parents[2] / "src/aiflame/render/assets/format.js").read_text()
    block = js.split("const STALL_CLASSES", 1)[1].split("};", 1)[0]
    pattern = (
        r'"?(\w[\w /-]*?)"?: \{ base: \[(\d+), (\d+), (\d+)\], range: \[(\d+), (\d+), (\d+)\] \}'
    )
    table = {
        m.group(1): (tuple(int(m.group(i)) for i in (2, 3, 4)),
                     tuple(int(m.group(i)) for i in (5, 6, 7)))
        for m in re.finditer(pattern, block)
    }  # fmt: skip
    assert table == STALL_CLASSES and len(table) == 7


def test_labels_fit_and_are_cut_in_the_middle():
    assert elide("at::native::vectorized_elementwise_kernel", 12) == "at::na…ernel"
    assert elide("forward (torch/nn/modules/linear.py:125)", 10) == "forward"
    assert elide("forward (torch/nn/modules/linear.py:125)", 5) == "fo…rd"
    assert elide("abc", 2) == ""
    for f in frames_of(render_svg(load(str(PERF))))[1:]:
        assert len(f["text"] or "") <= f["w"] / (12 * 0.59)


# What the page's labels do (format.js fitLabel); render/svg.py and the SVG's script agree.
LABEL_CASES = [
    ("void dpsk::ep::internode::combine<__nv_bfloat16, 16, 24>(int*, void*)", 30),
    (
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>,"
        " std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)",
        45,
    ),
    ("at::native::kern<float>(int)", 26),
    ("forward (torch/nn/modules/linear.py:125)", 30),
    ("Qwen2DecoderLayer_10", 8),
    ("Memcpy DtoH (Device -> Pinned)", 15),
]


def test_labels_drop_a_signature_as_the_page_does():
    # The SVG cut "void dpsk::ep::internode::combine<...>(int*, void*)" to "voi…*)": the
    # return type and parameters are what tells kernels apart least.
    assert elide(*LABEL_CASES[0]) == "combine<__nv_bfloat16, 16, 24>"
    assert elide(*LABEL_CASES[2]) == "at::native::kern<float>"  # parameters go first
    assert elide("void at::native::kern<float>(int)", 28) == "at::native::kern<float>(int)"
    assert elide("forward (torch/nn/modules/linear.py:125)", 30) == "forward (…dules/linear.py:125)"
    assert elide("Qwen2DecoderLayer_10", 8) == "Qwen…_10"  # the instance number whole
    assert elide("Memcpy DtoH (Device -> Pinned)", 15) == "Memcpy …Pinned)"  # no signature
    trace = DATA / "kineto" / "tracelens" / "h100" / "gaunernst_bert-small-uncased__1016001.json.gz"
    labels = [f for f in frames_of(render_svg(load(str(trace)))) if f["text"]]
    kernels = [f for f in labels if f["name"].startswith("void ")]
    assert len(kernels) >= 10
    for f in kernels:  # the label starts with the kernel's name or its unqualified name
        head = f["text"].split("…")[0].split("<")[0]
        qualified = f["name"].removeprefix("void ").split("<")[0]
        unqualified = qualified.rsplit("::", 1)[-1]
        assert f["text"] == f["name"] or qualified.startswith(head) or unqualified.startswith(head)


def test_names_are_escaped_and_the_document_is_xml(tmp_path):
    path = tmp_path / "odd.folded"
    path.write_text('main;<script>alert("x")</script>;a&b\x01c 5\nmain;x]]>y 3\n')
    svg = render_svg(load(str(path)))
    assert "<script>alert" not in svg
    names = {f["name"] for f in frames_of(svg)}  # parses as XML
    assert {'<script>alert("x")</script>', "a&b\ufffdc", "x]]>y"} <= names


def test_cli_writes_svg_and_refuses_what_it_cannot_write(tmp_path, capsys):
    out = tmp_path / "graph.svg"
    assert main(["flamegraph", str(PERF), "-o", str(out), "--title", "vert.x"]) == 0
    svg = out.read_text()
    assert svg.startswith("<?xml") and "<svg" in svg and "vert.x" in svg
    assert main(["convert", str(PERF), "-o", str(tmp_path / "c.svg")]) == 0
    assert (tmp_path / "c.svg").read_text().startswith("<?xml")
    capsys.readouterr()
    for argv in (
        ["flamegraph", str(PERF), "-o", str(tmp_path / "graph.png")],
        ["flamegraph", str(PERF), "-o", str(tmp_path / "graph.folded")],
        ["convert", str(PERF), "-o", str(tmp_path / "graph.pdf")],
        ["diff", str(PERF), str(PERF), "-o", str(tmp_path / "d.svg")],
        ["memory", str(PERF), "-o", str(tmp_path / "m.jpg")],
        ["analyze", str(PERF), "-o", str(tmp_path / "r.json")],
    ):
        assert main(argv) == 1, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "error" in err, (argv, err)
        assert not list(tmp_path.glob(Path(argv[argv.index("-o") + 1]).name))


def drawn_by_flamegraph_pl(svg: str) -> list[tuple[float, str, float]]:
    """(row, name, width) of flamegraph.pl's frames."""
    out = []
    pattern = (
        r"<g >\s*<title>(.*?) \([\d,]+ samples, [\d.]+%\)</title>"
        r'<rect x="([\d.]+)" y="([\d.]+)" width="([\d.]+)"'
    )
    for m in re.finditer(pattern, svg):
        out.append((float(m.group(3)), html.unescape(m.group(1)), float(m.group(4))))
    return out


@pytest.mark.skipif(shutil.which("perl") is None, reason="perl is not installed")
def test_the_same_frames_as_flamegraph_pl_when_available(tmp_path):
    root = os.environ.get("AIFLAME_FLAMEGRAPH")
    script = Path(root) / "flamegraph.pl" if root else None
    if script is None or not script.exists():
        pytest.skip("set AIFLAME_FLAMEGRAPH to a FlameGraph checkout to run flamegraph.pl")
    folded = tmp_path / "in.folded"
    profile = load(str(PERF))
    from aiflame.render.folded import render_folded

    folded.write_text(render_folded(profile))
    peer = subprocess.run(["perl", str(script), str(folded)], capture_output=True, check=True,
                          text=True).stdout  # fmt: skip
    theirs = sorted((name, round(w, 1)) for _, name, w in drawn_by_flamegraph_pl(peer))
    ours = sorted((f["name"], round(f["w"], 1)) for f in frames_of(render_svg(profile))[1:])
    theirs = [t for t in theirs if t[0] != "all"]
    ours = [t for t in ours if t[0]]  # Perl's split drops the empty leaf of "a;b; 3"
    assert len(ours) == len(theirs)
    mismatched = [
        (a, b) for a, b in zip(ours, theirs, strict=True) if a[0] != b[0] or abs(a[1] - b[1]) > 0.11
    ]
    assert not mismatched


def test_icicle_puts_the_root_on_top():
    frames = frames_of(render_svg(load(str(PERF)), inverted=True))
    assert frames[0]["name"] == "all"
    assert all(f["y"] > frames[0]["y"] for f in frames[1:])
    normal = frames_of(render_svg(load(str(PERF))))
    assert all(f["y"] < normal[0]["y"] for f in normal[1:])
