"""Assemble the analysis of traces into the JSON report (schema: docs/analyze.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from aiflame.analysis import devices, gemm, hta_compat, insights, kernels, throughput
from aiflame.analysis.job import job_summary
from aiflame.analysis.timeline import time_breakdown
from aiflame.analysis.trace import TraceData

SCHEMA_VERSION = 1


@dataclass
class Options:
    """What the command line can change (``aiflame analyze`` flags)."""

    top: int = 20
    device: str | None = None  # --device: a name from the table of known GPUs
    peak_tflops: dict[str, float] | None = None  # --peak-tflops, by precision ("*": all)
    peak_tb_per_s: float | None = None  # --peak-bandwidth
    batch_size: int | None = None  # --batch-size


def _unavailable(t: TraceData, spec_why: str | None, ctx: insights.Context) -> dict[str, str]:
    """What cannot be said about this trace, and why (key -> reason)."""
    out: dict[str, str] = {}
    if t.gpu_ts.size == 0:
        no_gpu = "no GPU activity in this trace (CPU-only trace?)"
        for key in ("time_breakdown", "idle", "kernels", "launch", "efficiency", "mfu"):
            out[key] = no_gpu
        return out
    if t.cpu_ts.size == 0 or not np.any(t.cpu_is_op):
        why = "no CPU operators in this trace (GPU-only trace?)"
        out["ops"] = why
        out["efficiency"] = why + ": no shapes to compute FLOPs from"
    elif not t.op_shapes:
        out["efficiency"] = "no recorded input shapes (record_shapes=False): no FLOPs"
    if not np.any(t.gpu_launch >= 0):
        why = "no GPU activity is linked to a launch call in this trace"
        out["launch"] = why
        out["idle_causes"] = why + ": idle time cannot be classified beyond 'unlinked'"
        out["stacks"] = why
    if spec_why and "efficiency" not in out:
        out["mfu"] = spec_why
        out["roofline"] = spec_why
    elif "efficiency" not in out and ctx.efficiency["modelled"]["calls"] == 0:
        out["mfu"] = "no modelled operator (GEMM, convolution, attention) with recorded shapes"
    elif ctx.spec is not None and ctx.spec.tb_per_s is None:
        out["roofline"] = f"no memory bandwidth known for '{ctx.spec.name}'; give --peak-bandwidth"
    return out


def _notes(t: TraceData) -> list[str]:
    notes: list[str] = []
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
    return notes


def analyze_rank(t: TraceData, top: int = 20, options: Options | None = None) -> dict[str, Any]:
    """The report of one trace (one rank): per GPU and, over all its GPUs, the same."""
    o = options or Options(top=top)
    spec, spec_why = devices.resolve(t.device_info, o.device, o.peak_tflops, o.peak_tb_per_s)
    ctx = insights.Context(t, spec)
    b = ctx.breakdown
    by_device = {}
    for d in np.unique(t.gpu_device).tolist():
        m = t.gpu_device == d
        b_d = time_breakdown(t.gpu_ts[m], t.gpu_dur[m], t.gpu_kind[m])
        by_device[t.names[d]] = b_d.to_json_us()
    has_gpu = t.gpu_ts.size > 0
    unavailable = _unavailable(t, spec_why, ctx)
    per_sample = None
    if o.batch_size and has_gpu:
        per_sample, why = throughput.per_sample(t, o.batch_size, b.total, b.busy)
        if why:
            unavailable["input_bytes"] = why
    elif has_gpu:
        unavailable["per_sample"] = "batch size not given (--batch-size)"
    eff = None
    if "efficiency" not in unavailable:
        eff = dict(ctx.efficiency)
        eff["ops"], eff["kernels"] = eff["ops"][: o.top], eff["kernels"][: o.top]
    return {
        "path": t.path,
        "rank": t.rank,
        "devices": [d.get("name") for d in used_devices(t)],
        "time_breakdown": b.to_json_us(),
        "time_breakdown_by_device": by_device,
        "hta_temporal_breakdown": hta_compat.temporal_breakdown(t),
        "idle": ctx.idle if has_gpu else None,
        "idle_by_stream_hta": hta_compat.idle_by_stream(t),
        "top_kernels": [r.to_json() for r in kernels.top_kernels(t, o.top)],
        "top_ops": [r.to_json() for r in kernels.top_ops(t, o.top)],
        "short_kernels": kernels.short_kernels(t).to_json(),
        "launch": ctx.launch,
        "sync": ctx.sync,
        "memory_traffic": ctx.memory,
        "gemm": [r.to_json() for r in gemm.gemm_table(t)],
        "efficiency": eff,
        "per_sample": per_sample,
        "findings": [f.to_json() for f in insights.find(ctx)],
        "unavailable": unavailable,
        "notes": _notes(t),
    }


def analyze(
    traces: list[TraceData], top: int = 20, options: Options | None = None
) -> dict[str, Any]:
    o = options or Options(top=top)
    ranks = [analyze_rank(t, o.top, o) for t in traces]
    return {"schema_version": SCHEMA_VERSION, "ranks": ranks, "job": job_summary(ranks)}


def used_devices(t: TraceData) -> list[dict[str, Any]]:
    """The ``deviceProperties`` entries of the GPUs this trace ran work on (a trace lists
    every GPU of the machine, though a rank uses one); all of them when none can be told."""
    ids = {t.names[i] for i in np.unique(t.gpu_device).tolist()}
    used = [d for d in t.device_info if str(d.get("id")) in ids]
    return used or list(t.device_info)
