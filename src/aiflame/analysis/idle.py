"""Why the GPU is idle: every gap of the GPU timeline classified, and explained by what the
CPU did during it.

A gap runs from the moment all earlier GPU activity has finished to the start of the next
activity; the gaps sum to the time breakdown's ``idle``. Each gap is put in one category by
looking at the launch call of the activity that ends it (HTA's test, on the whole GPU
rather than per stream) and at what the launching thread was doing when the GPU ran dry:

- ``host_wait``: the launch call began only after the GPU ran dry: the CPU was too slow to
  queue work (Python overhead, data loading, preprocessing, many small launches).
- ``sync_wait``: as ``host_wait``, but the launching thread was blocked in a synchronizing
  call (device/stream/event synchronize, synchronous memcpy: ``.item()``, ``.cpu()``) when
  the GPU ran dry: the CPU waited for the GPU, then the GPU waited for the CPU.
- ``kernel_wait``: the work was queued before the GPU ran dry and started less than
  ``KERNEL_WAIT_US`` later: the GPU's own launch latency between back-to-back kernels.
- ``event_wait``: queued before the GPU ran dry, yet started ``KERNEL_WAIT_US`` or more later:
  it waited on a dependency (an event from another stream or from the host, a peer).
- ``unlinked``: the launch of the next activity is not in the trace.

HTA's categories are host_wait = ``host_wait`` + ``sync_wait``, kernel_wait =
``kernel_wait``, other = ``event_wait`` + ``unlinked`` (HTA classifies gaps per stream;
:mod:`hta_compat` does that). What the CPU did during the host and sync waits, time-weighted
over each gap, is :mod:`causes`' account (``Idle.causes``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from aiflame.analysis.calls import sync_calls
from aiflame.analysis.hta_compat import KERNEL_WAIT_US
from aiflame.analysis.schema import HtaIdle, Idle, IdleCategory, IdleSummary, Stack
from aiflame.analysis.stacks import top_stacks
from aiflame.model.trace import TraceData

CATEGORIES = ("host_wait", "sync_wait", "kernel_wait", "event_wait", "unlinked")
HOST, SYNC, KERNEL, EVENT, UNLINKED = range(5)


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


def classify(
    t: TraceData, g: Gaps, stacks: dict[str, list[Stack]], causes: list, kernel_wait_us: float
) -> Idle:
    """Idle time by category (us), gap counts; ``stacks``: the top stacks of each category
    (host and sync waits: what the CPU ran during them); ``causes``: :mod:`causes`' rows."""
    total = int(g.length.sum())
    cats: dict[str, IdleCategory] = {}
    for k, name in enumerate(CATEGORIES):
        m = g.category == k
        ns = int(g.length[m].sum())
        cats[name] = IdleCategory(
            time_us=ns / 1e3, gaps=int(np.count_nonzero(m)), share=ns / total if total else 0.0
        )
    for k in (KERNEL, EVENT):  # what was waiting: the launch of the next activity
        m = g.category == k
        if np.any(m):
            launch = t.gpu_launch[g.next[m]]
            stacks[CATEGORIES[k]] = top_stacks(t, launch, g.length[m].astype(np.float64))
    us = {k: v.time_us for k, v in cats.items()}
    return Idle(
        total_us=total / 1e3,
        gaps=int(g.length.size),
        kernel_wait_threshold_us=kernel_wait_us,
        categories=cats,
        summary=IdleSummary(
            waiting_on_host_us=us["host_wait"],
            waiting_on_dependency_us=us["sync_wait"] + us["event_wait"],
            other_us=us["kernel_wait"] + us["unlinked"],
        ),
        hta_categories=HtaIdle(
            host_wait_us=us["host_wait"] + us["sync_wait"],
            kernel_wait_us=us["kernel_wait"],
            other_us=us["event_wait"] + us["unlinked"],
        ),
        top_stacks={k: v for k, v in stacks.items() if v},
        causes=causes,
    )
