"""Nesting of CPU slices, CPU->GPU links, flow ids, self and busy times (pure functions)."""

from __future__ import annotations

import numpy as np

from aiflame.transforms.correlate import busy_time, flow_ids, link, nest, self_times


def a(*values: int) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


def test_nest_by_containment_per_thread() -> None:
    #   0: [0, 100)  thread 0
    #   1:   [10, 50)      2: [50, 90)  (starts where 1 ends: a sibling)
    #   3:     [20, 30)
    #   4: [0, 100) thread 1 (same times, other thread: no relation)
    n = nest(a(0, 0, 0, 0, 1), a(0, 10, 50, 20, 0), a(100, 40, 40, 10, 100))
    assert n.parent.tolist() == [-1, 0, 0, 1, -1]
    assert n.bleeding == 0
    pos = {int(i): k for k, i in enumerate(n.order)}
    assert all(pos[p] < pos[c] for c, p in enumerate(n.parent.tolist()) if p >= 0)


def test_equal_starts_longest_first_then_rank() -> None:
    # Same start: the longer encloses; same start and length: lower rank encloses.
    n = nest(a(0, 0, 0), a(5, 5, 5), a(10, 10, 3), rank=a(2, 0, 3))
    assert n.parent.tolist() == [1, -1, 0]


def test_a_slice_outliving_its_enclosing_one_cuts_it_where_it_starts() -> None:
    # PyTorch's ProfilerStep#N: an annotation (2) that starts inside
    # _record_function_enter_new (1, under the loop 0) and encloses the step after it (3).
    us = 1000
    ts, dur = a(0, 100 * us, 200 * us, 300 * us), a(10_000 * us, 107 * us, 4_000 * us, 1_000 * us)
    n = nest(a(0, 0, 0, 0), ts, dur)
    assert n.parent.tolist() == [-1, 0, 0, 2]
    assert n.dur.tolist() == [10_000 * us, 100 * us, 4_000 * us, 1_000 * us]  # 1 ends at 2
    assert n.bleeding == 1  # 7 us moved
    self_ns = self_times(ts, n.dur, n.parent)
    assert self_ns.tolist() == [5_900 * us, 100 * us, 3_000 * us, 1_000 * us]
    assert self_ns.sum() == 10_000 * us  # the loop's span: nothing counted twice


def test_the_overlap_goes_where_it_moves_less_time() -> None:
    # 1 starts 900 ns into 0 (which ends 100 ns later) and ends 500 ns after it: 0 is cut
    # at 1's start and 1 becomes its sibling under 2.
    n = nest(a(0, 0, 0), a(100, 1000, 0), a(1000, 600, 5000))
    assert n.parent.tolist() == [2, 2, -1]
    assert n.dur.tolist() == [900, 600, 5000]
    assert n.bleeding == 0  # a 100 ns overlap: clock skew, not worth a warning
    # 2 overruns 1 by 2 us but starts 3 us before its end: a child, cut at 1's end; its
    # last 2 us go to the loop (0) around them.
    n = nest(a(0, 0, 0, 0), a(0, 0, 5000, 6000), a(20_000, 8000, 5000, 10))
    assert n.parent.tolist() == [-1, 0, 1, 2]
    assert n.dur.tolist() == [20_000, 8000, 3000, 10]
    assert n.bleeding == 1
    # Without a slice around them those 2 us would be lost: 1 is cut instead.
    n = nest(a(0, 0, 0), a(0, 5000, 6000), a(8000, 5000, 10))
    assert n.parent.tolist() == [-1, -1, 1]
    assert n.dur.tolist() == [5000, 5000, 10]


def _union(intervals: list[tuple[int, int]]) -> int:
    total, end = 0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total, end = total + e - s, e
        elif e > end:
            total, end = total + e - end, e
    return total


def test_self_times_never_exceed_the_time_in_slices() -> None:
    rng = np.random.default_rng(3)
    ts = rng.integers(0, 100_000, 3000)
    dur = rng.integers(0, 20_000, 3000)  # heavy, arbitrary overlap
    thread = rng.integers(0, 4, 3000)
    n = nest(thread, ts, dur)
    self_ns = self_times(ts, n.dur, n.parent)
    for t in range(4):
        mine = np.nonzero(thread == t)[0]
        union = _union([(int(ts[i]), int(ts[i] + dur[i])) for i in mine])
        assert 0.9 * union <= self_ns[mine].sum() <= union
    # Resolved slices nest properly: each lies inside its parent.
    has = np.nonzero(n.parent >= 0)[0]
    p = n.parent[has]
    assert np.all(ts[p] <= ts[has]) and np.all(ts[has] + n.dur[has] <= ts[p] + n.dur[p])


def test_link_fans_out_and_reports_duplicates() -> None:
    cpu_corr, cpu_ts = a(7, 8, 8, -1), a(0, 20, 10, 5)
    gpu_corr = a(7, 7, 7, 8, 9, -1)  # a graph launch: three kernels share id 7
    links = link(gpu_corr, cpu_corr, cpu_ts)
    assert links.launch.tolist() == [0, 0, 0, 2, -1, -1]  # the earliest slice with id 8
    assert links.duplicates == 1


def test_flow_ids_match_thread_and_start() -> None:
    out = flow_ids(a(3, 3, 4), a(100, 200, 100), a(3, 4), a(100, 100), a(11, 12))
    assert out.tolist() == [11, -1, 12]


def test_self_times_clip_children_to_the_parent() -> None:
    parent = nest(a(0, 0, 0), a(0, 10, 60), a(100, 30, 20)).parent
    assert self_times(a(0, 10, 60), a(100, 30, 20), parent).tolist() == [50, 30, 20]
    # A child overrunning its parent only takes what lies inside the parent.
    assert self_times(a(0, 80), a(100, 50), a(-1, 0)).tolist() == [80, 50]


def test_busy_time_is_the_union() -> None:
    assert busy_time(a(0, 5, 20, 21), a(10, 10, 2, 1)) == 15 + 2
    assert busy_time(a(), a()) == 0


def test_nest_across_chunk_boundaries(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(7)
    ts = np.sort(rng.integers(0, 10_000, 400))
    dur = rng.integers(0, 300, 400)
    thread = rng.integers(0, 3, 400)
    whole = nest(thread, ts, dur)
    monkeypatch.setattr("aiflame.transforms.correlate.CHUNK", 7)
    pieces = nest(thread, ts, dur)
    assert np.array_equal(whole.parent, pieces.parent) and whole.bleeding == pieces.bleeding
    assert np.array_equal(whole.dur, pieces.dur)
    # Every parent encloses the start of its child on the same thread.
    has = whole.parent >= 0
    p = whole.parent[has]
    assert np.all(thread[p] == thread[has])
    assert np.all((ts[p] <= ts[has]) & (ts[has] < ts[p] + dur[p]))
