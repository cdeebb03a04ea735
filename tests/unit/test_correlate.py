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


def test_small_overrun_is_a_sibling_large_one_a_leaf() -> None:
    # 1 ends 500 ns after 0 ends and starts inside it: sibling under 0's parent (slice 2).
    n = nest(a(0, 0, 0), a(100, 1000, 0), a(1000, 600, 5000))
    assert n.parent.tolist() == [2, 2, -1]
    # An overrun of 2 us: kept under its enclosing slice, counted, and encloses nothing.
    n = nest(a(0, 0, 0), a(0, 500, 600), a(1000, 2500, 10))
    assert n.parent.tolist() == [-1, 0, 0]
    assert n.bleeding == 1


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
    # Every parent encloses the start of its child on the same thread.
    has = whole.parent >= 0
    p = whole.parent[has]
    assert np.all(thread[p] == thread[has])
    assert np.all((ts[p] <= ts[has]) & (ts[has] < ts[p] + dur[p]))
