"""--group-by: a label's values become the root frames; values are unchanged."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from aiflame.cli.main import main
from aiflame.model import FrameKind, ProfileBuilder, SampleType
from aiflame.render.folded import render_folded
from aiflame.sources import load, load_many
from aiflame.sources.registry import distinct_names
from aiflame.transforms.group import group_by


def profile():  # type: ignore[no-untyped-def]
    b = ProfileBuilder(
        [SampleType("gpu-time", "nanoseconds"), SampleType("cpu-time", "nanoseconds")]
    )
    a, k = b.frame("aten::mm", FrameKind.CPP), b.frame("k", FrameKind.GPU_KERNEL)
    b.add(b.stack([a, k]), [5, 0], b.labels({"rank": 0, "stream": 7}), timestamp=1)
    b.add(b.stack([a, k]), [3, 0], b.labels({"rank": 1, "stream": 7}), timestamp=2)
    b.add(b.stack([a]), [0, 9], b.labels({"rank": 1}), timestamp=3)
    b.meta["default_type"] = 0
    return b.build()


def test_group_by_rank_and_stream() -> None:
    p = profile()
    by_rank = group_by(p, "rank")
    assert render_folded(by_rank) == "rank 0;aten::mm;k 5\nrank 1;aten::mm;k 3\n"
    assert render_folded(by_rank, "cpu-time") == "rank 1;aten::mm 9\n"
    assert render_folded(group_by(p, "stream"), "cpu-time") == "[no stream];aten::mm 9\n"
    roots = {by_rank.stack_frames(int(s))[0] for s in by_rank.sample_stack}
    assert {f.kind for f in roots} == {FrameKind.LABEL}
    assert np.array_equal(by_rank.values, p.values)
    assert np.array_equal(by_rank.timestamps, p.timestamps)
    assert [by_rank.labels_of(i) for i in range(3)] == [p.labels_of(i) for i in range(3)]
    assert by_rank.meta == p.meta


DATA = Path(__file__).resolve().parents[1] / "data"
RANKS = DATA / "kineto" / "hta" / "trace_filter"


def test_group_by_file_puts_each_input_at_the_root() -> None:
    files = sorted(str(p) for p in RANKS.glob("*.json.gz"))
    merged = group_by(load_many(files, label_files="file"), "file")
    col = merged.type_index(None)
    per_root: dict[str, float] = {}
    for stack, value in merged.iter_stack_values(col):
        root = merged.stack_frames(stack)[0]
        assert root.kind == FrameKind.LABEL
        per_root[root.name] = per_root.get(root.name, 0.0) + value
    assert set(per_root) == {"sampled_rank-0.json.gz", "sampled_rank-1.json.gz"}
    for path in files:  # each root holds exactly what its file holds
        alone = load(path)
        assert per_root[Path(path).name] == pytest.approx(
            alone.values[:, alone.type_index(None)].sum()
        )


def test_group_by_file_on_the_command_line(tmp_path: Path) -> None:
    before, after = DATA / "diff" / "before.txt", DATA / "diff" / "after.txt"
    out = tmp_path / "both.folded"
    assert main(["convert", str(before), str(after), "-o", str(out), "--group-by", "file"]) == 0
    lines = out.read_text().splitlines()
    assert {ln.split(";", 1)[0] for ln in lines} == {"before.txt", "after.txt"}
    plain = {ln.split(";", 1)[1] for ln in lines if ln.startswith("before.txt;")}
    assert plain == set(render_folded(load(str(before))).splitlines())


def test_files_of_the_same_name_are_told_apart_by_their_folders() -> None:
    assert distinct_names(["a/x/rank0.json", "b/x/rank0.json", "c/rank1.json", "-"]) == [
        "a/x/rank0.json",
        "b/x/rank0.json",
        "rank1.json",
        "stdin",
    ]
