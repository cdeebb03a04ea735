"""Achieved FLOP/s and bytes/s per operator shape and per kernel, MFU and % of roofline.

Each GPU activity is charged to the outermost modelled operator (:mod:`opmodels`) enclosing
its launch, so a convolution's layout transposes and bias add count as its time, as in
TraceLens. The kernel time of one call is the busy time of the activity charged to it.

- ``tflops_per_s`` (``tb_per_s``) of a shape: the mean over its calls of FLOPs (bytes) /
  kernel time (TraceLens' ``TFLOPS/s_mean``).
- ``pct_of_peak``: that rate over the device's peak for the call's precision.
- roofline: the attainable rate at the shape's arithmetic intensity I (FLOPs per byte) is
  ``min(peak, I * bandwidth)``; ``pct_of_roofline`` is the achieved rate over it, ``bound``
  says which side of the ridge the shape is on.
- ``mfu``: the modelled FLOPs, each precision at its own peak, as a share of what the device
  could do over the whole GPU timeline: ``sum(flops_p / peak_p) / total``; ``mfu_busy`` the
  same over the busy time only. Unmodelled work (elementwise, norms, backward ops) counts
  as time but not as FLOPs, so MFU is a lower bound.
- per kernel: a call's FLOPs and bytes are credited to its longest kernel.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from aiflame.analysis.calls import name_mask, op_calls
from aiflame.analysis.devices import DeviceSpec
from aiflame.analysis.opmodels import MODELLED, OpCost, op_cost
from aiflame.analysis.schema import (
    Efficiency,
    KernelRate,
    Modelled,
    PrecisionStat,
    ShapeRate,
    TimeSum,
)
from aiflame.model.trace import TraceData
from aiflame.transforms.correlate import busy_time, outermost_marked


def charged_op(t: TraceData, launch: np.ndarray | None = None) -> np.ndarray:
    """Per GPU activity: the outermost modelled operator enclosing its launch, or -1.

    ``launch``: the slice to start from per activity (default: its launch).
    """
    out = np.full(t.gpu_ts.size, -1, dtype=np.int64)
    if t.cpu_ts.size == 0:
        return out
    modelled = t.cpu_is_op & name_mask(t, lambda n: n in MODELLED)[t.cpu_name]
    start = t.gpu_launch if launch is None else launch
    has = start >= 0
    out[has] = outermost_marked(t.cpu_parent, modelled)[start[has]]
    return out


def modelled_calls(
    t: TraceData, launch: np.ndarray | None = None
) -> list[tuple[int, OpCost, int, int]]:
    """(op slice, cost, kernel time ns, longest activity) of each modelled call with GPU
    work; a captured op replayed N times is N calls (:func:`calls.op_calls`)."""
    op = charged_op(t, launch)
    idx = np.nonzero(op >= 0)[0]
    if idx.size == 0:
        return []
    call = op_calls(t, op)[idx]
    order = np.argsort(call, kind="stable")
    idx, call = idx[order], call[order]
    ops = op[idx]
    starts = np.flatnonzero(np.r_[True, call[1:] != call[:-1]])
    ends = np.r_[starts[1:], call.size]
    out: list[tuple[int, OpCost, int, int]] = []
    cache: dict[tuple[int, int], OpCost | None] = {}
    for lo, hi in zip(starts.tolist(), ends.tolist(), strict=True):
        o = int(ops[lo])
        if o not in t.op_shapes:
            continue
        dims, types = t.op_shapes[o]
        key = (id(dims), int(t.cpu_name[o]))  # shapes are shared objects when equal
        if key in cache:
            cost = cache[key]
        else:
            cost = cache[key] = op_cost(t.names[key[1]], dims, types, t.op_concrete.get(o))
        if cost is None:
            continue
        mine = idx[lo:hi]
        ns = int(t.gpu_dur[mine[0]]) if hi - lo == 1 else busy_time(t.gpu_ts[mine], t.gpu_dur[mine])
        out.append((o, cost, ns, int(mine[np.argmax(t.gpu_dur[mine])])))
    return out


def _roofline(
    flops: int, moved: int | None, rate: float | None, peak: float | None, bw: float | None
) -> dict[str, Any]:
    out: dict[str, Any] = {"peak_tflops": peak, "pct_of_peak": None,
                           "attainable_tflops_per_s": None, "pct_of_roofline": None,
                           "bound": None}  # fmt: skip
    if peak and rate is not None:
        out["pct_of_peak"] = rate / peak
    if peak and bw and moved:
        intensity = flops / moved
        attainable = min(peak, intensity * bw)
        out["attainable_tflops_per_s"] = attainable
        out["bound"] = "memory" if intensity * bw < peak else "compute"
        if rate is not None:
            out["pct_of_roofline"] = rate / attainable
    return out


def _shape_rows(calls: list, spec: DeviceSpec | None) -> list[ShapeRate]:
    groups: dict[OpCost, list[int]] = {}
    for _, cost, ns, _ in calls:
        groups.setdefault(cost, []).append(ns)
    rows = []
    for cost, times in groups.items():
        ns = np.asarray(times, dtype=np.float64)
        pos = ns[ns > 0]
        rate = float(np.mean(cost.flops / (pos * 1e3))) if pos.size else None
        tbs = float(np.mean(cost.bytes / (pos * 1e3))) if pos.size and cost.bytes else None
        peak = spec.peak(cost.precision) if spec else None
        bw = spec.tb_per_s if spec else None
        rows.append(
            ShapeRate(
                family=cost.family, op=cost.op,
                params={k: list(v) if isinstance(v, tuple) else v for k, v in cost.params},
                dtype=cost.dtype, precision=cost.precision, calls=len(times),
                flops=cost.flops, bytes=cost.bytes,
                flops_per_byte=cost.flops / cost.bytes if cost.bytes else None,
                kernel_time_us=TimeSum(sum=float(ns.sum()) / 1e3, mean=float(ns.mean()) / 1e3),
                tflops_per_s=rate, tb_per_s=tbs,
                **_roofline(cost.flops, cost.bytes, rate, peak, bw),
            )
        )  # fmt: skip
    rows.sort(key=lambda r: -r.kernel_time_us.sum)
    return rows


def _kernel_rows(t: TraceData, calls: list) -> list[KernelRate]:
    acc: dict[int, list[float]] = {}
    for _, cost, _, j in calls:
        e = acc.setdefault(int(t.gpu_name[j]), [0.0, 0.0, 0.0, 0, 0])
        e[0] += cost.flops
        e[1] += cost.bytes or 0
        e[2] += float(t.gpu_dur[j])
        e[3] += 1
        e[4] += 0 if cost.bytes else 1
    rows = []
    for name, (flops, moved, ns, n, unknown) in acc.items():
        rows.append(
            KernelRate(
                name=t.names[name], launches=int(n), flops=flops,
                bytes=None if unknown else moved, time_us=ns / 1e3,
                tflops_per_s=flops / (ns * 1e3) if ns else None,
                tb_per_s=moved / (ns * 1e3) if ns and not unknown else None,
            )
        )  # fmt: skip
    rows.sort(key=lambda r: -r.time_us)
    return rows


def efficiency(
    t: TraceData,
    spec: DeviceSpec | None,
    total_ns: int,
    busy_ns: int,
    top: int = 20,
    launch: np.ndarray | None = None,
) -> Efficiency:
    """Per shape and per kernel rates, totals by precision and MFU (None without a spec).

    ``launch``: the slice each activity's op is looked up from (a replayed graph's kernels:
    their captured launch).
    """
    calls = modelled_calls(t, launch)
    flops_by: dict[str | None, list[float]] = {}
    for _, cost, call_ns, _ in calls:
        e = flops_by.setdefault(cost.precision, [0.0, 0.0])
        e[0] += cost.flops
        e[1] += call_ns
    by_precision = {}
    at_peak = 0.0  # seconds the modelled FLOPs would take at peak
    unpriced = 0.0
    for p, (flops, ns) in flops_by.items():
        peak = spec.peak(p) if spec else None
        rate = flops / (ns * 1e3) if ns else None
        by_precision[str(p)] = PrecisionStat(
            flops=flops, kernel_time_us=ns / 1e3, tflops_per_s=rate, peak_tflops=peak,
            pct_of_peak=rate / peak if rate is not None and peak else None,
        )  # fmt: skip
        if peak:
            at_peak += flops / (peak * 1e12)
        else:
            unpriced += flops
    modelled_ns = sum(ns for _, _, ns, _ in calls)
    total_flops = sum(c.flops for _, c, _, _ in calls)
    priced = spec is not None and calls and unpriced < total_flops
    return Efficiency(
        device=spec.record() if spec else None,
        modelled=Modelled(
            calls=len(calls),
            flops=total_flops,
            kernel_time_us=modelled_ns / 1e3,
            share_of_busy=modelled_ns / busy_ns if busy_ns else None,
            flops_without_peak=unpriced,
        ),
        achieved_tflops_per_s=total_flops / (modelled_ns * 1e3) if modelled_ns else None,
        mfu=at_peak / (total_ns / 1e9) if priced and total_ns else None,
        mfu_busy=at_peak / (busy_ns / 1e9) if priced and busy_ns else None,
        by_precision=by_precision,
        ops=_shape_rows(calls, spec)[:top],
        kernels=_kernel_rows(t, calls)[:top],
    )
