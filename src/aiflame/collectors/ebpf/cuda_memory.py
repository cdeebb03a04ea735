"""Live GPU memory by allocation stack, from the probes on the CUDA/HIP alloc/free calls.

Every allocation the program asks of the runtime or the driver is seen here: PyTorch's
caching allocator (its segments, not the tensors inside them), NCCL's buffers, cuBLAS
workspaces, other frameworks. The rules of the replay:

* an allocation is live from the return of a successful call (return value 0, the
  address read from the out-parameter at return) until the entry of the free of the same
  address in the same process; a free ends the latest live allocation at its address;
* a call that failed (an out-of-memory, or no GPU at all) allocates nothing: it is kept as
  ``failed-alloc-count``/``failed-alloc-bytes`` at its stack, never as live bytes;
* a failed free frees nothing; ``free(NULL)`` is a no-op; a free of an address allocated
  before recording started is counted (its size was never seen);
* a successful allocation at an address that is still live means its free was not seen
  (a free function not probed, or an event over the rate cap): the older one is ended
  there and counted;
* device and managed memory make the GPU memory timeline and its peak (per process, the
  first moment its live total is highest); pinned host memory (``cudaMallocHost``...)
  is in ``alloc-bytes`` with label ``memory=host`` but not in the GPU peak.

The profile has the metrics of the snapshot importer (:mod:`aiflame.sources.torch_memory.importer`):
``peak-bytes`` (live at the peak of the allocation's process), ``alloc-bytes``,
``alloc-count``, plus ``failed-alloc-count`` and ``failed-alloc-bytes``; one sample per
call, timestamped at its allocation, ``meta["free_time_ns"]`` its free (-1: still live),
and ``meta["memory_timeline"]`` the series of the process with the highest peak.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from aiflame.collectors.ebpf.cuda_apis import ALLOC, APIS, FREE
from aiflame.collectors.ebpf.cuda_events import call_size
from aiflame.model import FrameKind, Profile, ProfileBuilder, SampleType
from aiflame.sources.torch_memory.importer import fmt_bytes, timeline_blocks
from aiflame.sources.torch_memory.replay import decimate

SAMPLE_TYPES = (
    SampleType("peak-bytes", "bytes"),
    SampleType("alloc-bytes", "bytes"),
    SampleType("alloc-count", "count"),
    SampleType("failed-alloc-count", "count"),
    SampleType("failed-alloc-bytes", "bytes"),
)
PEAK, ALLOC_BYTES, ALLOC_COUNT, FAILED_COUNT, FAILED_BYTES = range(5)
GPU_MEMORY = ("device", "managed")
TIMELINE_POINTS = 4096
LEGEND = (
    "Width is bytes of GPU memory allocated through the CUDA/HIP runtime or driver (for"
    " PyTorch: the caching allocator's segments). The widest leaf is the call site holding"
    " the most; a wide bar with no self bytes is a path to such sites."
)


@dataclass
class Allocations:
    """The replay's result: successful allocations as columns, and what did not pair."""

    event: np.ndarray  # index of the allocation in the memory events
    pid: np.ndarray
    addr: np.ndarray
    size: np.ndarray
    alloc_ns: np.ndarray  # when it became live
    free_ns: np.ndarray  # when it was freed, -1 if live at the end
    gpu: np.ndarray  # bool: device or managed memory
    failed: np.ndarray  # indices of failed allocation calls
    counts: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.event)


def replay(events: np.ndarray) -> Allocations:
    """Pair allocations and frees of :meth:`EventLog.memory_events` (see the module doc)."""
    n = len(events)
    roles = [APIS[int(a)].role for a in events["api"].tolist()]
    ts, dur = events["ts"].astype(np.int64), events["duration"].astype(np.int64)
    when = np.array(
        [
            t + d if r == ALLOC else t
            for r, t, d in zip(roles, ts.tolist(), dur.tolist(), strict=True)
        ],
        dtype=np.int64,
    )
    order = np.argsort(when, kind="stable")
    counts = dict.fromkeys(
        ("frees", "failed_frees", "null_frees", "unmatched_frees", "unseen_frees"), 0
    )
    live: dict[tuple[int, int], int] = {}  # (pid, address) -> allocation row
    rows: list[list[int]] = []  # event, pid, addr, size, alloc_ns, free_ns, gpu
    failed: list[int] = []
    for i in order.tolist():
        api = APIS[int(events["api"][i])]
        ev = events[i]
        pid, ret = int(ev["pid"]), int(ev["ret"])
        if api.role == ALLOC:
            addr = int(ev["result"])
            if ret != 0 or addr == 0:
                failed.append(i)
                continue
            prev = live.pop((pid, addr), None)
            if prev is not None:  # its free was not seen
                rows[prev][5] = int(when[i])
                counts["unseen_frees"] += 1
            live[(pid, addr)] = len(rows)
            gpu = int(api.memory in GPU_MEMORY)
            rows.append([i, pid, addr, call_size(api, ev["args"]), int(when[i]), -1, gpu])
        elif api.role == FREE:
            ptr = int(ev["args"][api.ptr_arg])
            if ptr == 0:
                counts["null_frees"] += 1
            elif ret != 0:
                counts["failed_frees"] += 1
            else:
                row = live.pop((pid, ptr), None)
                if row is None:
                    counts["unmatched_frees"] += 1
                else:
                    rows[row][5] = int(when[i])
                    counts["frees"] += 1
    cols = np.array(rows, dtype=np.int64).reshape(-1, 7)
    counts["failed_allocs"] = len(failed)
    counts["events"] = n
    return Allocations(
        event=cols[:, 0],
        pid=cols[:, 1],
        addr=cols[:, 2],
        size=cols[:, 3],
        alloc_ns=cols[:, 4],
        free_ns=cols[:, 5],
        gpu=cols[:, 6].astype(bool),
        failed=np.array(failed, dtype=np.int64),
        counts=counts,
    )


@dataclass
class Timeline:
    """GPU memory of one process over its memory events: point k is after event k."""

    time_ns: np.ndarray
    live: np.ndarray
    alloc_point: np.ndarray  # per allocation of the process (GPU ones), its point
    free_point: np.ndarray  # -1: never freed
    rows: np.ndarray  # the allocations (indices into Allocations) in this order
    size: np.ndarray  # their sizes
    peak_point: int = -1

    @property
    def peak_bytes(self) -> int:
        return int(self.live[self.peak_point]) if self.peak_point >= 0 else 0

    def live_at_peak(self) -> np.ndarray:
        p = self.peak_point
        if p < 0:
            return np.zeros(len(self.rows), dtype=bool)
        return (self.alloc_point <= p) & ((self.free_point < 0) | (self.free_point > p))


def timeline(allocs: Allocations, pid: int) -> Timeline:
    rows = np.nonzero((allocs.pid == pid) & allocs.gpu)[0]
    a_ns, f_ns = allocs.alloc_ns[rows], allocs.free_ns[rows]
    size = allocs.size[rows]
    freed = f_ns >= 0
    # points: every allocation and every free in time order; at a tie the free first (an
    # address reused at once, an allocation that ended when its address was reallocated)
    t = np.concatenate([a_ns, f_ns[freed]])
    delta = np.concatenate([size, -size[freed]])
    is_alloc = np.concatenate([np.ones(len(rows), dtype=np.int8), np.zeros(freed.sum(), np.int8)])
    order = np.lexsort((np.arange(len(t)), is_alloc, t))
    t, delta = t[order], delta[order]
    point_of = np.empty(len(t), dtype=np.int64)
    point_of[order] = np.arange(len(t))
    alloc_point = point_of[: len(rows)]
    free_point = np.full(len(rows), -1, dtype=np.int64)
    free_point[freed] = point_of[len(rows) :]
    live = np.cumsum(delta)
    peak = int(np.argmax(live)) if len(live) else -1
    return Timeline(t, live, alloc_point, free_point, rows, size, peak)


def memory_profile(
    events: np.ndarray,
    user_stack: Callable[[ProfileBuilder, int, int], int],
    meta: dict[str, object] | None = None,
) -> Profile:
    """The memory profile of the events; ``user_stack(builder, pid, stack)`` interns the
    call site's frames in ``builder`` and returns the stack id (see :mod:`.cuda_profile`)."""
    allocs = replay(events)
    b = ProfileBuilder(SAMPLE_TYPES)
    lines = {p: timeline(allocs, p) for p in sorted(set(allocs.pid[allocs.gpu].tolist()))}
    main = max(lines, key=lambda p: lines[p].peak_bytes) if lines else None
    at_peak = np.zeros(len(allocs), dtype=bool)
    for tl in lines.values():
        at_peak[tl.rows] = tl.live_at_peak()
    # The main process's GPU allocations first, in one run of samples (the page's chart
    # finds them by position), then the other allocations, then the failed calls.
    main_rows = lines[main].rows if main is not None else np.zeros(0, dtype=np.int64)
    rest = np.setdiff1d(np.arange(len(allocs)), main_rows, assume_unique=True)
    api_frames: dict[int, int] = {}
    free_ns: list[int] = []

    def add(ev_index: int, values: list[float], ts: int, extra: dict[str, object]) -> None:
        ev = events[ev_index]
        api_id = int(ev["api"])
        fid = api_frames.get(api_id)
        if fid is None:
            fid = api_frames[api_id] = b.frame(APIS[api_id].name, FrameKind.RUNTIME)
        parent = user_stack(b, int(ev["pid"]), int(ev["stack"]))
        labels = {"pid": int(ev["pid"]), "tid": int(ev["tid"]), **extra}
        b.add(b.stack([fid], parent), values, b.labels(labels), ts)

    for r in [*main_rows.tolist(), *rest.tolist()]:
        api = APIS[int(events["api"][allocs.event[r]])]
        size = float(allocs.size[r])
        add(
            int(allocs.event[r]),
            [size if at_peak[r] else 0.0, size, 1.0, 0.0, 0.0],
            int(allocs.alloc_ns[r]),
            {"memory": api.memory},
        )
        free_ns.append(int(allocs.free_ns[r]))
    for i in allocs.failed.tolist():
        ev = events[i]
        api = APIS[int(ev["api"])]
        size = float(call_size(api, ev["args"]))
        t = int(ev["ts"]) + int(ev["duration"])
        add(i, [0.0, 0.0, 0.0, 1.0, size], t, {"memory": api.memory, "error": int(ev["ret"])})
        free_ns.append(-1)
    b.meta.update(meta or {})
    b.meta.update(_meta(allocs, lines, main))
    b.meta["free_time_ns"] = free_ns
    return b.build()


def _meta(allocs: Allocations, lines: dict[int, Timeline], main: int | None) -> dict[str, object]:
    meta: dict[str, object] = {"default_type": PEAK, "legend": LEGEND}
    c = allocs.counts
    gpu = allocs.gpu
    allocated = meta["allocated_bytes"] = int(allocs.size[gpu].sum())
    meta["allocations"] = int(gpu.sum())
    meta["memory_counts"] = dict(c)
    if main is not None:
        tl = lines[main]
        meta["peak_pid"] = main
        meta["peak_bytes"] = tl.peak_bytes
        meta["peak_time"] = int(tl.time_ns[tl.peak_point]) if tl.peak_point >= 0 else None
        meta["peak_time_unit"] = "ns"
        meta["memory_timeline"] = _timeline_meta(tl, main)
        meta["time_range_ns"] = (int(tl.time_ns[0]), int(tl.time_ns[-1]))
        when = (tl.time_ns[tl.peak_point] - tl.time_ns[0]) / 1e6
        meta["info:peak bytes"] = f"{fmt_bytes(tl.peak_bytes)} at +{when:.3f} ms (PID {main})"
        if len(lines) > 1:
            others = ", ".join(f"PID {p} {fmt_bytes(t.peak_bytes)}" for p, t in lines.items())
            meta["info:peaks by process"] = others
    live_end = int(allocs.size[gpu & (allocs.free_ns < 0)].sum())
    meta["info:allocated"] = (
        f"{fmt_bytes(allocated)} in {meta['allocations']:,} GPU allocations"
        f"; {fmt_bytes(live_end)} still allocated at the end"
    )
    host = ~gpu
    if host.any():
        meta["info:pinned host memory"] = (
            f"{fmt_bytes(int(allocs.size[host].sum()))} in {int(host.sum()):,} allocations"
        )
    notes = []
    if c.get("failed_allocs"):
        notes.append(f"{c['failed_allocs']:,} failed allocation calls (failed-alloc-count)")
    if c.get("failed_frees"):
        notes.append(f"{c['failed_frees']:,} failed frees")
    if c.get("unmatched_frees"):
        notes.append(f"{c['unmatched_frees']:,} frees of memory allocated before recording")
    if c.get("unseen_frees"):
        notes.append(f"{c['unseen_frees']:,} addresses reallocated without a free seen")
    if notes:
        meta["info:memory calls"] = "; ".join(notes)
    return meta


def _timeline_meta(tl: Timeline, pid: int) -> dict[str, object]:
    n = len(tl.live)
    keep = decimate(n, tl.live, tl.peak_point, TIMELINE_POINTS)
    t0 = int(tl.time_ns[0])
    return {
        "device": f"PID {pid}",
        "scope": f"process {pid}, every GPU it allocated on",
        "unit": "us",
        "start_us": t0 // 1000,
        "time_us": ((tl.time_ns[keep] - t0) // 1000).tolist(),
        "live_bytes": tl.live[keep].tolist(),
        "peak_index": int(np.searchsorted(keep, tl.peak_point)),
        "points": n,
        # the main process's GPU allocations are the first samples
        "blocks": timeline_blocks(tl.alloc_point, tl.free_point, tl.size, keep, 0),
    }


@dataclass
class MemorySite:
    """Sums of one (process, call site, API function) over a continuous profile's period:
    what it allocated in the period, and what of it was live at the process's peak."""

    alloc_bytes: int = 0
    alloc_count: int = 0
    inuse_bytes: int = 0  # live at the moment the process held the most in the period
    inuse_count: int = 0


Site = tuple[int, int, int]  # (pid, stack, api)


class LiveMemory:
    """GPU memory live by allocation site across the periods of a continuous profiler:
    the rules of :func:`replay`, applied one period of events at a time, the allocations
    still live carried from one period to the next (device and managed memory; pinned host
    memory is not GPU memory and is left out)::

        live = LiveMemory()
        sites = live.period(events)     # (pid, stack, api) -> MemorySite: allocated in
                                        # the period, and live at the process's peak in it
        live.forget(pid)                # the process is gone: its memory with it

    A process's peak in a period is the first moment its live total was highest (what it
    carried in counts: a period without events peaks at its start), so a profile says who
    held the memory when the process needed the most of it, not only at the period's end.
    """

    def __init__(self) -> None:
        # (pid, address) -> (size, stack, api) of each live allocation
        self.live: dict[tuple[int, int], tuple[int, int, int]] = {}
        self.counts = dict.fromkeys(("unmatched_frees", "unseen_frees", "failed_allocs"), 0)
        # within a period: per process its changes of live bytes, total and peak so far
        self._changes: dict[int, list[tuple[Site, int]]] = {}
        self._total: dict[int, int] = {}
        self._peak: dict[int, tuple[int, int]] = {}  # (bytes, changes applied at the peak)

    def period(self, events: np.ndarray) -> dict[Site, MemorySite]:
        sites: dict[Site, MemorySite] = {}
        start: dict[Site, list[int]] = {}  # live at the period's start: [bytes, count]
        total: dict[int, int] = {}  # per process, its live bytes as the events go
        for (pid, _addr), (size, stack, api) in self.live.items():
            held = start.setdefault((pid, stack, api), [0, 0])
            held[0] += size
            held[1] += 1
            total[pid] = total.get(pid, 0) + size
        self._changes, self._total = {}, total
        self._peak = {pid: (t, 0) for pid, t in total.items()}
        if len(events):
            roles = [APIS[int(a)].role for a in events["api"].tolist()]
            when = [
                int(t) + int(d) if r == ALLOC else int(t)
                for r, t, d in zip(
                    roles, events["ts"].tolist(), events["duration"].tolist(), strict=True
                )
            ]
            for i in sorted(range(len(events)), key=when.__getitem__):
                self._apply(events[i], roles[i], sites)
        at_peak = {k: list(v) for k, v in start.items()}
        for pid, (_bytes, applied) in self._peak.items():
            for where, delta in self._changes.get(pid, [])[:applied]:
                held = at_peak.setdefault(where, [0, 0])
                held[0] += delta
                held[1] += 1 if delta > 0 else -1
        for key, (nbytes, count) in at_peak.items():
            if count > 0:
                site = sites.setdefault(key, MemorySite())
                site.inuse_bytes += nbytes
                site.inuse_count += count
        self._changes, self._peak, self._total = {}, {}, {}
        return sites

    def _change(self, pid: int, site: Site, delta: int) -> None:
        changes = self._changes.setdefault(pid, [])
        changes.append((site, delta))
        now = self._total.get(pid, 0) + delta
        self._total[pid] = now
        if now > self._peak.get(pid, (0, 0))[0]:
            self._peak[pid] = (now, len(changes))

    def _apply(self, ev: np.void, role: str, sites: dict[Site, MemorySite]) -> None:
        api_id = int(ev["api"])
        api = APIS[api_id]
        pid, ret = int(ev["pid"]), int(ev["ret"])
        if role == ALLOC:
            addr = int(ev["result"])
            if ret != 0 or addr == 0:
                self.counts["failed_allocs"] += 1
                return
            if api.memory not in GPU_MEMORY:
                return
            size = call_size(api, ev["args"])
            old = self.live.pop((pid, addr), None)
            if old is not None:  # its free was not seen: it ends here
                self.counts["unseen_frees"] += 1
                self._change(pid, (pid, old[1], old[2]), -old[0])
            stack = int(ev["stack"])
            self.live[(pid, addr)] = (size, stack, api_id)
            site = sites.setdefault((pid, stack, api_id), MemorySite())
            site.alloc_bytes += size
            site.alloc_count += 1
            self._change(pid, (pid, stack, api_id), size)
        elif role == FREE and api.memory != "host":
            ptr = int(ev["args"][api.ptr_arg])
            if ptr and ret == 0:
                old = self.live.pop((pid, ptr), None)
                if old is None:
                    self.counts["unmatched_frees"] += 1
                else:
                    self._change(pid, (pid, old[1], old[2]), -old[0])

    def forget(self, pid: int) -> None:
        for key in [k for k in self.live if k[0] == pid]:
            del self.live[key]
