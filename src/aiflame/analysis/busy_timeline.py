"""A downsampled timeline of each GPU: how busy it is in each time bin, and its idle gaps.

For the HTML report's timeline. Each bin holds the fraction of its time the GPU spent on
computation, exposed communication and exposed memcpy (the time breakdown's definitions,
so the three fractions sum to the bin's busy fraction and, summed over the bins, give the
breakdown's numbers). Gaps shorter than a bin would vanish in the bars, so the longest
idle gaps are listed separately with their exact times.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from aiflame.model.trace import Kind, TraceData

BINS = 600
GAPS = 50


def _merged(ts: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals ``[ts, end)`` as sorted, disjoint (starts, ends)."""
    if ts.size == 0:
        return ts, end
    order = np.argsort(ts, kind="stable")
    start = ts[order]
    stop = np.maximum.accumulate(end[order])
    new = np.ones(start.size, dtype=bool)
    new[1:] = start[1:] > stop[:-1]
    first = np.nonzero(new)[0]
    last = np.append(first[1:] - 1, start.size - 1)
    return start[first], stop[last]


def _covered(starts: np.ndarray, ends: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Length of the union ``(starts, ends)`` before each point of ``x``."""
    if starts.size == 0:
        return np.zeros(x.size)
    cum = np.concatenate([[0], np.cumsum(ends - starts)]).astype(np.float64)
    k = np.searchsorted(ends, x, side="right")  # intervals that ended by x
    inside = (k < starts.size) & (starts[np.minimum(k, starts.size - 1)] < x)
    partial = np.where(inside, x - starts[np.minimum(k, starts.size - 1)], 0)
    return cum[k] + partial


def device_timeline(
    ts: np.ndarray, dur: np.ndarray, kind: np.ndarray, bins: int = BINS, gaps: int = GAPS
) -> dict[str, Any]:
    """The binned timeline of one GPU's activities (ns in, us out, times from its start)."""
    if ts.size == 0:
        return {"start_us": 0.0, "total_us": 0.0, "bins": 0, "computation": [],
                "exposed_communication": [], "exposed_memcpy": [], "idle_gaps": [],
                "idle_gap_count": 0}  # fmt: skip
    end = ts + dur
    t0, t1 = int(ts.min()), int(end.max())
    n = max(1, min(bins, t1 - t0))
    edges = np.linspace(t0, t1, n + 1)
    comp = (kind == Kind.COMPUTE) | (kind == Kind.MEMSET)
    comm = kind == Kind.COMM
    layers = []
    for mask in (comp, comp | comm, np.ones(ts.size, dtype=bool)):
        s, e = _merged(ts[mask], end[mask])
        layers.append(np.diff(_covered(s, e, edges)))
    width = np.diff(edges)

    def frac(x: np.ndarray) -> list[float]:
        return np.round(np.clip(x / width, 0, 1), 4).tolist()

    busy_s, busy_e = _merged(ts, end)
    gap_start, gap_len = busy_e[:-1], busy_s[1:] - busy_e[:-1]
    longest = np.argsort(-gap_len, kind="stable")[:gaps]
    return {
        "start_us": t0 / 1e3,
        "total_us": (t1 - t0) / 1e3,
        "bins": n,
        "computation": frac(layers[0]),
        "exposed_communication": frac(layers[1] - layers[0]),
        "exposed_memcpy": frac(layers[2] - layers[1]),
        "idle_gaps": [
            [round((int(gap_start[i]) - t0) / 1e3, 3), round(int(gap_len[i]) / 1e3, 3)]
            for i in sorted(longest.tolist())
        ],
        "idle_gap_count": int(gap_len.size),
    }


def busy_timeline(t: TraceData, bins: int = BINS) -> dict[str, dict[str, Any]]:
    """Device name -> its timeline, for every GPU of one trace."""
    out = {}
    for d in np.unique(t.gpu_device).tolist():
        m = t.gpu_device == d
        out[t.names[d]] = device_timeline(t.gpu_ts[m], t.gpu_dur[m], t.gpu_kind[m], bins)
    return out
