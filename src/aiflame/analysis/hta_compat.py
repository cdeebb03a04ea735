"""Meta HTA's (Holistic Trace Analysis) definitions, for numbers that compare one to one.

- :func:`temporal_breakdown`: HTA ``get_temporal_breakdown``: over all GPU activity, ``total``
  = last end - first start, ``idle`` = total - union of all activity, ``compute`` = union of
  the kernels HTA calls computation (not ``^nccl.*Kernel``, not ``^Memcpy``/``^Memset``/
  ``^dma``, no ``Memcpy``/``Memset``/``Sync`` in the name), ``non_compute`` = the rest of the
  busy time (copies, memsets, collectives).
- :func:`idle_by_stream`: HTA ``get_idle_time_breakdown``: per stream, each activity's gap to
  the previous activity *on that stream* (ts order) is ``host_wait`` when its launch call
  started after that previous activity ended, else ``kernel_wait`` when the gap is under
  ``consecutive_kernel_delay``, else ``other``. HTA documents the delay as 30 ns but compares
  it with microsecond timestamps, so it acts as 30 us; we use 30 us.
- :func:`step_filter`: with two or more ``ProfilerStep`` annotations HTA keeps only the GPU
  activity launched before the last step began (the last step is usually cut short).

HTA rounds each event to whole microseconds (start up, end down) unless
``HTA_DISABLE_NS_ROUNDING=1``; these functions work on the exact times.
"""

from __future__ import annotations

import re

import numpy as np

from aiflame.analysis.calls import name_mask
from aiflame.analysis.schema import HtaStreamIdle, HtaTemporal
from aiflame.model.trace import TraceData
from aiflame.transforms.correlate import busy_time
from aiflame.transforms.gpu_idle import KERNEL_WAIT_US  # HTA's consecutive_kernel_delay

__all__ = ["KERNEL_WAIT_US", "hta_view", "idle_by_stream", "step_filter", "temporal_breakdown"]

_NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)|^Memcpy|^Memset|^dma")


def is_hta_compute(name: str) -> bool:
    return _NOT_COMPUTE.match(name) is None


def temporal_breakdown(t: TraceData, left_out: int = 0) -> HtaTemporal | None:
    """HTA's idle / compute / non-compute / total (``kernel_time``) in microseconds.

    ``left_out``: how many activities :func:`step_filter` took out of ``t`` (reported)."""
    if t.gpu_ts.size == 0:
        return None
    total = int((t.gpu_ts + t.gpu_dur).max() - t.gpu_ts.min())
    busy = busy_time(t.gpu_ts, t.gpu_dur)
    comp = name_mask(t, is_hta_compute, t.gpu_name)[t.gpu_name]
    compute = busy_time(t.gpu_ts[comp], t.gpu_dur[comp])
    return HtaTemporal(
        idle_us=(total - busy) / 1e3,
        compute_us=compute / 1e3,
        non_compute_us=(busy - compute) / 1e3,
        total_us=total / 1e3,
        left_out_activities=left_out,
    )


def idle_by_stream(t: TraceData, kernel_wait_us: float = KERNEL_WAIT_US) -> list[HtaStreamIdle]:
    """HTA's idle-time categories per stream, in microseconds (streams in first-use order)."""
    if t.gpu_ts.size == 0:
        return []
    stream = t.gpu_stream if t.gpu_stream is not None else np.zeros(t.gpu_ts.size, np.int64)
    out = []
    order = np.lexsort((t.gpu_ts, stream))
    first_use = np.unique(stream, return_index=True)
    for s in first_use[0][np.argsort(first_use[1])].tolist():
        idx = order[stream[order] == s]
        if idx.size < 2:
            out.append(_stream_row(t, s, 0, 0, 0))
            continue
        prev_end = (t.gpu_ts[idx] + t.gpu_dur[idx])[:-1]
        nxt = idx[1:]
        gap = t.gpu_ts[nxt] - prev_end  # may be negative where activities overlap
        launch = t.gpu_launch[nxt]
        host = np.zeros(nxt.size, dtype=bool)
        if t.cpu_ts.size:
            host = (launch >= 0) & (t.cpu_ts[np.maximum(launch, 0)] > prev_end)
        short = ~host & (gap < kernel_wait_us * 1e3)
        other = ~host & ~short
        out.append(_stream_row(t, s, gap[host].sum(), gap[short].sum(), gap[other].sum()))
    return out


def _stream_row(t: TraceData, s: int, host: int, kernel: int, other: int) -> HtaStreamIdle:
    return HtaStreamIdle(
        stream=t.names[s] if t.gpu_stream is not None else None,
        host_wait_us=float(host) / 1e3,
        kernel_wait_us=float(kernel) / 1e3,
        other_us=float(other) / 1e3,
    )


def hta_view(t: TraceData) -> tuple[TraceData, int]:
    """The trace as HTA analyses it (:func:`step_filter` applied), and how many GPU
    activities the filter left out."""
    keep = step_filter(t)
    dropped = int(keep.size - np.count_nonzero(keep))
    return (t.select_gpu(keep) if dropped else t), dropped


def step_filter(t: TraceData) -> np.ndarray:
    """GPU activities HTA keeps: all, or with 2+ ProfilerStep names those launched before
    the last step started."""
    keep = np.ones(t.gpu_ts.size, dtype=bool)
    steps = name_mask(t, lambda n: "ProfilerStep" in n)
    if np.count_nonzero(steps) < 2 or t.cpu_ts.size == 0:
        return keep
    on_cpu = steps[t.cpu_name]
    if not np.any(on_cpu):
        return keep
    last = t.cpu_ts[on_cpu].max()
    launch = t.gpu_launch
    return (launch >= 0) & (t.cpu_ts[np.maximum(launch, 0)] < last)
