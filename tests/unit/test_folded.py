"""The folded importer on real collapsed-stack files (CRLF, UTF-16 with BOM, invalid lines),
checked against speedscope's expected import of the same files, and on edge cases.
"""

from __future__ import annotations

import gzip
import io
import os
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from speedscope_snapshots import expected_stacks, folded_values

from aiflame.cli.main import main
from aiflame.errors import InputError
from aiflame.model import FrameKind
from aiflame.render.folded import render_folded
from aiflame.sources import load, load_many
from aiflame.sources.folded import importer as folded
from aiflame.sources.inputs import Input

COLLAPSED = Path(__file__).parents[1] / "data" / "speedscope" / "stackcollapse"
SNAPSHOT = (COLLAPSED / "bg-flamegraph.test.ts.snap").read_text(encoding="utf-8")

# file -> the speedscope test whose snapshot holds its expected import
CASES = {
    "simple.txt": "importFromBGFlameGraph",
    "simple-crlf.txt": "importFromBGFlameGraph with CRLF",
    "simple-utf16-le.txt": "importFromBGFlameGraph with UTF-16, Little Endian",
    "simple-utf16-be.txt": "importFromBGFlameGraph with UTF-16, Big Endian",
    "simple-with-invalids.txt": "importFromBGFlameGraph with invalid lines",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_speedscopes_import(name):
    profile = load(str(COLLAPSED / name))
    assert profile.meta["format"] == "folded"
    assert folded_values(render_folded(profile)) == expected_stacks(SNAPSHOT, CASES[name])


def test_encodings_and_line_ends_give_the_same_profile():
    outputs = {render_folded(load(str(COLLAPSED / name))) for name in CASES}
    assert outputs == {"a;b 5\na;b;c 5\na;b;d 4\n"}
    raw = (COLLAPSED / "simple-utf16-le.txt").read_bytes()
    assert raw.startswith(b"\xff\xfe") and b"\r\x00\n\x00" in raw  # BOM and CRLF both


def test_invalid_lines_are_ignored_and_counted():
    # '// some other comment' and 'invalid line'; the '# comment ...' line is a comment
    assert load(str(COLLAPSED / "simple-with-invalids.txt")).meta["ignored_lines"] == 2
    assert load(str(COLLAPSED / "simple.txt")).meta["ignored_lines"] == 0


def test_fractional_counts_and_non_counts(tmp_path):
    path = tmp_path / "frac.folded"
    path.write_text(
        "a;b 0.5\na;b 0.25\na;c 1.5\na;d inf\na;e nan\na;f -3\na;g\t2\nlonely\n",
        encoding="utf-8",
    )
    profile = load(str(path))
    assert folded_values(render_folded(profile)) == {"a;b": 0.75, "a;c": 1.5, "a;g": 2.0}
    assert profile.meta["ignored_lines"] == 4  # inf, nan, a negative count, no count
    assert profile.totals()[0] == pytest.approx(4.25)


def test_gzipped_input_is_read_transparently(tmp_path):
    for name in ("simple-crlf.txt", "simple-utf16-be.txt"):
        gz = tmp_path / f"{name}.gz"
        gz.write_bytes(gzip.compress((COLLAPSED / name).read_bytes()))
        assert render_folded(load(str(gz))) == "a;b 5\na;b;c 5\na;b;d 4\n"
    vertx = load(str(COLLAPSED / "perf-vertx-stacks-01-collapsed-all.txt.gz"))
    assert len(vertx) == 199 and vertx.meta["ignored_lines"] == 0


def test_stdin(monkeypatch, capsys):
    data = (COLLAPSED / "simple-utf16-le.txt").read_bytes()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    assert main(["convert", "-", "-f", "folded", "-o", "-"]) == 0
    assert capsys.readouterr().out == "a;b 5\na;b;c 5\na;b;d 4\n"


def test_stdin_gzipped_is_sniffed_then_parsed(monkeypatch):
    data = gzip.compress((COLLAPSED / "recursion.txt").read_bytes())
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    profile = load("-")
    assert profile.meta["source"] == "-"
    assert profile.totals()[0] == 10


def test_a_pipe_is_read_once_then_sniffed_and_parsed(tmp_path):
    # Like `aiflame convert <(zcat x.gz)`: the path cannot be opened twice.
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    data = gzip.compress((COLLAPSED / "simple-utf16-be.txt").read_bytes())
    result: list[str] = []
    writer = threading.Thread(target=fifo.write_bytes, args=(data,), daemon=True)
    reader = threading.Thread(
        target=lambda: result.append(render_folded(load(str(fifo)))), daemon=True
    )
    writer.start()
    reader.start()
    reader.join(timeout=30)  # reopening a drained pipe would block forever
    assert result == ["a;b 5\na;b;c 5\na;b;d 4\n"]


def test_several_inputs_are_merged():
    a, b = str(COLLAPSED / "simple.txt"), str(COLLAPSED / "simple-crlf.txt")
    merged = load_many([a, b, str(COLLAPSED / "alternating.txt")])
    values = folded_values(render_folded(merged))
    assert values == {"a;b": 10 + 91, "a;b;c": 10, "a;b;d": 8, "c;d": 91}
    assert merged.meta["sources"] == [a, b, str(COLLAPSED / "alternating.txt")]
    assert [t.name for t in merged.sample_types] == ["samples"]


def test_kinds_are_guessed_from_perf_annotations():
    profile = load(str(COLLAPSED / "perf-vertx-stacks-01-collapsed-all.txt.gz"))
    kinds = {}
    for i in range(len(profile.frames)):
        f = profile.frames.get(i)
        kinds[f.name] = f.kind
    assert kinds["hypercall_page_[k]"] == FrameKind.KERNEL
    assert any(k == FrameKind.JIT and n.endswith("_[j]") for n, k in kinds.items())
    assert kinds["GCTaskThread::run"] == FrameKind.CPP


def test_recursion_keeps_repeated_frames():
    profile = load(str(COLLAPSED / "recursion.txt"))
    depths = sorted(len(profile.stack_names(int(s))) for s in set(profile.sample_stack.tolist()))
    assert depths[-1] == 6  # a;b;a;b;a;b
    assert np.isclose(profile.totals()[0], 10)


@pytest.mark.parametrize(
    "content", [b"", b"  \n\n", b"\xff\xfe", b"\xef\xbb\xbf\n", b"# only a comment\n"]
)
def test_empty_or_sampleless_input_is_an_input_error(tmp_path, content):
    path = tmp_path / "empty.folded"
    path.write_bytes(content)
    with pytest.raises(InputError, match=r"empty\.folded"):
        load(str(path))
    with pytest.raises(InputError, match=r"empty\.folded"):
        folded.load(Input(str(path)))


def test_comment_lines_are_never_frames(data_dir):
    """Austin's metadata ('# duration: 383010') ends in a number like a folded line does."""
    path = data_dir / "austin" / "austin3_wall.austin"
    comments = [ln for ln in path.read_text().splitlines() if ln.startswith("#")]
    assert any(ln.rsplit(" ", 1)[-1].isdigit() for ln in comments)
    profile = load(str(path), "folded")
    names = {profile.strings.strings[n] for n in profile.frames.name}
    assert not [n for n in names if n.startswith("#")]
    assert profile.meta["ignored_lines"] == 0
    body = sum(int(ln.rsplit(" ", 1)[1]) for ln in path.read_text().splitlines() if ln[:1] == "P")
    assert profile.values[:, 0].sum() == body
