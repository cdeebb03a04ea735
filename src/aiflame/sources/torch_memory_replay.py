"""Replay of a PyTorch allocator trace: allocations, their lifetimes, memory over time, peak.

The semantics are those of PyTorch's Active Memory Timeline (``MemoryViz.js``,
``process_alloc_data``), so that the peak and what is live at it agree with PyTorch's viewer:

* memory is counted in requested bytes (the trace's ``size``; a block's ``requested_size``);
* an ``alloc`` makes an allocation live; ``free_completed`` (or the legacy ``free``) ends it;
  ``free_requested`` changes nothing (the block stays held until the free completes);
* a free whose ``alloc`` is not in the trace (the trace is a ring buffer, or recording started
  late) is an allocation that existed before the trace began;
* blocks still allocated when the snapshot was taken, whose ``alloc`` is not in the trace,
  were live during the whole trace;
* the peak is the first moment the live total reaches its maximum.

Reserved memory (``segment_alloc``/``segment_map`` minus ``segment_free``/``segment_unmap``)
is replayed backwards from the segments the snapshot holds at its end.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# Where an allocation's stack comes from.
FROM_TRACE = 0  # its alloc event is in the trace
FREED_BEFORE_ALLOC_SEEN = 1  # only its free is in the trace
LIVE_BEFORE_TRACE = 2  # a block live at the snapshot, allocated before the trace

ALLOC = "alloc"
FREES = ("free_completed", "free")
SEGMENT_GROW = ("segment_alloc", "segment_map")
SEGMENT_SHRINK = ("segment_free", "segment_unmap")


@dataclass
class Replay:
    """Allocations as columns, and memory over the trace's events (one point per event).

    ``alloc_point``/``free_point`` index the timeline; -1 means before the trace began
    (alloc) or still live at the snapshot (free).
    """

    frames: list[Sequence[dict[str, Any]]] = field(default_factory=list)
    origin: array = field(default_factory=lambda: array("b"))
    size: array = field(default_factory=lambda: array("q"))
    stream: array = field(default_factory=lambda: array("q"))
    addr: array = field(default_factory=lambda: array("q"))
    alloc_point: array = field(default_factory=lambda: array("q"))
    free_point: array = field(default_factory=lambda: array("q"))
    time_us: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    live: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # absolute bytes
    reserved: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    peak_point: int = -1  # -1: no event, the peak is the state at the snapshot
    peak_bytes: int = 0
    live_at_end: dict[int, int] = field(default_factory=dict)  # addr -> allocation index
    segment_frames: dict[int, Sequence[dict[str, Any]]] = field(default_factory=dict)
    ooms: list[dict[str, int]] = field(default_factory=list)
    has_time: bool = True

    def __len__(self) -> int:
        return len(self.size)

    def live_at_peak(self) -> np.ndarray:
        """Boolean mask of the allocations live at the peak."""
        a = np.frombuffer(self.alloc_point, dtype=np.int64)
        f = np.frombuffer(self.free_point, dtype=np.int64)
        p = self.peak_point
        if p < 0:
            return f < 0
        return (a <= p) & ((f < 0) | (f > p))

    def _add(self, frames, origin: int, size: int, stream: int, addr: int, a: int, f: int) -> int:  # type: ignore[no-untyped-def]
        self.frames.append(frames)
        self.origin.append(origin)
        self.size.append(size)
        self.stream.append(stream)
        self.addr.append(addr)
        self.alloc_point.append(a)
        self.free_point.append(f)
        return len(self.size) - 1


def replay(
    trace: Sequence[dict[str, Any]],
    segments: Sequence[dict[str, Any]],
) -> Replay:
    """Replay one device's ``trace`` against the ``segments`` of that device at the snapshot."""
    r = Replay()
    live: dict[int, int] = {}
    times, delta, res_delta = array("q"), array("q"), array("q")
    cur = res = 0
    size_of = r.size
    empty: list[dict[str, Any]] = []
    for i, e in enumerate(trace):
        action = e["action"]
        if action == ALLOC:
            addr, size = int(e["addr"]), int(e["size"])
            point = len(times)
            live[addr] = r._add(
                e.get("frames") or empty, FROM_TRACE, size, int(e.get("stream", 0)), addr, point, -1
            )
            cur += size
        elif action in FREES:
            addr = int(e["addr"])
            k = live.pop(addr, None)
            point = len(times)
            if k is None:
                size = int(e["size"])
                r._add(
                    e.get("frames") or empty,
                    FREED_BEFORE_ALLOC_SEEN,
                    size,
                    int(e.get("stream", 0)),
                    addr,
                    -1,
                    point,
                )
            else:
                size = size_of[k]
                r.free_point[k] = point
            cur -= size
        elif action in SEGMENT_GROW:
            res += int(e["size"])
            r.segment_frames[int(e["addr"])] = e.get("frames") or empty
        elif action in SEGMENT_SHRINK:
            res -= int(e["size"])
        elif action == "oom":
            r.ooms.append(
                {
                    "time_us": int(e.get("time_us", 0) or 0),
                    "size": int(e.get("size", 0)),
                    "device_free": int(e.get("device_free", 0) or 0),
                }
            )
            continue
        else:  # free_requested, snapshot, ...: nothing changes
            continue
        t = e.get("time_us")
        if t is None:
            r.has_time = False
            t = i
        times.append(int(t))
        delta.append(cur)
        res_delta.append(res)
    r.live_at_end = live
    _add_blocks_live_before_trace(r, segments, live)
    origin = np.frombuffer(r.origin, dtype=np.int8)
    before = int(np.frombuffer(r.size, dtype=np.int64)[origin != FROM_TRACE].sum())
    reserved_end = sum(int(s.get("total_size", 0)) for s in segments)
    r.time_us = np.frombuffer(times, dtype=np.int64).copy()
    r.live = np.frombuffer(delta, dtype=np.int64) + before
    r.reserved = np.frombuffer(res_delta, dtype=np.int64) + (reserved_end - res)
    if len(r.live):
        r.peak_point = int(np.argmax(r.live))  # argmax returns the first maximum
        r.peak_bytes = int(r.live[r.peak_point])
    else:
        r.peak_bytes = before
    return r


def _add_blocks_live_before_trace(
    r: Replay, segments: Sequence[dict[str, Any]], live: dict[int, int]
) -> None:
    for seg in segments:
        for addr, b in iter_blocks(seg):
            if b.get("state") == "active_allocated" and addr not in live:
                frames, requested = block_frames_and_size(b)
                r._add(
                    frames, LIVE_BEFORE_TRACE, requested, int(seg.get("stream", 0)), addr, -1, -1
                )


def iter_blocks(seg: dict[str, Any]):  # type: ignore[no-untyped-def]
    """(address, block) of a segment's blocks; old snapshots give no block address."""
    addr = int(seg.get("address", 0))
    for b in seg.get("blocks", ()):
        yield int(b.get("address", addr)), b
        addr = int(b.get("address", addr)) + int(b["size"])


def block_frames_and_size(b: dict[str, Any]) -> tuple[Sequence[dict[str, Any]], int]:
    """A block's allocation stack and requested size, in the current and the legacy format."""
    if "frames" in b:
        return b["frames"] or [], int(b.get("requested_size", b["size"]))
    history = b.get("history") or []
    if history:  # PyTorch 2.0: the first history entry is the live allocation
        return history[0].get("frames") or [], int(
            b.get("requested_size") or history[0].get("real_size", b["size"])
        )
    return [], int(b.get("requested_size") or b["size"])


def decimate(n: int, series: np.ndarray, peak: int, max_points: int) -> np.ndarray:
    """Indices of at most about ``max_points`` points of a series that keep its shape.

    Each of ``max_points // 2`` buckets keeps its lowest and highest point (in time order),
    so no spike is lost; the first, the last and the peak points are always kept.
    """
    if n <= max_points:
        return np.arange(n)
    buckets = max(1, max_points // 2)
    edges = np.linspace(0, n, buckets + 1).astype(np.int64)
    starts = edges[:-1]
    lo = np.minimum.reduceat(series, starts)
    hi = np.maximum.reduceat(series, starts)
    keep = [0, n - 1]
    if peak >= 0:
        keep.append(peak)
    for b in range(buckets):
        s, e = int(edges[b]), int(edges[b + 1])
        if s >= e:
            continue
        seg = series[s:e]
        keep.append(s + int(np.argmax(seg == lo[b])))
        keep.append(s + int(np.argmax(seg == hi[b])))
    return np.unique(np.asarray(keep, dtype=np.int64))
