"""Correlate CPU-side slices with each other and with the GPU activity they launched.

Pure functions over columns (numpy arrays), independent of any trace format:

- :func:`nest`: the call tree of the slices of each thread, by time containment.
- :func:`enclosing`: the innermost slice of a thread running at given instants.
- :func:`link`: for each GPU activity, the launching slice with the same correlation id.
- :func:`flow_ids`: correlation ids recovered from flow arrows where an event lacks one.
- :func:`self_times`, :func:`busy_time`: CPU self time, and the union of GPU intervals.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Overlaps that move less time than this are clock artefacts (timestamps read a few
# hundred ns apart), not worth a warning. The same tolerance as AMD TraceLens.
BLEED_TOLERANCE_NS = 1000
CHUNK = 1 << 18  # slices converted to Python lists at a time
OVERLAP_WARNING = "slices that overlap their enclosing slice partially (the overlap counted once)"


@dataclass
class Nesting:
    """``parent[i]``: index of the slice enclosing slice ``i`` (-1 at the top).

    ``order`` lists every slice with parents before children (by thread, then start).
    ``dur`` is each slice's duration once partial overlaps are resolved (see :func:`nest`):
    within a thread the slices ``[ts, ts + dur)`` nest properly, so their self times add
    up to the time the thread spent in slices, never more. ``bleeding`` counts the
    overlaps that moved at least ``tolerance`` ns.
    """

    order: np.ndarray
    parent: np.ndarray
    dur: np.ndarray
    bleeding: int


def nest(
    thread: np.ndarray,
    ts: np.ndarray,
    dur: np.ndarray,
    rank: np.ndarray | None = None,
    tolerance: int = BLEED_TOLERANCE_NS,
) -> Nesting:
    """Nest the slices of each thread by time containment.

    Slices starting together are ordered longest first, then by ``rank`` (lower encloses
    higher: e.g. Python function < operator < runtime call), so the outer one becomes the
    parent. A slice ends at ``ts + dur``; one that starts exactly where another ends is
    its sibling, not its child.

    A slice that starts inside another and outlives it overlaps it partially; counting
    both in full would count the overlap twice. Either the enclosing slice is cut where the
    new one starts (the new one becomes its sibling: PyTorch's ``ProfilerStep#N`` starts
    inside ``_record_function_enter_new`` and encloses the whole step that follows), or
    the new one is cut where the enclosing one ends (a child that overran its parent), when
    that moves less time and the slices around them cover the rest of it, so that no time
    in slices is lost.
    """
    n = int(ts.shape[0])
    parent = np.full(n, -1, dtype=np.int64)
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return Nesting(empty, parent, empty.copy(), 0)
    # lexsort: the last key is the primary one.
    keys = [-dur, ts, thread] if rank is None else [rank, -dur, ts, thread]
    order = np.lexsort(keys)
    par = np.full(n, -1, dtype=np.int64)  # by position in `order`
    end_pos = np.empty(n, dtype=np.int64)  # resolved end, by position in `order`
    cut: dict[int, int] = {}  # position -> end, for open slices cut by a later one
    stack: list[int] = []  # positions in `order`
    ends: list[int] = []
    current = None
    bleeding = 0
    # Python ints are far faster than numpy scalars in the loop; converting a slice at a
    # time keeps the lists (and their int objects) small on traces of millions of slices.
    for lo in range(0, n, CHUNK):
        idx = order[lo : lo + CHUNK]
        th_l, ts_l = thread[idx].tolist(), ts[idx].tolist()
        end_l = (ts[idx] + dur[idx]).tolist()
        out = [-1] * len(th_l)
        for k in range(len(th_l)):
            t = th_l[k]
            if t != current:
                stack.clear()
                ends.clear()
                current = t
            s, e = ts_l[k], end_l[k]
            while ends and s >= ends[-1]:
                stack.pop()
                ends.pop()
            while ends and e > ends[-1]:
                overrun, rest = e - ends[-1], ends[-1] - s
                if max(min(overrun, rest), 0) >= tolerance:
                    bleeding += 1
                if overrun < rest and len(ends) > 1 and ends[0] >= e:
                    # A child that overran its parent: cut at the parent's end (its tail
                    # goes to the enclosing slices, which cover it).
                    e = ends[-1]
                    break
                cut[stack.pop()] = s  # the enclosing slice ends where this one starts
                ends.pop()
            end_l[k] = e
            if stack:
                out[k] = stack[-1]
            stack.append(lo + k)
            ends.append(e)
        par[lo : lo + len(out)] = out
        end_pos[lo : lo + len(out)] = end_l
    if cut:
        end_pos[list(cut)] = list(cut.values())
    has = par >= 0
    parent[order[has]] = order[par[has]]
    resolved = np.empty(n, dtype=np.int64)
    resolved[order] = end_pos - ts[order]
    return Nesting(order, parent, resolved, bleeding)


def enclosing(
    thread: np.ndarray,
    ts: np.ndarray,
    dur: np.ndarray,
    nesting: Nesting,
    at_thread: np.ndarray,
    at_ts: np.ndarray,
) -> np.ndarray:
    """For each instant (``at_thread``, ``at_ts``), the innermost slice of that thread
    running then (``ts <= t < ts + dur``), or -1: e.g. the operator that made an allocation.

    The candidate is the slice of the thread that started last at or before the instant
    (among slices starting together the innermost, as :func:`nest` orders them); while it
    has ended, its parent is tried (:func:`first_open`).
    """
    out = np.full(at_ts.shape[0], -1, dtype=np.int64)
    if ts.size == 0 or at_ts.size == 0:
        return out
    order = nesting.order
    by_thread, by_start = thread[order], ts[order]  # thread-major, then start: sorted
    for t in np.unique(at_thread).tolist():
        lo = int(np.searchsorted(by_thread, t, "left"))
        hi = int(np.searchsorted(by_thread, t, "right"))
        if lo == hi:
            continue
        mine = np.nonzero(at_thread == t)[0]
        pos = lo + np.searchsorted(by_start[lo:hi], at_ts[mine], "right") - 1
        out[mine] = np.where(pos >= lo, order[np.maximum(pos, 0)], -1)
    return first_open(nesting.parent, ts + dur, out, at_ts)


@dataclass
class Links:
    """``launch[j]``: the CPU slice that launched GPU activity ``j`` (-1: not in the trace)."""

    launch: np.ndarray
    duplicates: int  # correlation ids carried by more than one CPU slice


def link(gpu_corr: np.ndarray, cpu_corr: np.ndarray, cpu_ts: np.ndarray) -> Links:
    """Match GPU activities to CPU slices by correlation id (ids < 0 match nothing).

    Several GPU activities may share one id (a CUDA/HIP graph launch fans out into all its
    kernels): all of them get that launch. When several CPU slices carry the same id,
    the earliest one is the launch and the others are counted as duplicates.
    """
    launch = np.full(gpu_corr.shape[0], -1, dtype=np.int64)
    idx = np.nonzero(cpu_corr >= 0)[0]
    if idx.size == 0 or gpu_corr.size == 0:
        return Links(launch, 0)
    idx = idx[np.lexsort((cpu_ts[idx], cpu_corr[idx]))]
    keys = cpu_corr[idx]
    first = np.ones(keys.shape[0], dtype=bool)
    first[1:] = keys[1:] != keys[:-1]
    duplicates = int(keys.shape[0] - np.count_nonzero(first))
    keys, idx = keys[first], idx[first]
    pos = np.searchsorted(keys, gpu_corr)
    pos = np.minimum(pos, keys.shape[0] - 1)
    hit = (keys[pos] == gpu_corr) & (gpu_corr >= 0)
    launch[hit] = idx[pos[hit]]
    return Links(launch, duplicates)


def flow_ids(
    thread: np.ndarray,
    ts: np.ndarray,
    flow_thread: np.ndarray,
    flow_ts: np.ndarray,
    flow_id: np.ndarray,
) -> np.ndarray:
    """Id of the flow arrow bound to each event (same thread and start), -1 where none.

    Kineto draws an ``ac2g`` arrow from each launch to its GPU activity; its id is the
    correlation id, which recovers the link for events whose ``args`` lack one.
    """
    out = np.full(ts.shape[0], -1, dtype=np.int64)
    if flow_ts.size == 0 or ts.size == 0:
        return out
    index = {
        (int(a), int(b)): int(c) for a, b, c in zip(flow_thread, flow_ts, flow_id, strict=True)
    }
    for i, (a, b) in enumerate(zip(thread.tolist(), ts.tolist(), strict=True)):
        out[i] = index.get((a, b), -1)
    return out


def self_times(ts: np.ndarray, dur: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Duration of each slice minus the part of it covered by its children.

    Give the durations of :attr:`Nesting.dur`, which nest properly: with the raw ones a
    slice that overlaps its neighbours partially would be counted twice where they overlap.
    """
    out = dur.astype(np.int64, copy=True)
    has = np.nonzero(parent >= 0)[0]
    if has.size:
        end = ts + dur
        p = parent[has]
        covered = np.minimum(end[has], end[p])
        del end
        covered -= ts[has]
        np.maximum(covered, 0, out=covered)
        out -= np.bincount(p, weights=covered, minlength=out.shape[0]).astype(np.int64)
    return np.maximum(out, 0, out=out)


def busy_time(ts: np.ndarray, dur: np.ndarray) -> int:
    """Length of the union of the intervals ``[ts, ts + dur)``."""
    if ts.size == 0:
        return 0
    order = np.argsort(ts, kind="stable")
    start = ts[order]
    end = np.maximum.accumulate(start + dur[order])
    # A new busy period starts where an interval begins after everything before it ended.
    new = np.ones(start.shape[0], dtype=bool)
    new[1:] = start[1:] > end[:-1]
    first = np.nonzero(new)[0]
    last = np.append(first[1:] - 1, start.shape[0] - 1)
    return int((end[last] - start[first]).sum())


def nearest_enclosing(parent: np.ndarray, mask: np.ndarray, start: np.ndarray) -> np.ndarray:
    """For each slice in ``start`` (-1: none): itself if ``mask`` holds for it, else its
    nearest enclosing slice for which it does, else -1."""
    out = np.full(start.shape[0], -1, dtype=np.int64)
    if mask.size == 0 or start.size == 0:
        return out
    nearest = nearest_marked(parent, mask)
    has = start >= 0
    out[has] = nearest[start[has]]
    return out


# -- walks up a tree given as a parent column (-1: a root), in time linear in its size --------
#
# A walk from every node to the root costs the sum of the depths: quadratic when slices nest
# thousands deep. These answer for every node at once by pointer jumping (each pass doubles
# the part of the path covered: log2(depth) passes over the nodes not yet answered).


def nearest_marked(parent: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Per node: itself if ``mask`` holds for it, else its nearest ancestor for which it
    holds, else -1."""
    n = parent.shape[0]
    answer = np.where(mask, np.arange(n), -1)
    done = mask | (parent < 0)
    up = parent.copy()
    todo = np.flatnonzero(~done)
    while todo.size:
        p = up[todo]
        known = done[p]
        answer[todo[known]] = answer[p[known]]
        done[todo[known]] = True
        todo, p = todo[~known], p[~known]
        up[todo] = up[p]  # p is not done, so it has an ancestor left to look at
    return answer


def outermost_marked(parent: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Per node: the outermost of itself and its ancestors for which ``mask`` holds, or -1."""
    best = np.where(mask, np.arange(parent.shape[0]), -1)  # of the part of the path covered
    up = parent.copy()  # the first node above that part
    todo = np.flatnonzero(up >= 0)
    while todo.size:
        p = up[todo]
        above = best[p]
        best[todo] = np.where(above >= 0, above, best[todo])
        up[todo] = up[p]
        todo = todo[up[todo] >= 0]
    return best


_WALK = 32  # levels walked one numpy step each before jumping (real stacks rarely nest deeper)


def first_open(
    parent: np.ndarray, end: np.ndarray, start: np.ndarray, at: np.ndarray
) -> np.ndarray:
    """For each query ``k``: the first of ``start[k]`` and its ancestors, going up, whose
    ``end`` is after ``at[k]``; -1 where none is (or ``start[k]`` is -1).

    Up to _WALK levels are walked one step at a time; queries still open then go up by
    binary lifting (jumps of 2^k ancestors, with the latest end within each jump), so
    that instants deep in slices nested thousands deep do not cost a step per level.
    """
    out = np.full(start.shape[0], -1, dtype=np.int64)
    cur = start.copy()
    idx = np.flatnonzero(cur >= 0)
    for _ in range(_WALK):
        if idx.size == 0:
            return out
        c = cur[idx]
        running = end[c] > at[idx]
        out[idx[running]] = c[running]
        idx = idx[~running]
        cur[idx] = parent[cur[idx]]
        idx = idx[cur[idx] >= 0]
    if idx.size:
        out[idx] = _first_open_lifted(parent, end, cur[idx], at[idx])
    return out


def _first_open_lifted(
    parent: np.ndarray, end: np.ndarray, cur: np.ndarray, at: np.ndarray
) -> np.ndarray:
    # Level k: up[k][v] is v's 2^k-th ancestor (-1 past the root); latest[k][v] the latest
    # end of v and the 2^k - 1 nodes above it.
    up, latest = [parent], [end]
    while np.any(up[-1] >= 0):
        a, m = up[-1], latest[-1]
        safe = np.maximum(a, 0)
        up.append(np.where(a >= 0, a[safe], -1))
        latest.append(np.where(a >= 0, np.maximum(m, m[safe]), m))
    c = cur.copy()
    for k in range(len(up) - 1, -1, -1):
        live = np.flatnonzero(c >= 0)
        ended = latest[k][c[live]] <= at[live]  # every node of the jump has ended: skip them
        c[live[ended]] = up[k][c[live[ended]]]
    has = c >= 0
    return np.where(has & (end[np.maximum(c, 0)] > at), c, -1)
