"""Insight rules: each finds one anti-pattern in a trace and says what it costs and what to try.

A rule is a small function ``rule(t: TraceData) -> Finding | None`` listed in ``RULES``;
to add one, write the function (its docstring is its documentation: pattern, evidence,
cost estimate, fix) and append it to ``RULES``. Costs are estimates in microseconds of GPU
time that the pattern leaves idle (or CPU time it blocks), so findings can be ranked.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from aiflame.analysis.trace import Kind, TraceData

# Severity from the estimated cost as a share of the GPU timeline.
HIGH, MEDIUM = 0.10, 0.03
REPORT_FROM = 0.01  # smaller costs are not reported


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


def _severity(cost_ns: float, total_ns: float) -> str:
    share = cost_ns / total_ns if total_ns else 0.0
    return "high" if share >= HIGH else "medium" if share >= MEDIUM else "low"


def _gpu_total(t: TraceData) -> int:
    if t.gpu_ts.size == 0:
        return 0
    return int((t.gpu_ts + t.gpu_dur).max() - t.gpu_ts.min())


def stack_of(t: TraceData, i: int, depth: int = 12) -> list[str]:
    """Names of slice ``i`` and its enclosing slices (Python functions, ops), root first."""
    out = []
    while i >= 0 and len(out) < depth:
        out.append(t.names[int(t.cpu_name[i])])
        i = int(t.cpu_parent[i])
    return out[::-1]


def _top_callers(t: TraceData, slices: np.ndarray, cost: np.ndarray, n: int = 3) -> list[dict]:
    """The costliest distinct stacks of ``slices`` (their enclosing chains)."""
    by_stack: dict[tuple[str, ...], list[float]] = {}
    for i, c in zip(slices.tolist(), cost.tolist(), strict=True):
        entry = by_stack.setdefault(tuple(stack_of(t, int(t.cpu_parent[i]))), [0.0, 0])
        entry[0] += c
        entry[1] += 1
    ranked = sorted(by_stack.items(), key=lambda kv: -kv[1][0])[:n]
    return [{"stack": list(k), "cost_us": v[0] / 1e3, "count": v[1]} for k, v in ranked]


def launch_bound(t: TraceData) -> Finding | None:
    """GPU idle because the CPU launches work too slowly ("host wait").

    Pattern: the GPU finished everything queued and sat idle until the CPU *started* the
    launch call of the next activity (HTA's host-wait idle). Typical of many short kernels
    whose launch takes longer than the kernel runs.
    Evidence: host-wait idle time, kernels shorter than their launch call, median launch
    and kernel durations. Cost: the host-wait idle time.
    Fix: CUDA graphs (``torch.compile(mode="reduce-overhead")`` or ``torch.cuda.graphs``),
    fusing small ops (``torch.compile``), larger batches; check the launching code path for
    Python overhead in the flame graph.
    """
    total = _gpu_total(t)
    linked = np.nonzero(t.gpu_launch >= 0)[0]
    if total == 0 or linked.size < 2:
        return None
    wait = 0
    for d in np.unique(t.gpu_device).tolist():
        idx = np.nonzero(t.gpu_device == d)[0]
        idx = idx[np.argsort(t.gpu_ts[idx], kind="stable")]
        end = np.maximum.accumulate(t.gpu_ts[idx] + t.gpu_dur[idx])
        nxt = idx[1:]
        launch = t.gpu_launch[nxt]
        ok = launch >= 0
        gap_start = end[:-1][ok]
        launch_ts = t.cpu_ts[launch[ok]]
        host = launch_ts >= gap_start  # the launch began only after the GPU ran dry
        gap = t.gpu_ts[nxt][ok] - gap_start
        wait += int(np.clip(gap[host & (gap > 0)], 0, None).sum())
    if wait < REPORT_FROM * total:
        return None
    kern = linked[(t.gpu_kind[linked] == Kind.COMPUTE) | (t.gpu_kind[linked] == Kind.COMM)]
    launch_dur = t.cpu_dur[t.gpu_launch[kern]]
    shorter = int(np.count_nonzero(t.gpu_dur[kern] < launch_dur))
    return Finding(
        "launch_bound",
        _severity(wait, total),
        "GPU waits for the CPU to launch work",
        wait / 1e3,
        "capture the step in CUDA graphs (torch.compile(mode='reduce-overhead')), fuse small "
        "ops with torch.compile, or raise the batch size; look for Python overhead on the "
        "launching path in the flame graph",
        {
            "host_wait_idle_us": wait / 1e3,
            "share_of_gpu_time": wait / total,
            "kernels": int(kern.size),
            "kernels_shorter_than_launch": shorter,
            "median_launch_us": float(np.median(launch_dur)) / 1e3 if kern.size else None,
            "median_kernel_us": float(np.median(t.gpu_dur[kern])) / 1e3 if kern.size else None,
        },
    )


_SYNC = re.compile(
    r"^(cuda|hip)(DeviceSynchronize|StreamSynchronize|EventSynchronize"
    r"|Memcpy|MemcpyWithStream|MemcpyDtoH|MemcpyHtoD)$|^synchronize(Stream)?$"
)


def _idle_after(t: TraceData, when: np.ndarray) -> tuple[int, int]:
    """GPU idle from each time in ``when`` to the next activity, where the GPU had run dry.

    Returns (idle ns, number of gaps); each gap is counted once even when several calls
    end inside it.
    """
    if t.gpu_ts.size == 0 or when.size == 0:
        return 0, 0
    order = np.argsort(t.gpu_ts, kind="stable")
    start = t.gpu_ts[order]
    end = np.maximum.accumulate(t.gpu_ts[order] + t.gpu_dur[order])
    nxt = np.searchsorted(start, when, side="left")  # first activity starting at/after
    ok = nxt < start.size
    prev = nxt - 1
    dry = ok & ((prev < 0) | (end[np.maximum(prev, 0)] <= when))
    gaps: dict[int, int] = {}
    for k, w in zip(nxt[dry].tolist(), when[dry].tolist(), strict=True):
        gap_start = max(w, int(end[k - 1]) if k > 0 else w)
        gaps[k] = max(gaps.get(k, 0), int(start[k]) - gap_start)
    return sum(gaps.values()), len(gaps)


def sync_stalls(t: TraceData) -> Finding | None:
    """The CPU blocks on the GPU (device/stream/event synchronize, synchronous memcpy).

    Pattern: runtime calls that wait for the GPU, often from ``.item()``, ``.cpu()``,
    ``.tolist()``, printing a tensor or ``torch.cuda.synchronize()`` inside the step.
    While the CPU waits it queues nothing, so the GPU runs dry once the call returns.
    Evidence: CPU time and count per call, the GPU idle after them, the stacks making them.
    Cost: the GPU idle from the end of each such call until the next GPU activity starts
    (the drained queue refilling); a final synchronize after the last kernel costs nothing.
    Fix: keep values on the GPU (accumulate losses as tensors, log every N steps), use
    ``non_blocking=True`` copies into pinned memory, and drop explicit synchronizes.
    """
    if t.cpu_is_runtime is None or t.cpu_ts.size == 0 or t.gpu_ts.size == 0:
        return None
    sync_names = np.array([bool(_SYNC.match(n)) for n in t.names])
    calls = np.nonzero(t.cpu_is_runtime & sync_names[t.cpu_name])[0]
    total = _gpu_total(t)
    cost, gaps = _idle_after(t, t.cpu_ts[calls] + t.cpu_dur[calls])
    if calls.size == 0 or cost < REPORT_FROM * total:
        return None
    per_call: dict[str, list[float]] = {}
    for i in calls.tolist():
        e = per_call.setdefault(t.names[int(t.cpu_name[i])], [0.0, 0])
        e[0] += float(t.cpu_dur[i]) / 1e3
        e[1] += 1
    return Finding(
        "sync_stalls",
        _severity(cost, total),
        "CPU blocks waiting for the GPU, then the GPU waits for the CPU",
        cost / 1e3,
        "avoid .item()/.cpu()/.tolist()/print of GPU tensors and torch.cuda.synchronize() in "
        "the step loop; copy with non_blocking=True into pinned memory; log every N steps",
        {
            "gpu_idle_after_sync_us": cost / 1e3,
            "idle_gaps": gaps,
            "calls": {k: {"blocked_us": v[0], "count": v[1]} for k, v in per_call.items()},
            "top_stacks": _top_callers(t, calls, t.cpu_dur[calls].astype(np.float64)),
        },
    )


def pageable_copies(t: TraceData) -> Finding | None:
    """Host-to-device copies from pageable (not pinned) memory.

    Pattern: ``Memcpy HtoD (Pageable -> Device)``: the driver stages the data through a
    pinned buffer and the copy cannot overlap with the CPU, so ``non_blocking=True`` has
    no effect. Evidence: number of copies, their GPU time and the CPU time of the calls
    that issued them, and the stacks. Cost: the CPU time of the issuing calls (what a
    pinned, asynchronous copy gives back), at least the copies' GPU time.
    Fix: ``DataLoader(pin_memory=True)`` or ``tensor.pin_memory()``, then
    ``.to(device, non_blocking=True)``.
    """
    names = np.array([("HtoD" in n and "Pageable" in n) for n in t.names])
    copies = np.nonzero((t.gpu_kind == Kind.MEMCPY) & names[t.gpu_name])[0]
    if copies.size == 0:
        return None
    gpu_ns = int(t.gpu_dur[copies].sum())
    launch = t.gpu_launch[copies]
    launched = launch[launch >= 0]
    cpu_ns = int(t.cpu_dur[launched].sum()) if launched.size else 0
    cost = max(gpu_ns, cpu_ns)
    total = _gpu_total(t)
    return Finding(
        "pageable_copies",
        _severity(cost, total),
        "host-to-device copies from pageable memory",
        cost / 1e3,
        "pin the host memory (DataLoader(pin_memory=True) or tensor.pin_memory()) and copy "
        "with .to(device, non_blocking=True)",
        {
            "copies": int(copies.size),
            "gpu_time_us": gpu_ns / 1e3,
            "launch_cpu_time_us": cpu_ns / 1e3,
            "top_stacks": _top_callers(t, launched, t.cpu_dur[launched].astype(np.float64))
            if launched.size
            else [],
        },
    )


RULES: list[Callable[[TraceData], Finding | None]] = [launch_bound, sync_stalls, pageable_copies]


def find(t: TraceData) -> list[Finding]:
    """All findings of all rules, the costliest first."""
    out = [f for rule in RULES if (f := rule(t)) is not None]
    return sorted(out, key=lambda f: -f.cost_us)
