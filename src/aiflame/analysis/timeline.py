"""GPU time breakdown with AMD TraceLens' definitions (its ``gpu_timeline.csv``).

- total: from the first GPU activity's start to the last one's end;
- busy: the union of all activity intervals; idle = total - busy;
- computation: the union of compute kernels and memsets (TraceLens files memsets there);
- communication: the union of NCCL/RCCL kernels; memcpy: the union of copies;
- exposed communication: communication not overlapped by computation;
- exposed memcpy: memcpy overlapped by neither computation nor communication.

So computation + exposed communication + exposed memcpy + idle = total. Every
"exposed" length is a difference of union lengths: |B minus A| = |A union B| - |A|.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from aiflame.analysis.schema import Breakdown
from aiflame.model.trace import Kind
from aiflame.transforms.correlate import busy_time


@dataclass
class TimeBreakdown:
    """Times in nanoseconds."""

    total: int
    busy: int
    idle: int
    computation: int
    communication: int
    memcpy: int
    exposed_communication: int
    exposed_memcpy: int
    memset: int  # part of computation

    def to_record(self) -> Breakdown:
        """The fields in microseconds (the report's unit)."""
        return Breakdown(**{k: v / 1000.0 for k, v in asdict(self).items()})


def _union(ts: np.ndarray, dur: np.ndarray, *masks: np.ndarray) -> int:
    sel = np.logical_or.reduce(masks) if len(masks) > 1 else masks[0]
    return busy_time(ts[sel], dur[sel])


def time_breakdown(ts: np.ndarray, dur: np.ndarray, kind: np.ndarray) -> TimeBreakdown:
    """Breakdown of the activities ``ts``/``dur`` (ns) of one GPU, ``kind`` from :class:`Kind`."""
    if ts.size == 0:
        return TimeBreakdown(0, 0, 0, 0, 0, 0, 0, 0, 0)
    comp = (kind == Kind.COMPUTE) | (kind == Kind.MEMSET)
    comm = kind == Kind.COMM
    copy = kind == Kind.MEMCPY
    total = int((ts + dur).max() - ts.min())
    busy = busy_time(ts, dur)
    computation = _union(ts, dur, comp)
    communication = _union(ts, dur, comm)
    comp_or_comm = _union(ts, dur, comp, comm)
    return TimeBreakdown(
        total=total,
        busy=busy,
        idle=total - busy,
        computation=computation,
        communication=communication,
        memcpy=_union(ts, dur, copy),
        exposed_communication=comp_or_comm - computation,
        exposed_memcpy=busy - comp_or_comm,
        memset=_union(ts, dur, kind == Kind.MEMSET),
    )


def covered(
    ts: np.ndarray, dur: np.ndarray, cover_ts: np.ndarray, cover_dur: np.ndarray
) -> np.ndarray:
    """For each interval ``[ts, ts + dur)``: the ns of it inside the union of the ``cover``
    intervals (so ``dur - covered`` is its exposed time)."""
    if ts.size == 0 or cover_ts.size == 0:
        return np.zeros(ts.size, dtype=np.int64)
    order = np.argsort(cover_ts, kind="stable")
    start = cover_ts[order]
    end = np.maximum.accumulate(start + cover_dur[order])
    new = np.ones(start.size, dtype=bool)
    new[1:] = start[1:] > end[:-1]
    first = np.nonzero(new)[0]
    last = np.append(first[1:] - 1, start.size - 1)
    m_start, m_end = start[first], end[last]  # the union: sorted, disjoint
    before = np.concatenate([[0], np.cumsum(m_end - m_start)])

    def upto(x: np.ndarray) -> np.ndarray:  # covered length in (-inf, x)
        k = np.searchsorted(m_start, x, side="right") - 1
        kk = np.maximum(k, 0)
        inside = np.clip(x - m_start[kk], 0, m_end[kk] - m_start[kk])
        return np.where(k >= 0, before[kk] + inside, 0)

    return upto(ts + dur) - upto(ts)
