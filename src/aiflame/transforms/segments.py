"""Which slice runs on each thread at each instant, and what ran during given windows.

The slices of a thread nest (:func:`~aiflame.transforms.correlate.nest`); at any instant the
innermost open one is what the thread was doing. :func:`innermost_segments` cuts each
thread's time into segments with one innermost slice each (-1 where no slice is open), and
:func:`window_overlaps` lists, for time windows on given threads (the GPU's idle gaps on
the launching thread), every segment overlapping them with the overlap's length: an exact,
time-weighted account of what the CPU did in each window.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Segments:
    """Disjoint segments sorted by (thread, start): ``slice`` is the innermost slice open
    during ``[start, end)`` on ``thread``, -1 where none is."""

    thread: np.ndarray
    start: np.ndarray
    end: np.ndarray
    slice: np.ndarray


def _clipped_ends(ts: np.ndarray, dur: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Ends with every child clipped to its parent's (clipped) end, so slices nest strictly."""
    end = ts + dur
    has = np.nonzero(parent >= 0)[0]
    while has.size:
        clip = np.minimum(end[has], end[parent[has]])
        changed = clip < end[has]
        if not np.any(changed):
            break
        end[has[changed]] = clip[changed]
    return end


def depths(parent: np.ndarray) -> np.ndarray:
    """Number of enclosing slices of each slice (pointer jumping: log(depth) passes)."""
    depth = (parent >= 0).astype(np.int64)
    up = parent.copy()
    while True:
        has = np.nonzero(up >= 0)[0]
        if has.size == 0:
            return depth
        depth[has] += depth[up[has]]
        up[has] = up[up[has]]


def innermost_segments(
    thread: np.ndarray,
    ts: np.ndarray,
    dur: np.ndarray,
    parent: np.ndarray,
    depth: np.ndarray | None = None,
) -> Segments:
    """The innermost-slice segments of every thread (``parent``: a nesting's).

    ``depth``: :func:`depths` of ``parent``, when known. A slice's start makes it the
    innermost; its end gives the thread back to its parent.
    At equal times ends come first (inner before outer), then starts (outer before inner).
    """
    end = _clipped_ends(ts, dur, parent)
    keep = np.nonzero(end > ts)[0]  # zero-length slices hold no time
    if keep.size == 0:
        z = np.zeros(0, dtype=np.int64)
        return Segments(z, z, z, z)
    depth = (depths(parent) if depth is None else depth)[keep]
    ev_thread = np.concatenate([thread[keep], thread[keep]])
    ev_time = np.concatenate([ts[keep], end[keep]])
    ev_kind = np.concatenate([np.ones(keep.size, np.int8), np.zeros(keep.size, np.int8)])
    ev_tie = np.concatenate([depth, -depth])
    ev_target = np.concatenate([keep, parent[keep]])
    o = np.lexsort((ev_tie, ev_kind, ev_time, ev_thread))
    th, tm, tg = ev_thread[o], ev_time[o], ev_target[o]
    same = th[1:] == th[:-1]  # a segment runs to the next event of the same thread
    seg_start, seg_end, seg_slice, seg_thread = tm[:-1], tm[1:], tg[:-1], th[:-1]
    ok = same & (seg_end > seg_start)
    return Segments(seg_thread[ok], seg_start[ok], seg_end[ok], seg_slice[ok])


def window_overlaps(
    seg: Segments, thread: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For windows ``[lo, hi)`` on ``thread``: (window, segment index, overlap ns) of every
    segment of that thread overlapping the window. Time in a window covered by no segment
    is time no slice was open (the thread idle, or code the trace does not show)."""
    win_parts, seg_parts = [], []
    for th in np.unique(thread).tolist():
        b0, b1 = np.searchsorted(seg.thread, [th, th + 1])
        if b0 == b1:
            continue
        q = np.nonzero(thread == th)[0]
        first = b0 + np.searchsorted(seg.end[b0:b1], lo[q], side="right")
        last = b0 + np.searchsorted(seg.start[b0:b1], hi[q], side="left")
        n = np.maximum(last - first, 0)
        if not n.sum():
            continue
        win = np.repeat(q, n)
        offs = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
        win_parts.append(win)
        seg_parts.append(np.repeat(first, n) + offs)
    if not win_parts:
        z = np.zeros(0, dtype=np.int64)
        return z, z, z
    win = np.concatenate(win_parts)
    s = np.concatenate(seg_parts)
    overlap = np.minimum(seg.end[s], hi[win]) - np.maximum(seg.start[s], lo[win])
    ok = overlap > 0
    return win[ok], s[ok], overlap[ok]
