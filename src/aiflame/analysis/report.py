"""Assemble the analysis of traces into the report (schema: :mod:`aiflame.analysis.schema`)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import msgspec
import numpy as np

from aiflame.analysis import (
    categories,
    comm,
    devices,
    gemm,
    hta_compat,
    insights,
    kernels,
    throughput,
)
from aiflame.analysis.causes import cause_rows, stacks_by_category
from aiflame.analysis.hta_compat import KERNEL_WAIT_US
from aiflame.analysis.idle import classify
from aiflame.analysis.job import job_summary
from aiflame.analysis.schema import (
    SCHEMA_VERSION,
    GraphReplays,
    Idle,
    OutsideWindow,
    RankReport,
    Report,
)
from aiflame.analysis.timeline import time_breakdown
from aiflame.model.trace import TraceData
from aiflame.transforms.graph_capture import graph_launches


@dataclass
class Options:
    """What the command line can change (``aiflame analyze`` flags)."""

    top: int = 20
    device: str | None = None  # --device: a name from the table of known GPUs
    peak_tflops: dict[str, float] | None = None  # --peak-tflops, by precision ("*": all)
    peak_tb_per_s: float | None = None  # --peak-bandwidth
    batch_size: int | None = None  # --batch-size
    # --comm-kernels: patterns (any case) of kernels that are communication
    comm_kernels: list[str] = field(default_factory=list)


# What an nsys export lacks, in its own words rather than a Kineto trace's.
NSYS_NO_SHAPES = (
    "an Nsight Systems export records no operator input shapes or dtypes: no FLOPs, "
    "TFLOP/s, MFU or roofline"
)
NSYS_NO_OPS = (
    "no NVTX ranges in this export, which stand for operators (annotate the code with NVTX, "
    "e.g. torch.autograd.profiler.emit_nvtx(), and record with --trace=cuda,nvtx)"
)


def _unavailable(t: TraceData, spec_why: str | None, ctx: insights.Context) -> dict[str, str]:
    """What cannot be said about this trace, and why (key -> reason)."""
    out: dict[str, str] = {}
    if t.gpu_ts.size == 0:
        no_gpu = "no GPU activity in this trace (CPU-only trace?)"
        for key in ("time_breakdown", "idle", "kernels", "launch", "efficiency", "mfu"):
            out[key] = no_gpu
        return out
    nsys = t.format == "nsys"
    if t.cpu_ts.size == 0 or not np.any(t.cpu_is_op):
        why = NSYS_NO_OPS if nsys else "no CPU operators in this trace (GPU-only trace?)"
        out["ops"] = why
        out["efficiency"] = NSYS_NO_SHAPES if nsys else why + ": no shapes to compute FLOPs from"
    elif not t.op_shapes:
        out["efficiency"] = (
            NSYS_NO_SHAPES if nsys else "no recorded input shapes (record_shapes=False): no FLOPs"
        )
    if t.cpu_ts.size == 0 or not np.any(t.gpu_launch >= 0):
        why = "no GPU activity is linked to a launch call in this trace"
        out["launch"] = why
        out["idle_causes"] = why + ": idle time cannot be classified beyond 'unlinked'"
        out["stacks"] = why
    if "efficiency" not in out:
        if spec_why:
            out["mfu"] = spec_why
            out["roofline"] = spec_why
        elif ctx.efficiency.modelled.calls == 0:
            out["mfu"] = "no modelled operator (GEMM, convolution, attention) with recorded shapes"
        elif ctx.spec is not None and ctx.spec.tb_per_s is None:
            out["roofline"] = (
                f"no memory bandwidth known for '{ctx.spec.name}'; give --peak-bandwidth"
            )
    return out


def _notes(t: TraceData, outside: OutsideWindow | None, graphs: GraphReplays | None) -> list[str]:
    notes: list[str] = []
    if t.gpu_ts.size == 0:
        notes.append("no GPU activity in this trace: no time breakdown, kernels or GEMMs")
    if t.format == "kineto":
        if not np.any(t.cpu_is_op):
            notes.append(
                "no CPU operators in this trace (GPU-only trace?): no op breakdown, no GEMM shapes"
            )
        elif not t.op_shapes:
            notes.append("no recorded input shapes (record_shapes=False): no GEMM FLOPs")
    if outside is not None:
        notes.append(
            f"{outside.activities:,} GPU activities ({outside.gpu_time_us / 1e3:.3f} ms, "
            f"{outside.share_of_busy:.1%} of the busy time) were launched outside the trace "
            "(before the profiler's window): counted in the breakdown here; TraceLens leaves "
            "them out of its own"
        )
    if graphs is not None and graphs.attributed_us < graphs.gpu_time_us:
        left = graphs.gpu_time_us - graphs.attributed_us
        notes.append(
            f"{left / 1e3:.3f} ms of GPU time ({left / graphs.gpu_time_us:.0%} of the graph "
            "replays) ran in CUDA/HIP graph replays with no operator: give the capture trace "
            "(--capture-trace) to attribute it"
        )
    notes.extend(t.notes)
    return notes


def _outside(t: TraceData, busy_ns: int) -> OutsideWindow | None:
    """Activity launched outside the trace, when the trace has launches at all."""
    if t.cpu_ts.size == 0 or not np.any(t.gpu_launch >= 0):
        return None
    m = t.gpu_launch < 0
    if not np.any(m):
        return None
    ns = float(t.gpu_dur[m].sum())
    return OutsideWindow(
        activities=int(m.sum()), gpu_time_us=ns / 1e3, share_of_busy=ns / busy_ns if busy_ns else 0
    )


def _graphs(t: TraceData, capture: str | None) -> GraphReplays | None:
    replayed = graph_launches(t)
    if not np.any(replayed):
        return None
    total = float(t.gpu_dur.sum())
    ns = float(t.gpu_dur[replayed].sum())
    attributed = 0.0
    if t.gpu_origin is not None:
        attributed = float(t.gpu_dur[replayed & (t.gpu_origin >= 0)].sum())
    return GraphReplays(
        launches=int(np.unique(t.gpu_launch[replayed]).size),
        activities=int(replayed.sum()),
        gpu_time_us=ns / 1e3,
        share_of_gpu_time=ns / total if total else 0.0,
        attributed_us=attributed / 1e3,
        capture=capture,
    )


def idle_analysis(c: insights.Context | TraceData) -> Idle:
    """The idle section of a trace's report: categories, causes and their stacks."""
    ctx = c if isinstance(c, insights.Context) else insights.Context(c)
    t, g, e = ctx.t, ctx.gaps, ctx.explained
    stacks = stacks_by_category(t, g, e)
    return classify(
        t, g, stacks, cause_rows(t, e, g.start.size, ctx.breakdown.idle), KERNEL_WAIT_US
    )


def display_name(t: TraceData) -> str:
    """``rank 0``, or the file's name for a trace that names no rank."""
    return f"rank {t.rank}" if t.rank is not None else os.path.basename(t.path) or t.path


def analyze_rank(
    t: TraceData, top: int = 20, options: Options | None = None, capture: str | None = None
) -> RankReport:
    """The report of one trace (one rank): per GPU and, over all its GPUs, the same."""
    o = options or Options(top=top)
    comm.apply(t, comm.compile_patterns(o.comm_kernels))
    spec, spec_why = devices.resolve(t.device_info, o.device, o.peak_tflops, o.peak_tb_per_s)
    ctx = insights.Context(t, spec)
    b = ctx.breakdown
    by_device = {}
    for d in np.unique(t.gpu_device).tolist():
        m = t.gpu_device == d
        by_device[t.names[d]] = time_breakdown(t.gpu_ts[m], t.gpu_dur[m], t.gpu_kind[m]).to_record()
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
        full = ctx.efficiency
        eff = msgspec.structs.replace(full, ops=full.ops[: o.top], kernels=full.kernels[: o.top])
    idle = idle_analysis(ctx) if has_gpu else None
    outside = _outside(t, b.busy)
    graphs = _graphs(t, capture)
    hta_t, left_out = hta_compat.hta_view(t)
    return RankReport(
        path=t.path,
        rank=t.rank,
        name=display_name(t),
        format=t.format,
        devices=[devices.device_name(d) for d in used_devices(t)],
        workload=ctx.workload,
        time_breakdown=b.to_record(),
        time_breakdown_by_device=by_device,
        launch_not_in_trace=outside,
        hta_temporal_breakdown=hta_compat.temporal_breakdown(hta_t, left_out),
        idle=idle,
        idle_by_stream_hta=hta_compat.idle_by_stream(hta_t),
        op_categories=categories.summary(t, ctx.category),
        top_kernels=kernels.top_kernels(t, o.top),
        top_ops=kernels.top_ops(t, o.top),
        top_ops_unattributed_us=kernels.unattributed_us(t),
        top_ops_unattributed_why=kernels.unattributed_why(t, graph_launches(t)),
        graph_replays=graphs,
        short_kernels=kernels.short_kernels(t),
        launch=ctx.launch,
        sync=ctx.sync,
        memory_traffic=ctx.memory,
        gemm=gemm.gemm_table(t),
        efficiency=eff,
        per_sample=per_sample,
        findings=insights.find(ctx),
        unavailable=unavailable,
        notes=_notes(t, outside, graphs),
    )


def analyze(
    traces: list[TraceData],
    top: int = 20,
    options: Options | None = None,
    captures: list[str | None] | None = None,
) -> Report:
    """The report of traces given as :class:`TraceData` (one per rank).

    ``captures[i]``: the capture trace already attached to trace ``i`` (its path, for the
    report), if any.
    """
    o = options or Options(top=top)
    caps = captures or [None] * len(traces)
    ranks = [analyze_rank(t, o.top, o, cap) for t, cap in zip(traces, caps, strict=True)]
    return Report(schema_version=SCHEMA_VERSION, ranks=ranks, job=job_summary(ranks))


def used_devices(t: TraceData) -> list[dict]:
    """The ``deviceProperties`` entries of the GPUs this trace ran work on (a trace lists
    every GPU of the machine, though a rank uses one); all of them when none can be told."""
    ids = {t.names[i] for i in np.unique(t.gpu_device).tolist()}
    used = [d for d in t.device_info if str(d.get("id")) in ids]
    return used or list(t.device_info)
