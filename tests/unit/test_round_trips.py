"""Every output reads back whole: a profile whose frame names are hostile (empty, blank,
'#' first, ';', line breaks, escapes, bidi controls, NUL, lone surrogates, 5,000
characters) is written by each writer that aiflame reads again (folded, pprof, speedscope,
Chrome trace, differential folded) and read back with every sample and its value."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiflame.model import FrameKind, Profile, ProfileBuilder, SampleType
from aiflame.render.folded import NO_NAME, render_diff_folded
from aiflame.render.registry import render
from aiflame.sources.registry import load
from aiflame.transforms.diff import diff_profiles

HOSTILE = [
    "", " ", "\t", "#comment", "# austin: 3.0.0", "semi;colon", "x\\;y", "back\\",
    "line\nbreak", "cr\rx", "a 5", "123", "trail ", " lead", "\x1b[31mred", "\u202egnp.exe",
    "nul\x00byte", "\ud800lone", "</script>", "[unknown]", "-", "{", '"q"', "é", "x" * 5_000,
]  # fmt: skip


def hostile_profile(base: int = 0) -> Profile:
    """Each name alone, between two others, and twice in a row; timed samples."""
    b = ProfileBuilder([SampleType("wall-time", "nanoseconds")])
    t = 1_000
    for i, name in enumerate(HOSTILE):
        f = b.frame(name, FrameKind.PYTHON)
        stacks = [[f], [b.frame("root"), f, b.frame(f"leaf{i}")], [f, f]]
        for k, frames in enumerate(stacks):
            b.add(b.stack(frames), [base + 100 * (k + 1) + i], timestamp=t)
            t += 10_000
    return b.build()


WRITERS = [("folded", ".folded"), ("pprof", ".pb.gz"), ("speedscope", ".json"), ("chrome", ".json")]


@pytest.mark.parametrize(("fmt", "ext"), WRITERS)
def test_each_writer_reads_back_every_sample(tmp_path: Path, fmt: str, ext: str):
    profile = hostile_profile()
    path = tmp_path / f"out{ext}"
    path.write_bytes(render(profile, fmt))
    again = load(str(path))
    assert again.totals()[0] == pytest.approx(profile.totals()[0])
    # Every written stack is there: none dropped as a comment or a line without a frame.
    written = sum(1 for _, v in again.iter_stack_values() if v)
    assert written >= len(HOSTILE) * 2
    names = {again.strings.strings[n] for n in again.frames.name}
    assert "#comment" in names
    if fmt == "folded":
        assert NO_NAME in names  # the stack of one blank frame, visible


def test_the_blank_and_comment_stacks_in_folded(tmp_path: Path):
    b = ProfileBuilder([SampleType("samples", "count")])
    b.add(b.stack([b.frame("")]), [3])
    b.add(b.stack([b.frame("#x"), b.frame("y")]), [4])
    b.add(b.stack([b.frame("a"), b.frame("")]), [5])
    text = render(b.build(), "folded").decode()
    assert text == "[no name] 3\n\\#x;y 4\na; 5\n"
    path = tmp_path / "x.folded"
    path.write_text(text)
    again = load(str(path))
    assert sorted(" ".join(again.stack_names(s)) for s, _ in again.iter_stack_values()) == [
        "#x y",
        "[no name]",
        "a ",
    ]


def test_differential_folded_keeps_every_sample():
    """``stack base test`` lines: none without a frame or read as a comment, and the two
    columns add up to the two profiles."""
    base, test = hostile_profile(), hostile_profile(base=7)
    lines = render_diff_folded(diff_profiles(base, test)).splitlines()
    stacks = [ln.rsplit(" ", 2)[0] for ln in lines]
    assert all(s.strip() and not s.startswith("#") for s in stacks)
    assert sum(float(ln.rsplit(" ", 2)[1]) for ln in lines) == base.totals()[0]
    assert sum(float(ln.rsplit(" ", 1)[1]) for ln in lines) == test.totals()[0]
