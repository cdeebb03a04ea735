"""Every idle nanosecond of a GPU timeline, charged to the CPU slice responsible.

**Gaps.** A gap runs from the moment all earlier GPU activity has finished to the start of
the next activity; the gaps sum to the timeline's idle time (its span less the union of
all activity). Each gap is put in one category by the launch call of the activity that
ends it (HTA's test, on the whole GPU rather than per stream) and what the launching
thread was doing when the GPU ran dry:

- ``host_wait``: the launch call began only after the GPU ran dry: the CPU was too slow;
- ``sync_wait``: as ``host_wait``, but the thread was blocked in a synchronizing call
  (:func:`sync_calls`) when the GPU ran dry;
- ``kernel_wait``: queued before the GPU ran dry, started less than ``KERNEL_WAIT_US``
  later (the GPU's own launch latency);
- ``event_wait``: queued before, started ``KERNEL_WAIT_US`` or more later (a dependency);
- ``unlinked``: the launch of the next activity is not in the trace.

**Charges** (:func:`charge`). Of a host or sync wait, and of an event wait the time its
launch call still ran, the launching thread's time is cut into segments of its innermost
open slice (:func:`~aiflame.transforms.segments.innermost_segments`), each segment's
overlap with the gap charged to its slice; a sync wait's call first gets ``min(gap, time it
blocked before the GPU ran dry)`` (had the CPU not waited, it could have done its next work
that much earlier) and the segments share the rest. Time no slice covers is ``untraced``.
The rest of a kernel or event wait is charged to the launch call of the work that waited,
an unlinked gap to nothing. The parts of a gap sum to the gap, so the charges sum to the
idle time exactly: the analysis' causes (``aiflame.analysis.causes``) and the ``gpu-idle``
flame graph of the trace sources are two views of the same charges.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from aiflame.model.trace import Kind, TraceData
from aiflame.transforms.segments import Segments, depths, innermost_segments, window_overlaps

KERNEL_WAIT_US = 30.0  # HTA's consecutive_kernel_delay, as it acts on microsecond traces
CATEGORIES = ("host_wait", "sync_wait", "kernel_wait", "event_wait", "unlinked")
HOST, SYNC, KERNEL, EVENT, UNLINKED = range(5)
# What a part of a gap is charged as (Charges.part).
PARTS = ("sync", "host", "untraced", "launch_latency", "dependency", "unlinked")
P_SYNC, P_HOST, P_UNTRACED, P_LATENCY, P_DEPENDENCY, P_UNLINKED = range(6)

# Runtime/driver calls that return only when the GPU has done the work they wait for.
# cudaMemcpy (no Async) and its driver/HIP kin are synchronous with respect to the host.
_SYNC_CALL = re.compile(
    r"^(cuda|hip)(DeviceSynchronize|StreamSynchronize|EventSynchronize|ThreadSynchronize"
    r"|Memcpy|Memcpy2D|Memcpy3D|MemcpyDtoH|MemcpyHtoD|MemcpyWithStream"
    r"|MemcpyFromSymbol|MemcpyToSymbol)$"
    r"|^cu(CtxSynchronize|StreamSynchronize|EventSynchronize|Memcpy|MemcpyDtoH(_v2)?"
    r"|MemcpyHtoD(_v2)?)$"
    r"|^synchronize(Stream)?$"  # MTIA
)
# A copy from the device into pageable host memory: the driver copies through a pinned
# buffer and returns only when the copy is done, whatever the call (cudaMemcpyAsync too).
_TO_PAGEABLE = re.compile(r"Memcpy\s+DtoH\s*\(\s*\w+\s*->\s*Pageable\s*\)")


def is_sync_call(name: str) -> bool:
    return _SYNC_CALL.match(name) is not None


def name_mask(
    t: TraceData, pred: Callable[[str], object], used: np.ndarray | None = None
) -> np.ndarray:
    """Per name index: ``pred(name)``; with ``used`` (name ids), asked of those names only
    (the others are False)."""
    if used is None:
        return np.fromiter((bool(pred(n)) for n in t.names), dtype=bool, count=len(t.names))
    out = np.zeros(len(t.names), dtype=bool)
    ids = np.unique(used)
    names = t.names
    out[ids] = np.fromiter((bool(pred(names[i])) for i in ids.tolist()), bool, ids.size)
    return out


def blocking_copy_calls(t: TraceData) -> np.ndarray:
    """Launch calls of copies that block the host whatever their name: downloads into
    pageable memory (``cudaMemcpyAsync`` of ``.tolist()``, ``.cpu()``: it returns when the
    copy, and all the work queued before it, is done)."""
    if t.cpu_ts.size == 0 or t.gpu_ts.size == 0:
        return np.zeros(0, dtype=np.int64)
    copies = t.gpu_kind == Kind.MEMCPY
    pageable = copies & name_mask(t, _TO_PAGEABLE.search, t.gpu_name[copies])[t.gpu_name]
    launch = t.gpu_launch[pageable]
    return np.unique(launch[launch >= 0])


def sync_calls(t: TraceData) -> np.ndarray:
    """Ids of the runtime calls that block the host on the GPU (on this trace's timeline:
    not those of an attached capture): synchronizing calls by name, and the launch calls
    of downloads into pageable memory."""
    if t.cpu_is_runtime is None or t.cpu_ts.size == 0:
        return np.zeros(0, dtype=np.int64)
    runtime = t.cpu_name[t.cpu_is_runtime]
    calls = np.nonzero(t.cpu_is_runtime & name_mask(t, is_sync_call, runtime)[t.cpu_name])[0]
    calls = np.union1d(calls, blocking_copy_calls(t))
    return calls[calls < t.own_slices()]


def slice_depths(t: TraceData) -> np.ndarray:
    """Enclosing slices of each CPU slice (computed once per trace)."""
    found = t.__dict__.get("_depths")
    if found is None:
        found = t.__dict__["_depths"] = depths(t.cpu_parent)
    return found


# -- gaps ---------------------------------------------------------------------------------


@dataclass
class Gaps:
    """Per gap of the GPU timeline (start order): where it starts, its length (ns), its
    category (index into CATEGORIES), the activity ending it, the CPU thread that launched
    that activity, and the synchronizing call the thread was in when the GPU ran dry."""

    start: np.ndarray
    length: np.ndarray
    category: np.ndarray
    next: np.ndarray
    thread: np.ndarray
    sync_call: np.ndarray  # -1 unless sync_wait

    @property
    def end(self) -> np.ndarray:
        return self.start + self.length


def _raw_gaps(t: TraceData) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(gap start, gap end, the activity that ends the gap) of the whole GPU timeline."""
    if t.gpu_ts.size < 2:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    order = np.argsort(t.gpu_ts, kind="stable")
    start = t.gpu_ts[order]
    end = np.maximum.accumulate(start + t.gpu_dur[order])
    at = np.nonzero(start[1:] > end[:-1])[0] + 1
    return end[at - 1], start[at], order[at]


def _in_sync(t: TraceData, thread: np.ndarray, when: np.ndarray) -> np.ndarray:
    """Per (thread, time): the synchronizing call on that thread spanning the time, or -1."""
    out = np.full(when.shape[0], -1, dtype=np.int64)
    calls = sync_calls(t)
    if calls.size == 0:
        return out
    threads = t.threads()
    for th in np.unique(thread).tolist():
        mine = calls[threads[calls] == th]
        if mine.size == 0:
            continue
        mine = mine[np.argsort(t.cpu_ts[mine], kind="stable")]
        q = np.nonzero(thread == th)[0]
        k = np.searchsorted(t.cpu_ts[mine], when[q], side="right") - 1
        c = mine[np.maximum(k, 0)]
        hit = (k >= 0) & (t.cpu_ts[c] + t.cpu_dur[c] >= when[q])
        out[q[hit]] = c[hit]
    return out


def gap_table(t: TraceData, kernel_wait_us: float = KERNEL_WAIT_US) -> Gaps:
    """Every gap of the GPU timeline, classified (see the module docstring)."""
    g0, g1, nxt = _raw_gaps(t)
    length = g1 - g0
    launch = t.gpu_launch[nxt]
    linked = (launch >= 0) & (t.cpu_ts.size > 0)
    lc = np.where(linked, launch, 0)
    thread = t.threads()[lc] if t.cpu_ts.size else np.zeros(lc.size, np.int64)
    host = np.zeros(g0.size, dtype=bool)
    if t.cpu_ts.size:
        host = linked & (t.cpu_ts[lc] > g0)  # HTA: launch began after the GPU ran dry
    sync = np.full(g0.size, -1, dtype=np.int64)
    if np.any(host):
        sync[host] = _in_sync(t, thread[host], g0[host])
    cat = np.full(g0.size, UNLINKED, dtype=np.int8)
    cat[linked] = EVENT
    cat[linked & ~host & (length < kernel_wait_us * 1e3)] = KERNEL
    cat[host] = HOST
    cat[host & (sync >= 0)] = SYNC
    thread = np.where(linked, thread, -1)
    return Gaps(g0, length, cat, nxt, thread, np.where(cat == SYNC, sync, -1))


# -- charges ------------------------------------------------------------------------------


@dataclass
class Charges:
    """Parts of the idle gaps: gap index, CPU slice charged (-1: none), part (index into
    PARTS), ns. ``within``: the CPU slices the host parts were cut from, closed under their
    enclosing slices (what a question about the charged slices needs to look at)."""

    gap: np.ndarray
    slice: np.ndarray
    part: np.ndarray
    ns: np.ndarray
    within: np.ndarray
    # the part's time window on the CPU thread: a segment's overlap with its gap (else the
    # gap); ns is less than hi - lo where a sync call took its share of the gap first
    lo: np.ndarray | None = None
    hi: np.ndarray | None = None


def _overlapping(t: TraceData, threads: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The CPU slices on ``threads`` overlapping any window ``[lo, hi)`` (windows disjoint
    and in time order, as idle gaps are); closed under enclosing slices, which contain them."""
    on = np.isin(t.threads(), threads)
    k = np.searchsorted(hi, t.cpu_ts, side="right")
    kk = np.minimum(k, max(lo.size - 1, 0))
    hit = on & (k < lo.size) & (lo[kk] < t.cpu_ts + t.cpu_dur)
    return np.nonzero(hit)[0]


def _segments(t: TraceData, keep: np.ndarray) -> Segments:
    """The innermost-slice segments of the slices ``keep`` (closed under enclosing ones)."""
    local = np.full(t.cpu_ts.size, -1, dtype=np.int64)
    local[keep] = np.arange(keep.size)
    par = t.cpu_parent[keep]
    parent = np.where(par >= 0, local[np.maximum(par, 0)], -1)
    depth = slice_depths(t)[keep]
    seg = innermost_segments(t.threads()[keep], t.cpu_ts[keep], t.cpu_dur[keep], parent, depth)
    seg.slice = np.where(seg.slice >= 0, keep[np.maximum(seg.slice, 0)], -1)
    return seg


def charge(t: TraceData, g: Gaps) -> Charges:
    """Every idle gap cut into parts charged to CPU slices (see the module docstring)."""
    parts: list[tuple[np.ndarray, ...]] = []
    within = np.zeros(0, dtype=np.int64)

    def add(
        gap: np.ndarray,
        sl: np.ndarray,
        part: int,
        ns: np.ndarray,
        window: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> None:
        lo, hi = window if window is not None else (g.start[gap], g.end[gap])
        parts.append((gap, sl, np.full(gap.size, part, np.int8), ns, lo, hi))

    # The part of each gap the host is to blame for: all of a host or sync wait; of an
    # event wait, the time the launch call was still running (the work was not queued yet).
    host_ns = np.zeros(g.start.size, dtype=np.int64)
    hostish = (g.category == HOST) | (g.category == SYNC)
    host_ns[hostish] = g.length[hostish]
    ev = np.nonzero(g.category == EVENT)[0]
    if ev.size:
        call = t.gpu_launch[g.next[ev]]
        still = t.cpu_ts[call] + t.cpu_dur[call] - g.start[ev]
        host_ns[ev] = np.clip(still, 0, g.length[ev])
    host = np.nonzero(host_ns > 0)[0]
    sync_ns = np.zeros(g.start.size, dtype=np.float64)
    is_sync = np.nonzero(g.category == SYNC)[0]
    if is_sync.size:
        call = g.sync_call[is_sync]
        blocked_before = np.maximum(g.start[is_sync] - t.cpu_ts[call], 0)
        sync_ns[is_sync] = np.minimum(g.length[is_sync], blocked_before)
        add(is_sync, call, P_SYNC, sync_ns[is_sync])
    if host.size and t.cpu_ts.size:
        end = g.start[host] + host_ns[host]
        within = _overlapping(t, np.unique(g.thread[host]), g.start[host], end)
        seg = _segments(t, within)
        win, s, overlap = window_overlaps(seg, g.thread[host], g.start[host], end)
        gap = host[win]
        # What is left of a sync gap after its call's share is spread over the CPU's work.
        scale = (host_ns[gap] - sync_ns[gap]) / np.maximum(host_ns[gap], 1)
        ns = overlap * scale
        sl = seg.slice[s]
        lo = np.maximum(seg.start[s], g.start[gap])
        hi = np.minimum(seg.end[s], end[win])
        open_ = sl >= 0  # no slice open on the thread: the trace does not show its work
        add(gap[open_], sl[open_], P_HOST, ns[open_], (lo[open_], hi[open_]))
        add(gap[~open_], sl[~open_], P_UNTRACED, ns[~open_], (lo[~open_], hi[~open_]))
        covered = np.bincount(gap, weights=ns, minlength=g.start.size)
        left = host_ns[host] - sync_ns[host] - covered[host]
        keep = left > 0.5
        none = np.full(int(keep.sum()), -1, np.int64)
        add(host[keep], none, P_UNTRACED, left[keep], (g.start[host[keep]], end[keep]))
    elif host.size:
        add(host, np.full(host.size, -1, np.int64), P_UNTRACED, host_ns[host] - sync_ns[host])
    for cat, part in ((KERNEL, P_LATENCY), (EVENT, P_DEPENDENCY), (UNLINKED, P_UNLINKED)):
        k = np.nonzero(g.category == cat)[0]
        rest = (g.length[k] - host_ns[k]).astype(np.float64)
        k, rest = k[rest > 0], rest[rest > 0]
        if k.size:
            add(k, t.gpu_launch[g.next[k]], part, rest)
    if not parts:
        z = np.zeros(0, dtype=np.int64)
        return Charges(z, z, z.astype(np.int8), z.astype(np.float64), within, z, z)
    gap_a, sl_a, part_a, ns_a, lo_a, hi_a = (np.concatenate(c) for c in zip(*parts, strict=True))
    gap_a = gap_a.astype(np.int64)
    ns_a = _whole_ns(gap_a, ns_a.astype(np.float64), g.length)
    keep = ns_a > 0
    return Charges(
        gap_a[keep],
        sl_a.astype(np.int64)[keep],
        part_a.astype(np.int8)[keep],
        ns_a[keep],
        within,
        lo_a.astype(np.int64)[keep],
        hi_a.astype(np.int64)[keep],
    )


def _whole_ns(gap: np.ndarray, ns: np.ndarray, length: np.ndarray) -> np.ndarray:
    """The parts in whole nanoseconds, each gap's parts summing to its length exactly: a
    sync wait's shares are fractions; what rounding down leaves goes to the gap's largest
    part. So the charges add up to the idle time to the nanosecond."""
    whole = np.floor(ns)
    short = length - np.bincount(gap, weights=whole, minlength=length.size)
    order = np.lexsort((-ns, gap))
    first = order[np.r_[True, gap[order][1:] != gap[order][:-1]]]
    whole[first] += short[gap[first]]
    return whole
