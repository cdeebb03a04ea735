"""Insight rules: each finds one anti-pattern in a trace and says what it costs and what to try.

A rule is a small function ``rule(c: Context) -> Finding | None`` listed in ``RULES``; the
:class:`Context` holds the trace and the analyses already computed from it (idle gaps,
launches, syncs, copies, efficiency), so rules only read numbers. To add one, write the
function (its docstring is its documentation: pattern, evidence, cost estimate, fix) and
append it to ``RULES``. Costs are estimates in microseconds of GPU time that the pattern
leaves idle or wastes, so findings can be ranked; severity is the cost's share of the GPU
timeline.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from aiflame.analysis import idle, launch, memcpy, sync
from aiflame.analysis.devices import DeviceSpec
from aiflame.analysis.efficiency import efficiency
from aiflame.analysis.stacks import stack_of, top_stacks
from aiflame.analysis.timeline import TimeBreakdown, time_breakdown
from aiflame.analysis.trace import TraceData

# Severity from the estimated cost as a share of the GPU timeline.
HIGH, MEDIUM = 0.10, 0.03
REPORT_FROM = 0.01  # smaller costs are not reported
HOST_WAIT_SHARE = 0.5  # host_wait_dominated: of the idle time
IDLE_SHARE = 0.2  # host_wait_dominated: of the timeline
SMALL_COPIES_MIN = 20  # many_small_copies: at least this many
ROOFLINE_LOW = 0.3  # below_roofline: shapes under this share of their roofline

__all__ = ["RULES", "Context", "Finding", "find", "stack_of"]


@dataclass
class Finding:
    rule: str
    severity: str  # "high", "medium", "low"
    title: str
    cost_us: float  # estimated time the pattern costs
    fix: str
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Context:
    """One trace and its analyses, computed on first use and shared by the rules."""

    def __init__(self, t: TraceData, spec: DeviceSpec | None = None) -> None:
        self.t = t
        self.spec = spec

    @cached_property
    def breakdown(self) -> TimeBreakdown:
        return time_breakdown(self.t.gpu_ts, self.t.gpu_dur, self.t.gpu_kind)

    @property
    def total_ns(self) -> int:
        return self.breakdown.total

    @cached_property
    def gaps(self) -> dict[str, np.ndarray]:
        return idle.gap_table(self.t)

    @cached_property
    def idle(self) -> dict[str, Any]:
        return idle.classify(self.t)

    @cached_property
    def launch(self) -> dict[str, Any] | None:
        return launch.launch_overhead(self.t, self.gaps)

    @cached_property
    def sync(self) -> dict[str, Any] | None:
        return sync.sync_stalls(self.t, self.gaps)

    @cached_property
    def memory(self) -> dict[str, Any] | None:
        return memcpy.memory_traffic(self.t)

    @cached_property
    def efficiency(self) -> dict[str, Any]:
        b = self.breakdown
        return efficiency(self.t, self.spec, b.total, b.busy, top=10_000)


def _severity(cost_ns: float, total_ns: float) -> str:
    share = cost_ns / total_ns if total_ns else 0.0
    return "high" if share >= HIGH else "medium" if share >= MEDIUM else "low"


def _finding(c: Context, rule: str, title: str, cost_us: float, fix: str, **ev: Any) -> Finding:
    total = c.total_ns
    ev["share_of_gpu_time"] = cost_us * 1e3 / total if total else None
    return Finding(rule, _severity(cost_us * 1e3, total), title, cost_us, fix, ev)


def _worth(c: Context, cost_us: float) -> bool:
    return c.total_ns > 0 and cost_us * 1e3 >= REPORT_FROM * c.total_ns


def launch_bound(c: Context) -> Finding | None:
    """Launch-bound phases: the CPU cannot launch kernels as fast as the GPU runs them.

    Pattern: stretches of the timeline where most launch calls take longer than the work
    they launch and the GPU idles most of the time (:func:`launch.launch_bound_phases`).
    Evidence: phases, their launches and kernels shorter than their launch, median launch
    vs kernel duration, the launching stacks. Cost: the host-wait idle inside the phases.
    Fix: CUDA graphs (``torch.compile(mode="reduce-overhead")`` or ``torch.cuda.graphs``),
    fusing small ops (``torch.compile``), larger batches.
    """
    L = c.launch
    if L is None or not L["launch_bound"]["phases"]:
        return None
    cost = L["launch_bound"]["host_wait_us"]
    if not _worth(c, cost):
        return None
    first = L["launch_bound_phases"][0]
    return _finding(
        c,
        "launch_bound",
        "launch-bound: kernels are shorter than their launches and the GPU waits",
        cost,
        "capture the step in CUDA graphs (torch.compile(mode='reduce-overhead') or "
        "torch.cuda.graphs), fuse small ops with torch.compile, or raise the batch size",
        phases=L["launch_bound"]["phases"],
        phase_time_us=L["launch_bound"]["time_us"],
        host_wait_idle_us=cost,
        launches=L["launches"],
        shorter_than_launch=L["shorter_than_launch"],
        median_launch_us=L["launch_us"]["median"],
        median_gpu_us=L["gpu_us"]["median"],
        longest_phase={k: v for k, v in first.items() if k != "top_stacks"},
        top_stacks=first["top_stacks"],
    )


def host_wait_dominated(c: Context) -> Finding | None:
    """The GPU idles mostly because the CPU is busy elsewhere (not launching).

    Pattern: idle is at least ``IDLE_SHARE`` of the timeline and host waits are at least
    ``HOST_WAIT_SHARE`` of the idle time. Evidence: the idle categories and what the
    launching thread was doing in the middle of the gaps (data loading, Python, logging).
    Cost: the host-wait idle outside launch-bound phases (those are ``launch_bound``'s).
    Fix: look at these stacks in the flame graph; move data loading and preprocessing to
    ``DataLoader`` workers (``num_workers``, ``pin_memory``, ``prefetch_factor``), cut
    Python overhead in the step, overlap host work with GPU work.
    """
    i = c.idle
    total = c.total_ns / 1e3
    host = i["categories"]["host_wait"]["time_us"]
    if not total or i["total_us"] < IDLE_SHARE * total or host < HOST_WAIT_SHARE * i["total_us"]:
        return None
    in_phases = c.launch["launch_bound"]["host_wait_us"] if c.launch else 0.0
    cost = host - in_phases
    if not _worth(c, cost):
        return None
    return _finding(
        c,
        "host_wait_dominated",
        "the GPU mostly waits for the CPU",
        cost,
        "find what the CPU does in these stacks (flame graph); load and preprocess data in "
        "DataLoader workers (num_workers, pin_memory, prefetch_factor), cut Python overhead "
        "in the step, overlap host work with GPU work",
        idle_us=i["total_us"],
        host_wait_us=host,
        host_wait_in_launch_bound_phases_us=in_phases,
        idle_categories_us={k: v["time_us"] for k, v in i["categories"].items()},
        top_stacks=i["top_stacks"].get("host_wait", []),
    )


def sync_stalls(c: Context) -> Finding | None:
    """The CPU blocks on the GPU (device/stream/event synchronize, synchronous memcpy).

    Pattern: runtime calls that wait for the GPU, often from ``.item()``, ``.cpu()``,
    ``.tolist()``, ``nonzero``, printing a tensor or ``torch.cuda.synchronize()`` in the
    step. While the CPU waits it queues nothing, so the GPU runs dry and idles until the
    CPU launches again. Evidence: blocked time by call and by cause (the op the user called),
    the stacks. Cost: that idle (``sync_wait``); a final synchronize after the last kernel
    costs nothing. Fix: keep values on the GPU (accumulate losses as tensors, log every N
    steps), ``non_blocking=True`` copies into pinned memory, drop explicit synchronizes.
    """
    s = c.sync
    if s is None or not _worth(c, s["gpu_idle_after_us"]):
        return None
    return _finding(
        c,
        "sync_stalls",
        "CPU blocks waiting for the GPU, then the GPU waits for the CPU",
        s["gpu_idle_after_us"],
        "avoid .item()/.cpu()/.tolist()/print of GPU tensors and torch.cuda.synchronize() in "
        "the step loop; copy with non_blocking=True into pinned memory; log every N steps",
        gpu_idle_after_sync_us=s["gpu_idle_after_us"],
        blocked_us=s["blocked_us"],
        calls=s["by_call"],
        causes=s["by_cause"],
        top_stacks=s["top_stacks"],
    )


def pageable_copies(c: Context) -> Finding | None:
    """Host-to-device copies from pageable (not pinned) memory.

    Pattern: ``Memcpy HtoD (Pageable -> Device)``: the driver stages the data through a
    pinned buffer and the copy cannot overlap with the CPU, so ``non_blocking=True`` has no
    effect. Evidence: number of copies, bytes, their GPU time, the CPU time of the calls
    that issued them, and the stacks. Cost: the CPU time of the issuing calls (what a
    pinned, asynchronous copy gives back), at least the copies' GPU time.
    Fix: ``DataLoader(pin_memory=True)`` or ``tensor.pin_memory()``, then
    ``.to(device, non_blocking=True)``.
    """
    t = c.t
    idx = memcpy.copies(t)
    pageable = np.array([memcpy.is_pageable_htod(n) for n in t.names], dtype=bool)
    idx = idx[pageable[t.gpu_name[idx]]]
    if idx.size == 0:
        return None
    gpu_ns = int(t.gpu_dur[idx].sum())
    launched = t.gpu_launch[idx]
    launched = launched[launched >= 0]
    cpu_ns = int(t.cpu_dur[launched].sum()) if launched.size else 0
    nbytes = t.gpu_bytes[idx] if t.gpu_bytes is not None else np.full(idx.size, -1)
    cost = max(gpu_ns, cpu_ns) / 1e3
    return _finding(
        c,
        "pageable_copies",
        "host-to-device copies from pageable memory",
        cost,
        "pin the host memory (DataLoader(pin_memory=True) or tensor.pin_memory()) and copy "
        "with .to(device, non_blocking=True)",
        copies=int(idx.size),
        bytes=int(nbytes.sum()) if np.all(nbytes >= 0) else None,
        gpu_time_us=gpu_ns / 1e3,
        launch_cpu_time_us=cpu_ns / 1e3,
        top_stacks=top_stacks(t, launched, t.cpu_dur[launched].astype(np.float64)),
    )


def many_small_copies(c: Context) -> Finding | None:
    """Many small copies (under 64 KiB each), each paying a launch and a fixed latency.

    Pattern: at least ``SMALL_COPIES_MIN`` copies smaller than
    :data:`memcpy.SMALL_COPY_BYTES` (bytes recorded in the trace), typically tensors built
    from Python scalars or lists in the step (``torch.tensor(x, device=...)``), per-item
    ``.to(device)`` or ``.item()`` reads. Evidence: count, bytes, GPU and launch CPU time,
    how many are inside the step loop, the stacks. Cost: their launch CPU time plus their
    GPU time (an upper bound of what batching them into one copy gives back).
    Fix: build the data once and copy it in one tensor (``torch.stack``/``torch.cat`` on
    the host, one pinned non-blocking copy), keep scalars on the GPU, move constant tensors
    out of the loop.
    """
    m = c.memory
    if m is None:
        return None
    s = m["small_copies"]
    cost = s["gpu_time_us"] + s["launch_cpu_time_us"]
    if s["count"] < SMALL_COPIES_MIN or not _worth(c, cost):
        return None
    loop = m["in_step_loop"]
    return _finding(
        c,
        "many_small_copies",
        f"{s['count']:,} small copies (< {s['threshold_bytes'] // 1024} KiB each)",
        cost,
        "batch the data into one tensor and copy it once (pinned, non_blocking=True); keep "
        "scalars on the GPU; create constant tensors outside the step loop",
        copies=s["count"],
        bytes=s["bytes"],
        gpu_time_us=s["gpu_time_us"],
        launch_cpu_time_us=s["launch_cpu_time_us"],
        copies_in_step_loop=loop["copies"] if loop else None,
        top_stacks=s["top_stacks"],
    )


def below_roofline(c: Context) -> Finding | None:
    """Modelled ops (GEMM, convolution, attention) far below their roofline; low MFU.

    Pattern: operator shapes whose achieved TFLOP/s is under ``ROOFLINE_LOW`` of the
    roofline at their arithmetic intensity (``min(peak, intensity x bandwidth)``), which
    needs the device's peaks (deviceProperties, ``--device`` or ``--peak-*``). Evidence:
    MFU, the costliest such shapes with their intensity, bound (memory or compute) and
    achieved share. Cost: the time they would save at their roofline, sum of
    ``kernel time x (1 - achieved / roofline)``.
    Fix: memory-bound shapes: fuse them with their neighbours (``torch.compile``), raise
    the batch or sequence size so each weight byte does more work, lower precision (bf16,
    fp8); compute-bound: use tensor cores (bf16/fp16, ``torch.backends.cuda.matmul.
    allow_tf32``), dimensions that are multiples of 8/16, larger tiles via ``torch.compile
    (mode="max-autotune")``.
    """
    e = c.efficiency
    rows = [r for r in e["ops"] if r["pct_of_roofline"] is not None]
    low = [r for r in rows if r["pct_of_roofline"] < ROOFLINE_LOW]
    cost = sum(r["kernel_time_us"]["sum"] * (1 - r["pct_of_roofline"]) for r in low)
    if not low or not _worth(c, cost):
        return None
    low.sort(key=lambda r: -r["kernel_time_us"]["sum"] * (1 - r["pct_of_roofline"]))
    keep = ("family", "op", "params", "dtype", "calls", "flops_per_byte", "tflops_per_s",
            "attainable_tflops_per_s", "pct_of_roofline", "bound")  # fmt: skip
    memory_bound = sum(r["kernel_time_us"]["sum"] for r in low if r["bound"] == "memory")
    return _finding(
        c,
        "below_roofline",
        "GEMM/convolution/attention shapes run far below the device's roofline",
        cost,
        "memory-bound shapes: fuse with neighbours (torch.compile), larger batch/sequence, "
        "lower precision; compute-bound: tensor cores (bf16, allow_tf32), dims multiple of "
        "8/16, torch.compile(mode='max-autotune')",
        mfu=e["mfu"],
        mfu_busy=e["mfu_busy"],
        device=e["device"]["name"] if e["device"] else None,
        shapes_below=len(low),
        time_us=sum(r["kernel_time_us"]["sum"] for r in low),
        memory_bound_time_us=memory_bound,
        top_shapes=[{k: r[k] for k in keep} for r in low[:5]],
    )


RULES: list[Callable[[Context], Finding | None]] = [
    launch_bound,
    host_wait_dominated,
    sync_stalls,
    pageable_copies,
    many_small_copies,
    below_roofline,
]


def find(c: Context | TraceData) -> list[Finding]:
    """All findings of all rules, the costliest first."""
    ctx = c if isinstance(c, Context) else Context(c)
    out = [f for rule in RULES if (f := rule(ctx)) is not None]
    return sorted(out, key=lambda f: -f.cost_us)
