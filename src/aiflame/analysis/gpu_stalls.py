"""Why hot GPU kernels stall: top stall reasons, lines and instructions per kernel from GPU
PC samples, and the fix to try for each dominant reason, with its evidence.

Input is any profile with ``gpu-samples`` (HPCToolkit, Nsight Compute, CUPTI dumps,
rocprofv3, iaprof): each sample's stack holds its kernel, source line(s), instruction and
stall reason. Reasons are read in the vendor's words; rules match them by name first,
then by their normalized class, so an AMD ``WAITCNT`` and an NVIDIA ``long_scoreboard``
lead to the same advice about memory latency.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field

import numpy as np

from aiflame.model import FrameKind, Profile, gpu

MIN_REASON_SHARE = 0.10  # of a kernel's samples, for a finding
MIN_KERNEL_SHARE = 0.02  # of all samples, for a kernel to be analyzed


@dataclass(frozen=True)
class Advice:
    title: str
    fix: str


# By reason key (gpu.reason_key), then by class.
_BY_REASON: dict[str, Advice] = {
    "long_scoreboard": Advice(
        "global/local memory latency (long scoreboard)",
        "coalesce the loads of the hot line (consecutive threads, consecutive addresses), "
        "tile the reused data through shared memory, prefetch (cp.async / software "
        "pipelining) and keep more independent loads in flight (ILP, occupancy)",
    ),
    "lg_throttle": Advice(
        "the local/global memory queue is full (LG throttle)",
        "issue fewer, wider memory instructions (vectorized 64/128-bit loads), and remove "
        "local-memory spills (fewer live registers, -Xptxas -v to see them)",
    ),
    "mio_throttle": Advice(
        "the MIO queue is full (shared memory, special math)",
        "cut shared-memory instructions (wider accesses, fewer bank conflicts: pad or swizzle "
        "the tile), and move special functions off the hot loop",
    ),
    "short_scoreboard": Advice(
        "waiting on shared memory or special-function results (short scoreboard)",
        "remove shared-memory bank conflicts (padding, swizzled layouts) and overlap the "
        "shared loads with independent math",
    ),
    "barrier": Advice(
        "warps wait at a barrier (__syncthreads)",
        "the warps of a block do unequal work before the barrier: balance it, sync less "
        "often (larger tiles per sync, warp-level primitives), or split the block",
    ),
    "membar": Advice(
        "memory fences (membar)",
        "drop __threadfence / system-scope atomics from the hot path, or use weaker scopes",
    ),
    "math_pipe_throttle": Advice(
        "compute-bound at a math pipe (math pipe throttle)",
        "the kernel saturates that pipe: use tensor cores or lower precision for the hot "
        "math, or trade it for another pipe (FMA vs. ALU mix); more warps will not help",
    ),
    "tex_throttle": Advice(
        "the texture/L1TEX pipe is saturated",
        "fewer texture/L1 requests per warp: cache reused values in registers or shared memory",
    ),
    "wait": Advice(
        "fixed-latency dependencies (wait)",
        "expose more independent instructions: unroll, interleave independent chains, "
        "or run more warps per scheduler",
    ),
    "no_instructions": Advice(
        "no instruction to issue (instruction cache, branches)",
        "shrink the hot loop's code (less unrolling, fewer template instances) and avoid "
        "divergent branches in it",
    ),
    "branch_resolving": Advice(
        "branch resolution",
        "make branches uniform across the warp or predicate short branches",
    ),
    "imc_miss": Advice(
        "constant cache misses",
        "index constant memory uniformly across the warp, or move the table to global memory",
    ),
    "drain": Advice(
        "draining stores at exit",
        "many stores at the end of the kernel: overlap them with work or batch them",
    ),
    "dispatch_stall": Advice(
        "dispatch stalls",
        "pipeline interlocks at dispatch; check for register bank conflicts in the hot loop",
    ),
    "sleeping": Advice(
        "warps sleeping (nanosleep, yield)",
        "warps wait on each other by sleeping: look at spin locks or producer/consumer waits",
    ),
    "not_selected": Advice(
        "eligible but not selected",
        "the schedulers always have work: the kernel is issue-bound; fewer instructions "
        "(not more warps) make it faster",
    ),
}
_BY_CLASS: dict[str, Advice] = {
    gpu.MEMORY: _BY_REASON["long_scoreboard"],
    gpu.SHORT_DEPENDENCY: _BY_REASON["wait"],
    gpu.SYNCHRONIZATION: _BY_REASON["barrier"],
    gpu.FRONT_END: _BY_REASON["no_instructions"],
    gpu.PIPE: _BY_REASON["math_pipe_throttle"],
}
# Vendor names that mean an NVIDIA reason above (HPCToolkit, AMD, Intel).
_ALIASES = {
    "stl_gmem": "long_scoreboard",
    "stl_tmem": "tex_throttle",
    "stl_idep": "wait",
    "stl_sync": "barrier",
    "stl_ifet": "no_instructions",
    "stl_pipe": "math_pipe_throttle",
    "stl_mthr": "lg_throttle",
    "stl_cmem": "imc_miss",
    "stl_nsel": "not_selected",
    "stl_slp": "sleeping",
    "long_sb": "long_scoreboard",
    "short_sb": "short_scoreboard",
    "waitcnt": "long_scoreboard",
    "alu_dependency": "wait",
    "barrier_wait": "barrier",
    "no_instruction_available": "no_instructions",
    "sleep_wait": "sleeping",
    "send": "long_scoreboard",
    "sbid": "long_scoreboard",
    "sync": "barrier",
    "inst_fetch": "no_instructions",
    "pipestall": "math_pipe_throttle",
    "dist_acc": "wait",
    "control": "branch_resolving",
}


def advice_for(reason: str) -> Advice | None:
    key = gpu.reason_key(reason)
    key = _ALIASES.get(key, key)
    if key in _BY_REASON:
        return _BY_REASON[key]
    return _BY_CLASS.get(gpu.stall_class(reason))


@dataclass
class Share:
    name: str
    samples: float
    share: float  # of the kernel's samples
    reason: str = ""  # for lines and instructions: their own top reason
    stall_class: str = ""


@dataclass
class StallFinding:
    kernel: str
    reason: str
    stall_class: str
    title: str
    fix: str
    evidence: list[str] = field(default_factory=list)


@dataclass
class KernelStalls:
    kernel: str
    samples: float
    share: float  # of all samples
    reasons: list[Share]
    lines: list[Share]
    instructions: list[Share]


@dataclass
class StallReport:
    total_samples: float
    period: float | None
    period_unit: str
    join: str
    kernels: list[KernelStalls]
    findings: list[StallFinding]

    def to_json(self) -> dict:
        return asdict(self)


def has_gpu_samples(profile: Profile) -> bool:
    names = [t.name for t in profile.sample_types]
    if gpu.GPU_SAMPLES.name not in names:
        return False
    return bool(np.any(profile.values[:, names.index(gpu.GPU_SAMPLES.name)]))


_ByReason = dict[str, dict[str, float]]  # line or instruction -> reason -> samples


def _by_reason() -> _ByReason:
    return defaultdict(lambda: defaultdict(float))


def analyze_stalls(profile: Profile, top: int = 5) -> StallReport:
    col = profile.type_index(gpu.GPU_SAMPLES.name)
    kinds = profile.frames.kind
    per_kernel: dict[str, float] = defaultdict(float)
    reasons: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    lines: dict[str, dict[str, dict[str, float]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(float))
    )
    insts: dict[str, dict[str, dict[str, float]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(float))
    )
    for stack, value in profile.iter_stack_values(col):
        if stack < 0 or value <= 0:
            continue
        frames = profile.stacks.frames_of(stack)
        kernel = line = inst = None
        reason = "[no stall reason]"
        for f in frames:
            k = kinds[f]
            if k == FrameKind.GPU_KERNEL:
                # the launched kernel is the outermost: device functions it calls (HPCToolkit
                # names them below it) are part of its samples, not kernels of their own
                if kernel is None:
                    kernel = profile.frames.name_of(f)
            elif k == FrameKind.GPU_SOURCE and kernel is not None:
                line = profile.frames.name_of(f)  # innermost wins
            elif k == FrameKind.GPU_INSTRUCTION:
                inst = profile.frames.name_of(f)
            elif k == FrameKind.GPU_STALL:
                reason = profile.frames.name_of(f)
        if kernel is None:
            continue
        per_kernel[kernel] += value
        reasons[kernel][reason] += value
        if line:
            lines[kernel][line][reason] += value
        if inst:
            insts[kernel][inst][reason] += value
    total = float(sum(per_kernel.values()))
    out: list[KernelStalls] = []
    findings: list[StallFinding] = []
    for kernel, samples in sorted(per_kernel.items(), key=lambda kv: -kv[1]):
        if len(out) >= top or (out and samples < MIN_KERNEL_SHARE * total):
            break
        ks = KernelStalls(
            kernel,
            samples,
            samples / total if total else 0.0,
            _shares(reasons[kernel], samples),
            _ranked(lines[kernel], samples),
            _ranked(insts[kernel], samples),
        )
        out.append(ks)
        findings += _findings(ks, lines[kernel], insts[kernel])
    period = profile.meta.get(gpu.META_PERIOD)
    return StallReport(
        total_samples=total,
        period=float(period) if isinstance(period, (int, float)) else None,
        period_unit=str(profile.meta.get(gpu.META_PERIOD_UNIT, "")),
        join=str(profile.meta.get(gpu.META_JOIN, "")),
        kernels=out,
        findings=findings,
    )


def _shares(values: dict[str, float], whole: float, n: int = 6) -> list[Share]:
    ranked = sorted(values.items(), key=lambda kv: -kv[1])[:n]
    return [
        Share(k, v, v / whole if whole else 0.0, stall_class=gpu.stall_class(k)) for k, v in ranked
    ]


def _ranked(table: dict[str, dict[str, float]], whole: float, n: int = 5) -> list[Share]:
    rows = sorted(table.items(), key=lambda kv: -sum(kv[1].values()))[:n]
    out = []
    for name, by_reason in rows:
        v = sum(by_reason.values())
        top_reason = max(by_reason.items(), key=lambda kv: kv[1])[0]
        out.append(
            Share(name, v, v / whole if whole else 0.0, top_reason, gpu.stall_class(top_reason))
        )
    return out


def _findings(
    ks: KernelStalls,
    lines: dict[str, dict[str, float]],
    insts: dict[str, dict[str, float]],
) -> list[StallFinding]:
    out = []
    for r in ks.reasons:
        if r.share < MIN_REASON_SHARE or r.stall_class == gpu.ISSUED:
            continue
        advice = advice_for(r.name)
        if advice is None:
            continue
        evidence = [f"{r.name}: {r.share:.0%} of the kernel's {ks.samples:,.0f} samples"]
        hot_line = _hottest(lines, r.name)
        if hot_line:
            name, v = hot_line
            evidence.append(f"hottest line for it: {name} ({v / r.samples:.0%} of those samples)")
        hot_inst = _hottest(insts, r.name)
        if hot_inst:
            name, v = hot_inst
            evidence.append(f"hottest instruction: {name} ({v / r.samples:.0%})")
        out.append(
            StallFinding(ks.kernel, r.name, r.stall_class, advice.title, advice.fix, evidence)
        )
    return out


def _hottest(table: dict[str, dict[str, float]], reason: str) -> tuple[str, float] | None:
    best = max(
        ((n, by.get(reason, 0.0)) for n, by in table.items()), key=lambda x: x[1], default=None
    )
    return best if best and best[1] > 0 else None
