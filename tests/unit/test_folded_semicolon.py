"""A ``;`` inside a frame name survives folded export and re-import (written ``\\;``)."""

from __future__ import annotations

from pathlib import Path

from aiflame.model.folded import escape_name, split_stack
from aiflame.render.folded import render_diff_folded, render_folded
from aiflame.sources import load
from aiflame.transforms.diff import diff_profiles

TRACE = Path(__file__).parents[1] / "data" / "kineto" / "recorded" / "cpu_semicolon_memory.json.gz"


def stacks_by_names(profile, metric: str) -> dict[tuple[str, ...], float]:
    col = profile.type_index(metric)
    out: dict[tuple[str, ...], float] = {}
    for stack, value in profile.iter_stack_values(col):
        if value and stack >= 0:
            key = tuple(profile.stack_names(stack))
            out[key] = out.get(key, 0.0) + value
    return out


def test_a_recorded_annotation_with_a_semicolon_round_trips(tmp_path):
    trace = load(str(TRACE))
    names = {trace.strings.strings[n] for n in trace.frames.name}
    assert {"train;step=0", "train;step=1"} <= names  # record_function("train;step=N")
    text = render_folded(trace, "cpu-time")
    assert "train\\;step=0" in text
    path = tmp_path / "trace.folded"
    path.write_text(text)
    again = load(str(path))
    assert stacks_by_names(again, "samples") == stacks_by_names(trace, "cpu-time")


def test_names_without_semicolons_are_written_as_they_are():
    assert escape_name("aten::mm") == "aten::mm"
    assert escape_name("a;b") == "a\\;b"
    assert split_stack("root;a\\;b;leaf") == ["root", "a;b", "leaf"]
    assert split_stack("root;leaf") == ["root", "leaf"]


def test_the_differential_output_escapes_too(tmp_path):
    trace = load(str(TRACE))
    diff = diff_profiles(trace, trace, metric="cpu-time")
    lines = render_diff_folded(diff).splitlines()
    assert any("train\\;step=1" in ln for ln in lines)
    assert not any(";step=" in ln.replace("\\;step", "") for ln in lines)
