"""Assemble the analysis of traces into the JSON report (schema: docs/analyze.md)."""

from __future__ import annotations

from typing import Any

import numpy as np

from aiflame.analysis import gemm, insights, kernels
from aiflame.analysis.timeline import time_breakdown
from aiflame.analysis.trace import TraceData

SCHEMA_VERSION = 1


def analyze_rank(t: TraceData, top: int = 20) -> dict[str, Any]:
    """The report of one trace (one rank): per GPU and, over all its GPUs, the same."""
    notes: list[str] = []
    devices = {}
    for d in np.unique(t.gpu_device).tolist():
        m = t.gpu_device == d
        b = time_breakdown(t.gpu_ts[m], t.gpu_dur[m], t.gpu_kind[m])
        devices[t.names[d]] = b.to_json_us()
    tb = time_breakdown(t.gpu_ts, t.gpu_dur, t.gpu_kind)
    if t.gpu_ts.size == 0:
        notes.append("no GPU activity in this trace: no time breakdown, kernels or GEMMs")
    if not np.any(t.cpu_is_op):
        notes.append(
            "no CPU operators in this trace (GPU-only trace?): no op breakdown, no GEMM shapes"
        )
    elif not t.op_shapes:
        notes.append("no recorded input shapes (record_shapes=False): no GEMM FLOPs")
    unlinked = int(np.count_nonzero(t.gpu_launch < 0))
    if unlinked and t.cpu_ts.size:
        notes.append(f"{unlinked:,} GPU activities have no launch in the trace")
    return {
        "path": t.path,
        "rank": t.rank,
        "devices": [d.get("name") for d in t.device_info],
        "time_breakdown": tb.to_json_us(),
        "time_breakdown_by_device": devices,
        "top_kernels": [r.to_json() for r in kernels.top_kernels(t, top)],
        "top_ops": [r.to_json() for r in kernels.top_ops(t, top)],
        "short_kernels": kernels.short_kernels(t).to_json(),
        "gemm": [r.to_json() for r in gemm.gemm_table(t)],
        "findings": [f.to_json() for f in insights.find(t)],
        "notes": notes,
    }


def analyze(traces: list[TraceData], top: int = 20) -> dict[str, Any]:
    ranks = [analyze_rank(t, top) for t in traces]
    return {"schema_version": SCHEMA_VERSION, "ranks": ranks}
