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

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import repeat
from operator import itemgetter
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


def _ints(dtype: type = np.int64) -> np.ndarray:
    return np.zeros(0, dtype=dtype)


@dataclass
class Replay:
    """Allocations as columns, and memory over the trace's events (one point per event that
    changes memory).

    ``alloc_point``/``free_point`` index the timeline; -1 means before the trace began
    (alloc) or still live at the snapshot (free).
    """

    frames: list[Sequence[dict[str, Any]]] = field(default_factory=list)
    origin: np.ndarray = field(default_factory=lambda: _ints(np.int8))
    size: np.ndarray = field(default_factory=_ints)
    stream: np.ndarray = field(default_factory=_ints)
    addr: np.ndarray = field(default_factory=_ints)
    alloc_point: np.ndarray = field(default_factory=_ints)
    free_point: np.ndarray = field(default_factory=_ints)
    time_us: np.ndarray = field(default_factory=_ints)
    live: np.ndarray = field(default_factory=_ints)  # absolute bytes
    reserved: np.ndarray = field(default_factory=_ints)
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
        a, f, p = self.alloc_point, self.free_point, self.peak_point
        if p < 0:
            return f < 0
        return (a <= p) & ((f < 0) | (f > p))


# Kind of each action: 1 alloc, 2 free, 3 segment grow, 4 segment shrink, 5 OOM; others 0.
ACTION_KIND = {ALLOC: 1, **dict.fromkeys(FREES, 2), **dict.fromkeys(SEGMENT_GROW, 3)}
ACTION_KIND.update(dict.fromkeys(SEGMENT_SHRINK, 4))
ACTION_KIND["oom"] = 5
OOM = 5
PAIRING_CHUNK = 1 << 16


@dataclass
class Trace:
    """One device's allocator trace as columns: one row per event that changes memory
    (kinds 1-4 of :data:`ACTION_KIND`), in trace order; the other events are only counted,
    except OOMs, kept as :func:`oom_of` gives them.

    Built from the event dicts (:meth:`from_events`) or, without them, by the streaming
    reader (:mod:`.stream`). ``stream`` and ``frames`` hold the events' raw
    values (``frames`` None when absent), converted only for the rows the replay keeps.
    """

    index: np.ndarray  # int64: the event's position in the trace
    kind: np.ndarray  # int8, 1-4
    addr: Sequence[int] | np.ndarray
    size: np.ndarray  # int64
    time_us: np.ndarray | None  # int64; None when an event has no time
    stream: Sequence[Any] | np.ndarray
    frames: Sequence[Any] | np.ndarray
    ooms: list[dict[str, int]]

    def __len__(self) -> int:
        return len(self.kind)

    @classmethod
    def from_events(cls, trace: Sequence[dict[str, Any]]) -> Trace:
        """Columns pulled out of the event dicts once (the checks and errors of reading
        each field come in the same order whatever the trace)."""
        actions = list(map(itemgetter("action"), trace))
        try:
            kinds = list(map(ACTION_KIND.get, actions, repeat(0)))
        except TypeError:  # a list or dict where the action's name belongs
            bad = next(a for a in actions if not isinstance(a, str | int | float | None))
            raise SnapshotError(
                f"an allocator event's action is {repr(bad)[:40]}, not an action's name"
            ) from None
        all_kinds = np.array(kinds, dtype=np.int8)
        ooms = [oom_of(trace[i]) for i in np.nonzero(all_kinds == OOM)[0].tolist()]
        where = np.nonzero((all_kinds >= 1) & (all_kinds <= 4))[0]
        ev = list(map(trace.__getitem__, where.tolist()))
        addrs = list(map(itemgetter("addr"), ev))
        try:
            addr = [int(a) for a in addrs]
        except (TypeError, ValueError, OverflowError):
            raise SnapshotError(_not_an_integer(addrs, "addr")) from None
        size = int_column(list(map(itemgetter("size"), ev)), "size")
        stamps = [e.get("time_us") for e in ev]
        return cls(
            index=where.astype(np.int64),
            kind=all_kinds[where],
            addr=addr,
            size=size,
            time_us=int_column(stamps, "time_us") if None not in stamps else None,
            stream=[e.get("stream", 0) for e in ev],
            frames=[e.get("frames") for e in ev],
            ooms=ooms,
        )


def _take(column: Sequence[Any] | np.ndarray, points: np.ndarray, what: str) -> np.ndarray:
    if isinstance(column, np.ndarray):
        return column[points].astype(np.int64)
    return int_column([column[p] for p in points.tolist()], what)


class SnapshotError(ValueError):
    """A field of the snapshot that is not what PyTorch writes (the message names it)."""


def int_column(values: list[Any], what: str) -> np.ndarray:
    """``values`` as int64, or a :class:`SnapshotError` naming the first that is not one."""
    try:
        return np.array(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        raise SnapshotError(_not_an_integer(values, what)) from None


def _not_an_integer(values: list[Any], what: str) -> str:
    for v in values:
        if not (isinstance(v, int) and -(2**63) <= v < 2**63):
            try:
                np.array([v], dtype=np.int64)
            except (TypeError, ValueError, OverflowError):
                return f"an allocator event's {what} is {repr(v)[:40]}, not a 64-bit integer"
    return f"an allocator event's {what} is not a 64-bit integer"


def replay(
    trace: Sequence[dict[str, Any]] | Trace,
    segments: Sequence[dict[str, Any]],
) -> Replay:
    """Replay one device's ``trace`` (event dicts, or a :class:`Trace`) against the
    ``segments`` of that device at the snapshot.

    Only the pairing of frees with allocations by address is a Python loop; the rest is
    numpy over the trace's columns.
    """
    r = Replay()
    t = trace if isinstance(trace, Trace) else Trace.from_events(trace)
    r.ooms = list(t.ooms)
    kind = t.kind
    addr = t.addr
    size = t.size
    r.has_time = t.time_us is not None
    r.time_us = t.time_us if t.time_us is not None else t.index.astype(np.int64)
    # Pair each free with the latest alloc at its address (MemoryViz's addr_to_alloc).
    n = len(kind)
    alloc_of_free = np.full(n, -1, dtype=np.int64)
    live: dict[int, int] = {}
    for start in range(0, n, PAIRING_CHUNK):  # a chunk at a time: a few Python ints alive
        stop = min(n, start + PAIRING_CHUNK)
        where = addr[start:stop]
        if isinstance(where, np.ndarray):
            where = where.tolist()
        for p, k, a in zip(range(start, stop), kind[start:stop].tolist(), where, strict=True):
            if k == 1:
                live[a] = p
            elif k == 2:
                alloc_of_free[p] = live.pop(a, -1)
    frees = np.nonzero(kind == 2)[0]
    matched = frees[alloc_of_free[frees] >= 0]
    unmatched = frees[alloc_of_free[frees] < 0]
    delta = np.where(kind == 1, size, 0)
    delta[matched] = -size[alloc_of_free[matched]]
    delta[unmatched] = -size[unmatched]
    res_delta = np.where(kind == 3, size, 0) - np.where(kind == 4, size, 0)
    for p in np.nonzero(kind == 3)[0].tolist():
        r.segment_frames[int(addr[p])] = t.frames[p] or []
    # Allocations: the trace's allocs, then frees of allocations made before the trace.
    allocs = np.nonzero(kind == 1)[0]
    free_of_alloc = np.full(n, -1, dtype=np.int64)
    free_of_alloc[alloc_of_free[matched]] = matched
    points = np.concatenate([allocs, unmatched])
    if isinstance(t.frames, np.ndarray):  # an object array: no Python int per row
        r.frames = [f or () for f in t.frames[points]]
    else:
        r.frames = [t.frames[p] or () for p in points.tolist()]
    r.origin = np.repeat(
        np.array([FROM_TRACE, FREED_BEFORE_ALLOC_SEEN], dtype=np.int8),
        [len(allocs), len(unmatched)],
    )
    r.size = size[points]
    r.stream = _take(t.stream, points, "stream")
    r.addr = np.asarray(t.addr, dtype=np.int64)[points]
    r.alloc_point = np.concatenate([allocs, np.full(len(unmatched), -1, dtype=np.int64)])
    r.free_point = np.concatenate([free_of_alloc[allocs], unmatched])
    at_end = np.fromiter(live.values(), dtype=np.int64, count=len(live))
    r.live_at_end = dict(zip(live, np.searchsorted(allocs, at_end).tolist(), strict=True))
    _add_blocks_live_before_trace(r, segments, live)
    before = int(r.size[r.origin != FROM_TRACE].sum())
    reserved_end = sum(int(s.get("total_size", 0)) for s in segments)
    r.live = np.cumsum(delta) + before
    r.reserved = np.cumsum(res_delta) + (reserved_end - int(res_delta.sum()))
    if n:
        r.peak_point = int(np.argmax(r.live))  # argmax returns the first maximum
        r.peak_bytes = int(r.live[r.peak_point])
    else:
        r.peak_bytes = before
    return r


def oom_of(e: dict[str, Any]) -> dict[str, int]:
    return {
        "time_us": int(e.get("time_us", 0) or 0),
        "size": int(e.get("size", 0)),
        "device_free": int(e.get("device_free", 0) or 0),
    }


def _add_blocks_live_before_trace(
    r: Replay, segments: Sequence[dict[str, Any]], live: dict[int, int]
) -> None:
    rows = []
    for seg in segments:
        for addr, b in iter_blocks(seg):
            if b.get("state") == "active_allocated" and addr not in live:
                frames, requested = block_frames_and_size(b)
                rows.append((frames, requested, int(seg.get("stream", 0)), addr))
    if not rows:
        return
    r.frames.extend(f for f, *_ in rows)
    more = np.array([x[1:] for x in rows], dtype=np.int64).reshape(-1, 3)
    r.origin = np.concatenate([r.origin, np.full(len(rows), LIVE_BEFORE_TRACE, dtype=np.int8)])
    r.size = np.concatenate([r.size, more[:, 0]])
    r.stream = np.concatenate([r.stream, more[:, 1]])
    r.addr = np.concatenate([r.addr, more[:, 2]])
    minus = np.full(len(rows), -1, dtype=np.int64)
    r.alloc_point = np.concatenate([r.alloc_point, minus])
    r.free_point = np.concatenate([r.free_point, minus])


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
