"""--group-by: a label's values become the root frames; values are unchanged."""

from __future__ import annotations

import numpy as np

from aiflame.model import FrameKind, ProfileBuilder, SampleType
from aiflame.render.folded import render_folded
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
