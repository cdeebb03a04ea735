"""Why the GPU is idle: every gap of the GPU timeline classified, with the CPU stacks behind it.

A gap runs from the moment all earlier GPU activity has finished to the start of the next
activity; the gaps sum to the time breakdown's ``idle``. Each gap is put in one category by
looking at the launch call of the activity that ends it (HTA's test, on the whole GPU
rather than per stream) and at what the launching thread was doing when the GPU ran dry:

- ``host_wait``: the launch call began only after the GPU ran dry: the CPU was too slow to
  queue work (Python overhead, data loading, many small launches).
- ``sync_wait``: as ``host_wait``, but the launching thread was blocked in a synchronizing
  call (device/stream/event synchronize, synchronous memcpy: ``.item()``, ``.cpu()``) when
  the GPU ran dry: the CPU waited for the GPU, then the GPU waited for the CPU.
- ``kernel_wait``: the work was queued before the GPU ran dry and started less than
  ``KERNEL_WAIT_US`` later: the GPU's own launch latency between back-to-back kernels.
- ``event_wait``: queued before the GPU ran dry, yet started ``KERNEL_WAIT_US`` or more later:
  it waited on a dependency (an event from another stream or from the host, a peer).
- ``unlinked``: the launch of the next activity is not in the trace.

Grouped as the issue asks: waiting on the host = ``host_wait``; waiting on a dependency =
``sync_wait`` + ``event_wait``; other = ``kernel_wait`` + ``unlinked``. HTA's categories are
host_wait = ``host_wait`` + ``sync_wait``, kernel_wait = ``kernel_wait``, other =
``event_wait`` + ``unlinked`` (HTA classifies gaps per stream; :mod:`hta_compat` does that).

Stacks: for host waits, the innermost CPU slice running on the launching thread at the middle
of the gap (what kept the CPU busy; a sample per gap); for sync waits, the synchronizing call;
for event and kernel waits, the launch call of the waiting activity.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from aiflame.analysis.calls import sync_calls
from aiflame.analysis.hta_compat import KERNEL_WAIT_US
from aiflame.analysis.stacks import innermost_at, top_stacks
from aiflame.analysis.trace import TraceData

CATEGORIES = ("host_wait", "sync_wait", "kernel_wait", "event_wait", "unlinked")


def gaps(t: TraceData) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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


def gap_table(t: TraceData, kernel_wait_us: float = KERNEL_WAIT_US) -> dict[str, np.ndarray]:
    """Per gap: start, length (ns), category (index into CATEGORIES), the CPU slice charged."""
    g0, g1, nxt = gaps(t)
    length = g1 - g0
    launch = t.gpu_launch[nxt]
    linked = launch >= 0
    lc = np.maximum(launch, 0)
    host = linked & (t.cpu_ts[lc] > g0)  # HTA: launch began after the GPU ran dry
    thread = t.threads()[lc] if t.cpu_ts.size else np.zeros(lc.size, np.int64)
    sync = np.full(g0.size, -1, dtype=np.int64)
    if np.any(host):
        sync[host] = _in_sync(t, thread[host], g0[host])
    cat = np.full(g0.size, 4, dtype=np.int8)  # unlinked
    cat[linked] = 3  # event_wait
    cat[linked & ~host & (length < kernel_wait_us * 1e3)] = 2
    cat[host] = 0
    cat[host & (sync >= 0)] = 1

    # The CPU slice each gap is charged to (see the module docstring).
    culprit = np.where(linked, launch, -1)
    hw = np.nonzero(cat == 0)[0]
    if hw.size:
        busy = innermost_at(t, thread[hw], g0[hw] + length[hw] // 2)
        culprit[hw] = np.where(busy >= 0, busy, launch[hw])
    culprit[cat == 1] = sync[cat == 1]
    return {"start": g0, "length": length, "category": cat, "culprit": culprit}


def classify(t: TraceData, kernel_wait_us: float = KERNEL_WAIT_US) -> dict[str, Any]:
    """Idle time by category (us), gap counts, and the top stacks of each category."""
    g = gap_table(t, kernel_wait_us)
    length, cat, culprit = g["length"], g["category"], g["culprit"]
    cats: dict[str, dict[str, Any]] = {}
    stacks: dict[str, list[dict]] = {}
    total = int(length.sum())
    for k, name in enumerate(CATEGORIES):
        m = cat == k
        ns = int(length[m].sum())
        cats[name] = {
            "time_us": ns / 1e3,
            "gaps": int(np.count_nonzero(m)),
            "share": ns / total if total else 0.0,
        }
        if name != "unlinked" and np.any(m):
            stacks[name] = top_stacks(t, culprit[m], length[m], key="idle_us")
    us = {k: v["time_us"] for k, v in cats.items()}
    return {
        "total_us": total / 1e3,
        "gaps": int(length.size),
        "kernel_wait_threshold_us": kernel_wait_us,
        "categories": cats,
        "summary": {
            "waiting_on_host_us": us["host_wait"],
            "waiting_on_dependency_us": us["sync_wait"] + us["event_wait"],
            "other_us": us["kernel_wait"] + us["unlinked"],
        },
        "hta_categories": {
            "host_wait_us": us["host_wait"] + us["sync_wait"],
            "kernel_wait_us": us["kernel_wait"],
            "other_us": us["event_wait"] + us["unlinked"],
        },
        "top_stacks": stacks,
    }
