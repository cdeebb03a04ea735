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

import re
from dataclasses import asdict, dataclass

import numpy as np

from aiflame.analysis.trace import Kind
from aiflame.transforms.correlate import busy_time

# Collective kernels by name, as TraceLens matches them (substring, any case).
COMM_PATTERN = re.compile(r"nccl|rccl|cross_device_reduce", re.IGNORECASE)


def is_communication(name: str) -> bool:
    return COMM_PATTERN.search(name) is not None


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

    def to_json_us(self) -> dict[str, float]:
        """The fields in microseconds (the JSON schema's unit)."""
        return {k: v / 1000.0 for k, v in asdict(self).items()}


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
