"""Austin's text output read as Austin's: modes, metrics, frame layouts of each version."""

from __future__ import annotations

import gzip
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from aiflame.model import FrameKind
from aiflame.sources import detect, load
from aiflame.sources.inputs import Input

DATA = Path(__file__).parents[1] / "data" / "austin"
ALL = sorted(p.name for p in DATA.glob("*.austin*"))


def text(name: str) -> str:
    raw = (DATA / name).read_bytes()
    return (gzip.decompress(raw) if name.endswith(".gz") else raw).decode()


def sample_lines(name: str) -> list[tuple[str, str]]:
    """(head, metrics) of each sample line, split the simplest way."""
    out = []
    for line in text(name).splitlines():
        if line.startswith(("P", "Thread ")):
            head, _, metrics = line.rpartition(" ")
            out.append((head, metrics))
    return out


def total(name: str, metric: str) -> float:
    p = load(str(DATA / name))
    return float(p.values[:, p.type_index(metric)].sum())


@pytest.mark.parametrize("name", ALL)
def test_every_file_is_detected_as_austin(name):
    assert detect(Input(str(DATA / name))).FORMAT == "austin"


@pytest.mark.parametrize(
    ("name", "types"),
    [
        ("austin3_wall.austin", ["wall-time"]),
        ("austin37_cpu.austin.gz", ["cpu-time"]),
        ("austin37_memory.austin.gz", ["alloc-bytes", "dealloc-bytes"]),
        ("austin37_full.austin.gz", ["wall-time", "cpu-time", "alloc-bytes", "dealloc-bytes"]),
    ],
)
def test_the_mode_names_the_metrics(name, types):
    p = load(str(DATA / name))
    assert [t.name for t in p.sample_types] == types


@pytest.mark.parametrize(
    "name", ["austin3_wall.austin", "austin4_wall.austin.gz", "austin37_cpu.austin.gz"]
)
def test_time_totals_are_the_files_microseconds_in_ns(name):
    expected = sum(int(m) for _, m in sample_lines(name))
    metric = "cpu-time" if "cpu" in name else "wall-time"
    assert total(name, metric) == expected * 1000


def test_full_mode_splits_time_idle_and_memory():
    rows = [tuple(int(x) for x in m.split(",")) for _, m in sample_lines("austin37_full.austin.gz")]
    name = "austin37_full.austin.gz"
    assert any(idle for _, idle, _ in rows)  # the sleeping thread
    assert total(name, "wall-time") == sum(t for t, _, _ in rows) * 1000
    assert total(name, "cpu-time") == sum(t for t, i, _ in rows if not i) * 1000
    assert total(name, "alloc-bytes") == sum(m for _, _, m in rows if m > 0)
    assert total(name, "dealloc-bytes") == -sum(m for _, _, m in rows if m < 0)
    # austin-python 2.4.0's AustinStats on this file (see PROVENANCE.md)
    assert total(name, "cpu-time") == 442_268_000
    assert total(name, "alloc-bytes") == 376_430_592


def test_memory_mode_counts_allocated_and_released_bytes():
    signed = [int(m) for _, m in sample_lines("austin37_memory.austin.gz")]
    assert min(signed) < 0 < max(signed)
    assert total("austin37_memory.austin.gz", "alloc-bytes") == sum(v for v in signed if v > 0)
    assert total("austin37_memory.austin.gz", "dealloc-bytes") == -sum(v for v in signed if v < 0)


def test_metadata_never_becomes_frames_and_is_kept():
    p = load(str(DATA / "austin4_wall.austin.gz"))
    names = [p.strings.strings[n] for n in p.frames.name]
    assert not [n for n in names if n.startswith("#") or "austin:" in n]
    assert p.meta["austin_metadata"]["austin"] == "4.0.0"
    assert p.meta["austin_metadata"]["python"] == "3.13.1"
    assert p.meta["info:sampling interval"] == "1000 us"
    # the sample after the footer counts too
    assert total("austin4_wall.austin.gz", "wall-time") % 1000 == 0


def leaf_names(p) -> set[str]:
    return {p.stack_names(int(s))[-1] for s in p.sample_stack if s >= 0}


def test_austin3_frames_are_python_functions_with_file_and_line():
    p = load(str(DATA / "austin3_wall.austin"))
    frames = [p.frames.get(i) for i in range(len(p.frames))]
    busy = [f for f in frames if f.name.startswith("keep_cpu_busy")]
    assert busy and all(f.kind == FrameKind.PYTHON for f in busy)
    lines = set(re.findall(r"target34\.py:keep_cpu_busy:(\d+)", text("austin3_wall.austin")))
    assert {f.line for f in busy} == {int(n) for n in lines}
    assert all(f.file.endswith("target34.py") for f in busy)
    assert "keep_cpu_busy (/home/gabriele/Projects/austin/test/target34.py:32)" in leaf_names(p)


def test_austin4_qualified_names_read_as_class_and_method():
    p = load(str(DATA / "austin4_wall.austin.gz"))
    names = {p.strings.strings[n] for n in p.frames.name}
    assert any(n.startswith("Thread > _bootstrap (") for n in names)
    labels = {p.labels_of(i)["tid"] for i in range(len(p))}
    assert labels == {"6148403200", "8306874560"}  # T0:<tid>: interpreter 0 dropped


@pytest.mark.parametrize("name", ["austin2_wall.austin", "austin1_wall.austin"])
def test_older_layouts_give_the_same_kind_of_frames(name):
    p = load(str(DATA / name))
    names = {p.strings.strings[n] for n in p.frames.name}
    assert any(re.fullmatch(r"keep_cpu_busy \(.*target34\.py:\d+\)", n) for n in names)
    assert not [n for n in names if ");L" in n or n.startswith(("P", "T", "Thread"))]


def test_austin1_skips_bad_samples():
    p = load(str(DATA / "austin1_wall.austin"))
    assert p.meta["ignored_lines"] == 1  # "Bad sample 100"


def test_processes_and_threads_are_labels_for_group_by():
    p = load(str(DATA / "austin3_multiprocess.austin.gz"))
    pids = {p.labels_of(i)["pid"] for i in range(len(p))}
    assert pids == {
        head.split(";")[0][1:] for head, _ in sample_lines("austin3_multiprocess.austin.gz")
    }
    assert len(pids) > 1


def test_samples_without_frames_keep_their_time():
    p = load(str(DATA / "austin3_wall.austin"))
    col = p.type_index("wall-time")
    empty = sum(int(m) for h, m in sample_lines("austin3_wall.austin") if h.count(";") == 1)
    assert empty > 0
    idle = [
        i for i in range(len(p)) if p.stack_names(int(p.sample_stack[i])) == ["[no Python frames]"]
    ]
    assert np.sum(p.values[idle, col]) == empty * 1000


def test_a_file_without_header_is_still_austin():
    p = load(str(DATA / "no_header.austin"))
    assert [t.name for t in p.sample_types] == ["wall-time"]
    assert "wrapper:4)" not in {p.strings.strings[n] for n in p.frames.name}


def test_flamegraph_of_austin_from_the_command_line(tmp_path):
    out = tmp_path / "a.html"
    r = subprocess.run(
        [sys.executable, "-m", "aiflame", "flamegraph", str(DATA / "austin37_full.austin.gz"),
         "-o", str(out), "-m", "cpu-time", "--group-by", "tid"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert out.stat().st_size > 10_000
