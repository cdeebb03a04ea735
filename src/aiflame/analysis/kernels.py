"""Kernel and operator breakdown: where the GPU time goes, by kernel and by launching op.

Durations are summed per kernel name (``top_kernels``) and per the nearest CPU operator
enclosing each launch (``top_ops``, TraceLens' "direct kernel time" of a launcher). Short
kernels are those under ``SHORT_KERNEL_US`` (TraceLens' default of 10 us): many of them
mean launch overhead dominates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from aiflame.analysis.trace import Kind, TraceData

SHORT_KERNEL_US = 10.0
HISTOGRAM_BINS = 100


@dataclass
class Row:
    name: str
    total_us: float
    count: int
    mean_us: float
    share: float  # of the summed duration of all rows' kind (0..1)

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "total_us": self.total_us,
            "count": self.count,
            "mean_us": self.mean_us,
            "share": self.share,
        }


def _rows(
    keys: np.ndarray, dur_ns: np.ndarray, counts: np.ndarray | None, names: list[str], top: int
) -> list[Row]:
    if keys.size == 0:
        return []
    uniq, inv = np.unique(keys, return_inverse=True)
    total = np.bincount(inv, weights=dur_ns)
    n = np.bincount(inv) if counts is None else counts
    order = np.argsort(-total, kind="stable")[:top]
    grand = float(dur_ns.sum()) or 1.0
    return [
        Row(
            names[int(uniq[i])],
            total[i] / 1e3,
            int(n[i]),
            total[i] / 1e3 / max(int(n[i]), 1),
            float(total[i] / grand),
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
    """Operators by the GPU time of the activity they launch directly; count = op calls."""
    m = t.gpu_op >= 0
    ops = t.gpu_op[m]
    dur = t.gpu_dur[m].astype(np.float64)
    keys = t.cpu_name[ops]
    if keys.size == 0:
        return []
    uniq, inv = np.unique(keys, return_inverse=True)
    # Calls per op name: distinct op slices that launched something.
    calls = np.zeros(uniq.size, dtype=np.int64)
    first = np.unique(ops, return_index=True)[1]
    np.add.at(calls, inv[first], 1)
    return _rows(keys, dur, calls, t.names, top)


@dataclass
class ShortKernels:
    threshold_us: float
    count: int  # kernels shorter than the threshold
    kernels: int  # all kernels
    time_us: float  # their summed duration
    bin_edges_us: list[float]
    counts: list[int]

    def to_json(self) -> dict[str, object]:
        return {
            "threshold_us": self.threshold_us,
            "count": self.count,
            "kernels": self.kernels,
            "share_of_kernels": self.count / self.kernels if self.kernels else 0.0,
            "time_us": self.time_us,
            "histogram": {"bin_edges_us": self.bin_edges_us, "counts": self.counts},
        }


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
        threshold_us,
        int(short.size),
        int(dur.size),
        float(short.sum()),
        edges.tolist(),
        counts.tolist(),
    )
