"""Kernel and operator breakdown: where the GPU time goes, by kernel and by launching op.

Durations are summed per kernel name (``top_kernels``, shares of all kernel time) and per
the nearest CPU operator enclosing each launch (``top_ops``, TraceLens' "direct kernel time"
of a launcher, shares of *all* GPU activity time, so work no op launched, such as CUDA graph
replays, shows as the unattributed rest). Short kernels are those under ``SHORT_KERNEL_US``
(TraceLens' default of 10 us): many of them mean launch overhead dominates.
"""

from __future__ import annotations

import numpy as np

from aiflame.analysis.calls import op_calls
from aiflame.analysis.schema import Histogram, Row, ShortKernels
from aiflame.model.trace import Kind, TraceData

SHORT_KERNEL_US = 10.0
HISTOGRAM_BINS = 100


def _rows(
    keys: np.ndarray,
    dur_ns: np.ndarray,
    counts: np.ndarray | None,
    names: list[str],
    top: int,
    grand: float | None = None,
) -> list[Row]:
    if keys.size == 0:
        return []
    uniq, inv = np.unique(keys, return_inverse=True)
    total = np.bincount(inv, weights=dur_ns)
    n = np.bincount(inv) if counts is None else counts
    order = np.argsort(-total, kind="stable")[:top]
    grand = grand or float(dur_ns.sum()) or 1.0
    return [
        Row(
            name=names[int(uniq[i])],
            total_us=float(total[i]) / 1e3,
            count=int(n[i]),
            mean_us=float(total[i]) / 1e3 / max(int(n[i]), 1),
            share=float(total[i] / grand),
        )
        for i in order
    ]


def kernel_mask(t: TraceData) -> np.ndarray:
    """Kernels proper: compute and collective kernels, not copies or memsets."""
    return (t.gpu_kind == Kind.COMPUTE) | (t.gpu_kind == Kind.COMM)


def top_kernels(t: TraceData, top: int = 20) -> list[Row]:
    """Kernels by name: total GPU time, launches, mean duration."""
    m = kernel_mask(t)
    return _rows(t.gpu_name[m], t.gpu_dur[m].astype(np.float64), None, t.names, top)


def top_ops(t: TraceData, top: int = 20) -> list[Row]:
    """Operators by the GPU time of the activity they launch directly (shares of all GPU
    activity time); count = op calls (a captured op once per graph replay running it)."""
    m = t.gpu_op >= 0
    ops = op_calls(t, t.gpu_op)[m]
    dur = t.gpu_dur[m].astype(np.float64)
    keys = t.cpu_name[t.gpu_op[m]]
    if keys.size == 0:
        return []
    uniq, inv = np.unique(keys, return_inverse=True)
    # Calls per op name: distinct op slices that launched something.
    calls = np.zeros(uniq.size, dtype=np.int64)
    first = np.unique(ops, return_index=True)[1]
    np.add.at(calls, inv[first], 1)
    return _rows(keys, dur, calls, t.names, top, float(t.gpu_dur.sum()))


def unattributed_why(t: TraceData, replayed: np.ndarray) -> str | None:
    """What the GPU time launched by no operator is (``replayed``: per activity, was it
    launched by a graph launch): graph replays, launches outside ops, or both; None when
    every activity has its operator."""
    none = t.gpu_op < 0
    parts = []
    if np.any(none & replayed):
        parts.append("graph replays")
    if np.any(none & ~replayed):
        parts.append("launches outside ops")
    return " and ".join(parts) or None


def unattributed_us(t: TraceData) -> float:
    """GPU activity time launched by no operator (graph replays, launches outside ops)."""
    return float(t.gpu_dur[t.gpu_op < 0].sum()) / 1e3


def short_kernels(
    t: TraceData, threshold_us: float = SHORT_KERNEL_US, bins: int = HISTOGRAM_BINS
) -> ShortKernels:
    """Kernels under ``threshold_us`` and a histogram of their durations (np.histogram bins)."""
    dur = t.gpu_dur[kernel_mask(t)] / 1e3
    short = dur[dur < threshold_us]
    if short.size:
        counts, edges = np.histogram(short, bins=bins)
    else:
        counts, edges = np.zeros(0, dtype=np.int64), np.zeros(0)
    return ShortKernels(
        threshold_us=threshold_us,
        count=int(short.size),
        kernels=int(dur.size),
        share_of_kernels=short.size / dur.size if dur.size else 0.0,
        time_us=float(short.sum()),
        histogram=Histogram(bin_edges_us=edges.tolist(), counts=counts.tolist()),
    )
