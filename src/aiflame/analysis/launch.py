"""Launch overhead: how long the CPU takes to launch work, against how long the work runs.

Per launch call (a runtime call that launched GPU activity: ``cudaLaunchKernel``,
``cudaMemcpyAsync``, ``cudaGraphLaunch``...): its CPU duration, the GPU busy time of the
activity it launched, and the delay from the start of the call to the start of that
activity. Queue depth is the number of activities launched (the call returned) but not yet
finished, over time. A launch-bound phase is a stretch of the GPU timeline where the GPU
idles most of the time while most launches take longer than the work they launch: the CPU
cannot keep the GPU fed, which CUDA graphs or ``torch.compile`` fix.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from aiflame.analysis.causes import Explained
from aiflame.analysis.idle import Gaps
from aiflame.analysis.schema import (
    CallStat,
    Launch,
    LaunchBound,
    LaunchBoundPhase,
    Quantiles,
    QueueBins,
    QueueDepth,
)
from aiflame.analysis.stacks import top_stacks
from aiflame.model.trace import TraceData
from aiflame.transforms.correlate import busy_time

QUEUE_BINS = 200
PHASE_LAUNCHES = 16  # launches per window, for launch-bound phases
MIN_PHASE_LAUNCHES = 8  # fewer launches in a trace: no phases
SHORT_SHARE = 0.5  # of launches whose work is shorter than the launch call
MAX_BUSY = 0.5  # of the window the GPU is busy at most
MIN_BUSY = 0.05  # ...and at least: launches back to back keep a GPU this busy or more
DENSE_LAUNCH_US = 100.0  # median time between the window's launch calls, at most
STALL_US = 1000.0  # a longer pause between two launches is a stall, not launch overhead
TOP_PHASES = 5
# Causes of idle time that launching faster (CUDA graphs, fewer ops) takes away.
OVERHEAD_CAUSES = ("launch_overhead", "python_overhead")


def _pct(x: np.ndarray, q: float) -> float | None:
    return float(np.percentile(x, q)) / 1e3 if x.size else None


def per_launch(t: TraceData) -> dict[str, np.ndarray]:
    """Columns per launch call: call id, CPU duration, GPU busy time, activities, first start."""
    linked = np.nonzero(t.gpu_launch >= 0)[0]
    if linked.size == 0:
        z = np.zeros(0, dtype=np.int64)
        return {"call": z, "cpu_ns": z, "gpu_ns": z, "n": z, "first_start": z}
    launch = t.gpu_launch[linked]
    order = np.lexsort((t.gpu_ts[linked], launch))
    launch, linked = launch[order], linked[order]
    calls, first, n = np.unique(launch, return_index=True, return_counts=True)
    gpu_ns = np.zeros(calls.size, dtype=np.int64)
    single = n == 1
    gpu_ns[single] = t.gpu_dur[linked[first[single]]]
    for k in np.nonzero(~single)[0].tolist():  # graph launches: busy time of their kernels
        idx = linked[first[k] : first[k] + n[k]]
        gpu_ns[k] = busy_time(t.gpu_ts[idx], t.gpu_dur[idx])
    return {
        "call": calls,
        "cpu_ns": t.cpu_dur[calls],
        "gpu_ns": gpu_ns,
        "n": n,
        "first_start": t.gpu_ts[linked[first]],
    }


def queue_depth(t: TraceData, bins: int = QUEUE_BINS) -> QueueDepth | None:
    """Activities queued or running over time: +1 when the launch call returns, -1 at the end.

    Unlinked activity counts from its start. Times are relative to the first GPU activity.
    """
    if t.gpu_ts.size == 0:
        return None
    end = t.gpu_ts + t.gpu_dur
    launch = t.gpu_launch
    lc = np.maximum(launch, 0)
    if t.cpu_ts.size:
        enq = np.where(launch >= 0, t.cpu_ts[lc] + t.cpu_dur[lc], t.gpu_ts)
    else:
        enq = t.gpu_ts.copy()
    enq = np.minimum(enq, t.gpu_ts)  # clocks may disagree by a little; never after the start
    t0, t1 = int(t.gpu_ts.min()), int(end.max())
    enq = np.maximum(enq, t0)  # depth over the GPU timeline only
    times = np.concatenate([enq, end])
    step = np.concatenate([np.ones(enq.size, np.int64), -np.ones(end.size, np.int64)])
    order = np.lexsort((step, times))  # at equal times, ends (-1) first
    times, depth = times[order], np.cumsum(step[order])
    span = np.diff(times, append=t1)
    total = max(t1 - t0, 1)
    # Integral of the depth up to each event time, to average it over bins.
    area = np.concatenate([[0.0], np.cumsum(depth * span, dtype=np.float64)])
    at = np.concatenate([times, [t1]])
    n = max(1, min(bins, t1 - t0))
    edges = np.linspace(t0, t1, n + 1)
    k = np.clip(np.searchsorted(at, edges, side="right") - 1, 0, at.size - 1)
    cur = np.concatenate([depth, [0]])[k]
    integ = area[k] + cur * (edges - at[k])
    mean_per_bin = np.diff(integ) / np.diff(edges)
    return QueueDepth(
        max=int(depth.max()) if depth.size else 0,
        mean=float(area[-1] / total),
        share_empty=float(span[depth == 0].sum() / total),
        share_one_or_less=float(span[depth <= 1].sum() / total),
        bins=QueueBins(
            start_us=0.0, bin_us=(t1 - t0) / n / 1e3, mean_depth=np.round(mean_per_bin, 3).tolist()
        ),
    )


def launch_bound_phases(
    t: TraceData, launches: dict[str, np.ndarray], g: Gaps | None, e: Explained | None
) -> list[LaunchBoundPhase]:
    """Stretches where launches outlast their work and the CPU launches back to back.

    The launches, in the order their work starts, are cut into windows of
    ``PHASE_LAUNCHES``; a window is launch-bound when more than ``SHORT_SHARE`` of its
    launches take longer than the work they launch, the GPU is busy between ``MIN_BUSY``
    and ``MAX_BUSY`` of the window's span, the launch calls follow each other within
    ``DENSE_LAUNCH_US`` (median) and none waits ``STALL_US`` for the previous one: a few
    launches around a long CPU stall (data loading, preprocessing) are not launch-bound.
    Adjacent launch-bound windows form a phase; its ``overhead_idle_us`` is the idle time
    in it that :mod:`causes` charges to launching and dispatch.
    """
    n = launches["call"].size
    if n < MIN_PHASE_LAUNCHES:
        return []
    order = np.argsort(launches["first_start"], kind="stable")
    L = {k: v[order] for k, v in launches.items()}
    g0 = int(t.gpu_ts.min())
    nwin = max(1, n // PHASE_LAUNCHES)
    win = np.minimum(np.arange(n) * nwin // n, nwin - 1)
    bounds = np.searchsorted(win, np.arange(nwin + 1))
    shorter = L["gpu_ns"] < L["cpu_ns"]
    # A window spans from its first work's start to the next window's first start.
    starts = L["first_start"][bounds[:-1]]
    last_end = int((t.gpu_ts + t.gpu_dur).max())
    ends = np.append(starts[1:], last_end)
    span = np.maximum(ends - starts, 1)
    count = np.diff(bounds)
    short = np.add.reduceat(shorter.astype(np.int64), bounds[:-1])
    gpu = np.add.reduceat(L["gpu_ns"], bounds[:-1])
    # Launch calls follow each other closely, with no stall between them.
    call_ts = t.cpu_ts[L["call"]]
    step = np.diff(call_ts, prepend=call_ts[0])
    close = np.add.reduceat((step <= DENSE_LAUNCH_US * 1e3).astype(np.int64), bounds[:-1])
    stall = np.maximum.reduceat(step, bounds[:-1]) > STALL_US * 1e3
    flagged = (short > SHORT_SHARE * count) & (gpu <= MAX_BUSY * span) & (gpu >= MIN_BUSY * span)
    flagged &= (2 * close >= count) & ~stall  # the median step is within DENSE_LAUNCH_US
    idle_in = overhead_idle(g, e)
    phases = []
    k = 0
    while k < nwin:
        if not flagged[k]:
            k += 1
            continue
        j = k
        while j + 1 < nwin and flagged[j + 1]:
            j += 1
        lo, hi = bounds[k], bounds[j + 1]
        calls = L["call"][lo:hi]
        a, b = int(starts[k]), int(ends[j])
        phases.append(
            LaunchBoundPhase(
                start_us=(a - g0) / 1e3,
                end_us=(b - g0) / 1e3,
                launches=int(hi - lo),
                shorter_than_launch=int(shorter[lo:hi].sum()),
                median_launch_us=float(np.median(L["cpu_ns"][lo:hi])) / 1e3,
                median_gpu_us=float(np.median(L["gpu_ns"][lo:hi])) / 1e3,
                median_interval_us=float(np.median(step[lo + 1 : hi])) / 1e3 if hi - lo > 1 else 0,
                gpu_busy_share=float(min(L["gpu_ns"][lo:hi].sum() / max(b - a, 1), 1.0)),
                overhead_idle_us=idle_in(a, b) / 1e3,
                top_stacks=top_stacks(
                    t, calls, t.cpu_dur[calls].astype(np.float64), include_self=False
                ),
            )
        )
        k = j + 1
    phases.sort(key=lambda p: -(p.end_us - p.start_us))
    return phases


def overhead_idle(g: Gaps | None, e: Explained | None) -> Callable[[int, int], float]:
    """A function of ``[a, b)``: the idle ns charged to launching and dispatch in the gaps
    starting in it (cumulative sums over the gaps in time order)."""
    if g is None or e is None or e.gap.size == 0:
        return lambda a, b: 0.0
    m = e.of(*OVERHEAD_CAUSES)
    per_gap = np.bincount(e.gap[m], weights=e.ns[m], minlength=g.start.size)
    before = np.concatenate([[0.0], np.cumsum(per_gap)])  # gaps are in time order

    def within(a: int, b: int) -> float:
        lo, hi = np.searchsorted(g.start, [a, b])
        return float(before[hi] - before[lo])

    return within


def launch_overhead(
    t: TraceData, g: Gaps | None = None, e: Explained | None = None
) -> Launch | None:
    """Launch statistics of one trace, or None without linked launches.

    ``g``, ``e``: the idle gaps and :func:`causes.explain` of them, to say how much idle
    the launch-bound phases hold.
    """
    if t.cpu_ts.size == 0:
        return None
    L = per_launch(t)
    if L["call"].size == 0:
        return None
    phases = launch_bound_phases(t, L, g, e)
    delay = L["first_start"] - t.cpu_ts[L["call"]]
    shorter = L["gpu_ns"] < L["cpu_ns"]
    names = np.array(t.names, dtype=object)[t.cpu_name[L["call"]]]
    by_call = {}
    for name in np.unique(names).tolist():
        m = names == name
        by_call[name] = CallStat(
            count=int(m.sum()),
            cpu_time_us=float(L["cpu_ns"][m].sum()) / 1e3,
            median_us=float(np.median(L["cpu_ns"][m])) / 1e3,
        )
    return Launch(
        launches=int(L["call"].size),
        activities=int(L["n"].sum()),
        launch_cpu_time_us=float(L["cpu_ns"].sum()) / 1e3,
        launched_gpu_time_us=float(L["gpu_ns"].sum()) / 1e3,
        shorter_than_launch=int(shorter.sum()),
        share_shorter_than_launch=float(shorter.mean()),
        launch_us=Quantiles(median=_pct(L["cpu_ns"], 50), p90=_pct(L["cpu_ns"], 90)),
        gpu_us=Quantiles(median=_pct(L["gpu_ns"], 50), p90=_pct(L["gpu_ns"], 90)),
        # from the start of the launch call to the start of the work on the GPU
        launch_to_start_us=Quantiles(median=_pct(delay, 50), p90=_pct(delay, 90)),
        by_call=by_call,
        queue_depth=queue_depth(t),
        launch_bound=LaunchBound(
            phases=len(phases),
            time_us=sum(p.end_us - p.start_us for p in phases),
            overhead_idle_us=sum(p.overhead_idle_us for p in phases),
        ),
        launch_bound_phases=phases[:TOP_PHASES],
    )
