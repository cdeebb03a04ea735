"""The Python API a notebook uses: ``aiflame.load``, ``aiflame.flame_graph``, ``aiflame.show``
and a profile's own display, without a kernel (tests/browser/test_notebook.py runs one)."""

from __future__ import annotations

import html
import subprocess
import sys
from pathlib import Path

import pytest

import aiflame
from aiflame.errors import AiflameError
from aiflame.render.folded import render_folded
from aiflame.sources import load_many

DATA = Path(__file__).resolve().parents[1] / "data"
RANKS = sorted((DATA / "kineto" / "hta" / "trace_filter").glob("*.json.gz"))
FOLDED = DATA / "diff" / "before.txt"


def test_importing_aiflame_loads_nothing_heavy():
    code = "import sys, aiflame; print(aiflame.__version__, 'numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [aiflame.__version__, "False"]


def test_load_reads_what_the_command_line_reads():
    assert isinstance(aiflame.load(FOLDED), aiflame.Profile)
    merged = aiflame.load(RANKS, group_by="file")
    roots = {line.split(";", 1)[0] for line in render_folded(merged).splitlines()}
    assert roots == {p.name for p in RANKS}
    same = load_many([str(p) for p in RANKS])
    assert merged.values.sum() == pytest.approx(same.values.sum())
    short = aiflame.load(RANKS[0], kernel_names="short")
    assert any("<…>" in line for line in render_folded(short).splitlines())
    with pytest.raises(AiflameError, match="no input"):
        aiflame.load([])


def test_flame_graph_is_the_page_in_a_sandboxed_frame(tmp_path):
    graph = aiflame.flame_graph(FOLDED, title="<b>before</b>", height=300)
    frame = graph._repr_html_()
    assert frame.startswith('<iframe class="aiflame-flamegraph" title="&lt;b&gt;before&lt;/b&gt;"')
    assert 'sandbox="allow-scripts"' in frame and "allow-same-origin" not in frame
    assert "height: 300px" in frame
    srcdoc = frame.split('srcdoc="', 1)[1].split('"', 1)[0]
    assert html.unescape(srcdoc) == graph.page
    assert "<title>&lt;b&gt;before&lt;/b&gt;</title>" in graph.page
    graph.save(tmp_path / "page.html")
    assert (tmp_path / "page.html").read_text(encoding="utf-8") == graph.page
    with pytest.raises(AiflameError, match="no metric 'gpu-time'"):
        aiflame.flame_graph(FOLDED, metric="gpu-time")
    with pytest.raises(AiflameError, match="for loading files"):
        aiflame.flame_graph(aiflame.load(FOLDED), kernel_names="short")


def test_a_profile_displays_as_its_flame_graph():
    profile = aiflame.load(FOLDED)
    assert profile._repr_html_().startswith('<iframe class="aiflame-flamegraph"')
    text = repr(profile)
    assert text.startswith(f"<Profile from {FOLDED}: ") and len(text) < 200
    empty = aiflame.Profile(
        profile.strings, profile.frames, profile.stacks, profile.sample_types,
        profile.sample_stack[:0], profile.values[:0], profile.sample_labels[:0],
        profile.label_sets,
    )  # fmt: skip
    assert empty._repr_html_() is None  # nothing to draw: the text form stands


def test_show_displays_through_ipython(monkeypatch):
    display = pytest.importorskip("IPython.display")
    shown = []
    monkeypatch.setattr(display, "display", shown.append)
    assert aiflame.show(FOLDED) is None
    (graph,) = shown
    assert "Flame graph of before" in graph.page
