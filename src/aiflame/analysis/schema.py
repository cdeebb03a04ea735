"""The analysis report as typed records: what ``aiflame analyze --json`` writes.

Every section is a :class:`msgspec.Struct`; the JSON is their encoding (NaN and infinities
become ``null``) and docs/analyze.md's schema is generated from these classes
(``tools/analyze_schema.py``). Times are microseconds (floats), shares 0..1. Keys are
stable; new keys may be added.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

SCHEMA_VERSION = 2


class Record(msgspec.Struct, kw_only=True):
    """Base of every report record."""


# -- time ------------------------------------------------------------------------------


class Breakdown(Record):
    """GPU time breakdown with TraceLens' definitions (docs/analyze.md, Definitions)."""

    total: float
    busy: float
    idle: float
    computation: float
    communication: float
    memcpy: float
    exposed_communication: float
    exposed_memcpy: float
    memset: float


class HtaTemporal(Record):
    """HTA's ``get_temporal_breakdown``, over the GPU activity HTA keeps: with two or more
    ``ProfilerStep`` annotations, what was launched before the last step began."""

    idle_us: float
    compute_us: float
    non_compute_us: float
    total_us: float
    left_out_activities: int = 0  # by HTA's last-step filter (also left out of idle_by_stream_hta)


class HtaStreamIdle(Record):
    """HTA's ``get_idle_time_breakdown`` of one stream (after HTA's last-step filter)."""

    stream: str | None
    host_wait_us: float
    kernel_wait_us: float
    other_us: float


class Stack(Record):
    """A CPU stack, root first (the innermost 12 names), and what it costs."""

    stack: list[str]
    cost_us: float
    count: int


class OutsideWindow(Record):
    """GPU activity whose launch is not in the trace (launched before the profiler window,
    or on a thread it did not record); TraceLens leaves it out of its breakdown."""

    activities: int
    gpu_time_us: float
    share_of_busy: float


# -- idle ------------------------------------------------------------------------------


class IdleCategory(Record):
    time_us: float
    gaps: int
    share: float  # of the idle time


class IdleSummary(Record):
    waiting_on_host_us: float
    waiting_on_dependency_us: float
    other_us: float


class HtaIdle(Record):
    host_wait_us: float
    kernel_wait_us: float
    other_us: float


class IdleCause(Record):
    """Idle time explained by what the CPU did during the gaps (time-weighted)."""

    cause: str  # a key of analysis.causes.CAUSES
    label: str
    time_us: float
    share: float  # of the idle time
    gaps: int  # gaps where it is the largest part
    top_stacks: list[Stack]


class Idle(Record):
    total_us: float
    gaps: int
    kernel_wait_threshold_us: float
    categories: dict[str, IdleCategory]
    summary: IdleSummary
    hta_categories: HtaIdle
    top_stacks: dict[str, list[Stack]]
    causes: list[IdleCause]  # largest first; they sum to total_us


# -- kernels and ops -------------------------------------------------------------------


class Row(Record):
    name: str
    total_us: float
    count: int
    mean_us: float
    share: float  # of all GPU activity time (kernels: of all kernel time)


class Histogram(Record):
    bin_edges_us: list[float]
    counts: list[int]


class ShortKernels(Record):
    threshold_us: float
    count: int
    kernels: int
    share_of_kernels: float
    time_us: float
    histogram: Histogram


class Category(Record):
    """GPU time of one op category (GEMM, attention, elementwise...), TraceLens-like."""

    category: str
    time_us: float  # summed activity time
    share: float  # of all GPU activity time
    count: int  # activities
    top: list[str]  # the ops (or kernels) with the most time in it


class GraphReplays(Record):
    """GPU work launched by CUDA/HIP graph launches."""

    launches: int
    activities: int
    gpu_time_us: float
    share_of_gpu_time: float  # of all GPU activity time
    attributed_us: float  # of it, hung under captured ops (--capture-trace)
    capture: str | None  # the capture trace used


# -- launches, syncs, copies -----------------------------------------------------------


class Quantiles(Record):
    median: float | None
    p90: float | None


class CallStat(Record):
    count: int
    cpu_time_us: float
    median_us: float


class QueueBins(Record):
    start_us: float
    bin_us: float
    mean_depth: list[float]


class QueueDepth(Record):
    max: int
    mean: float
    share_empty: float
    share_one_or_less: float
    bins: QueueBins


class LaunchBoundPhase(Record):
    start_us: float  # from the first GPU activity
    end_us: float
    launches: int
    shorter_than_launch: int
    median_launch_us: float
    median_gpu_us: float
    median_interval_us: float  # between the starts of consecutive launch calls
    gpu_busy_share: float
    overhead_idle_us: float  # idle in the phase while the CPU launched and dispatched
    top_stacks: list[Stack]


class LaunchBound(Record):
    phases: int
    time_us: float
    overhead_idle_us: float


class Launch(Record):
    launches: int
    activities: int
    launch_cpu_time_us: float
    launched_gpu_time_us: float
    shorter_than_launch: int
    share_shorter_than_launch: float
    launch_us: Quantiles
    gpu_us: Quantiles
    launch_to_start_us: Quantiles
    by_call: dict[str, CallStat]
    queue_depth: QueueDepth | None
    launch_bound: LaunchBound
    launch_bound_phases: list[LaunchBoundPhase]


class SyncStat(Record):
    count: int
    blocked_us: float
    gpu_idle_after_us: float  # idle of the gaps that began while it blocked
    gpu_idle_caused_us: float  # of that, what it cost: the time it held the CPU back


class Sync(Record):
    calls: int
    blocked_us: float
    gpu_idle_after_us: float
    gpu_idle_caused_us: float
    # GPU idle while the calls blocked: they waited on no work the trace shows
    gpu_idle_inside_us: float
    by_call: dict[str, SyncStat]
    by_cause: dict[str, SyncStat]
    top_stacks: list[Stack]
    # by the copy the call (or its operator) issued: download, upload, device copy, no copy
    by_copy: dict[str, SyncStat] = {}


class CopyKind(Record):
    name: str
    direction: str
    src: str | None
    dst: str | None
    count: int
    bytes: int | None
    gpu_time_us: float
    exposed_us: float  # overlapped by no kernel
    launch_cpu_time_us: float
    gb_per_s: float | None


class SmallCopies(Record):
    threshold_bytes: int
    count: int
    bytes: int
    gpu_time_us: float
    exposed_us: float
    launch_cpu_time_us: float
    top_stacks: list[Stack]


class StepLoopCopies(Record):
    steps: int
    copies: int
    copies_per_step_median: float
    htod_copies: int
    htod_bytes: int
    gpu_time_us: float
    top_stacks: list[Stack]


class MemoryTraffic(Record):
    copies: int
    bytes_known: bool
    by_kind: list[CopyKind]
    small_copies: SmallCopies
    in_step_loop: StepLoopCopies | None


# -- efficiency ------------------------------------------------------------------------


class TimeSum(Record):
    sum: float
    mean: float


class GemmRow(Record):
    op: str
    B: int
    M: int
    N: int
    K: int
    dtype: str
    bias: bool
    calls: int
    flops: int
    bytes: int | None
    flops_per_byte: float | None
    kernel_time_us: TimeSum
    tflops_per_s: float | None
    tb_per_s: float | None


class Device(Record):
    name: str
    tflops: dict[str, float]
    tb_per_s: float | None
    source: str


class Modelled(Record):
    calls: int
    flops: float
    kernel_time_us: float
    share_of_busy: float | None
    flops_without_peak: float


class PrecisionStat(Record):
    flops: float
    kernel_time_us: float
    tflops_per_s: float | None
    peak_tflops: float | None
    pct_of_peak: float | None


class ShapeRate(Record):
    family: str  # gemm, conv, attention
    op: str
    params: dict[str, Any]
    dtype: str
    precision: str | None
    calls: int
    flops: int
    bytes: int | None
    flops_per_byte: float | None
    kernel_time_us: TimeSum
    tflops_per_s: float | None
    tb_per_s: float | None
    peak_tflops: float | None
    pct_of_peak: float | None
    attainable_tflops_per_s: float | None
    pct_of_roofline: float | None
    bound: Literal["compute", "memory"] | None


class KernelRate(Record):
    name: str
    launches: int
    flops: float
    bytes: float | None
    time_us: float
    tflops_per_s: float | None
    tb_per_s: float | None


class Efficiency(Record):
    device: Device | None
    modelled: Modelled
    achieved_tflops_per_s: float | None
    mfu: float | None
    mfu_busy: float | None
    by_precision: dict[str, PrecisionStat]
    ops: list[ShapeRate]
    kernels: list[KernelRate]


class PerSample(Record):
    batch_size: int
    steps: int
    samples: int
    gpu_time_per_sample_us: float
    busy_time_per_sample_us: float
    samples_per_s: float | None
    input_bytes: int | None
    input_bytes_per_sample: float | None
    busy_ns_per_input_byte: float | None


# -- findings --------------------------------------------------------------------------


class Figure(Record):
    """One labelled number of a finding's evidence."""

    label: str
    value: float | int | str | None
    unit: Literal["us", "share", "count", "bytes", "text", "tflops"]


class Item(Record):
    """One named thing a finding is about (a collective, a shape, a copy kind, a call)."""

    name: str
    cost_us: float | None
    detail: str


class FlameView(Record):
    """How the flame graph shows the pattern: the metric and a search for its frames."""

    metric: str | None = None
    search: str | None = None


class Finding(Record):
    rule: str
    severity: Literal["high", "medium", "low"]
    title: str
    cost_us: float  # GPU time a fix can win (see `assumption`)
    share_of_gpu_time: float  # of the GPU timeline
    summary: str  # the evidence, in one sentence
    assumption: str  # what the cost estimate assumes
    fix: str
    figures: list[Figure]
    items: list[Item] = []
    top_stacks: list[Stack] = []
    flame: FlameView = msgspec.field(default_factory=FlameView)
    # rules whose findings had the same fix and were merged into this one (their costs,
    # stacks and items are in it)
    merged: list[str] = []


class Workload(Record):
    """What produced the trace, which decides the wording of the fixes."""

    kind: str  # pytorch, torch.compile, vllm, sglang, jax, cuda-app, hip-app, unknown
    label: str
    evidence: str


# -- rank and job ----------------------------------------------------------------------


class RankReport(Record):
    path: str
    rank: str | None  # from the trace's distributedInfo
    name: str  # "rank 0", or the file's name without a rank
    format: str  # the source that read it: kineto, nsys, trace-events
    devices: list[str]
    workload: Workload
    time_breakdown: Breakdown
    time_breakdown_by_device: dict[str, Breakdown]
    launch_not_in_trace: OutsideWindow | None
    hta_temporal_breakdown: HtaTemporal | None
    idle: Idle | None
    idle_by_stream_hta: list[HtaStreamIdle]
    op_categories: list[Category]
    top_kernels: list[Row]
    top_ops: list[Row]
    top_ops_unattributed_us: float  # GPU time launched by no op (graph replays...)
    # what that time is: "graph replays", "launches outside ops", or both (null: none)
    top_ops_unattributed_why: str | None
    graph_replays: GraphReplays | None
    short_kernels: ShortKernels
    launch: Launch | None
    sync: Sync | None
    memory_traffic: MemoryTraffic | None
    gemm: list[GemmRow]
    efficiency: Efficiency | None
    per_sample: PerSample | None
    findings: list[Finding]  # costliest first
    unavailable: dict[str, str]  # what cannot be said about this trace, and why
    notes: list[str]


class MinMedMax(Record):
    min: float
    median: float
    max: float


class Straggler(Record):
    rank: str
    computation_us: float
    over_median: float


class JobFinding(Record):
    rule: str
    title: str
    ranks: list[str]
    cost_us: float


class Job(Record):
    """The ranks together (analysis/job.py)."""

    ranks: int
    ranks_with_gpu_activity: int
    same_job: bool  # every trace names its own rank; if not, summed but no straggler named
    time_breakdown_sum: dict[str, float] | None = None
    fractions: dict[str, float] | None = None
    computation_us: MinMedMax | None = None
    computation_spread: float | None = None
    slowest_rank: str | None = None
    stragglers: list[Straggler] = []
    findings: list[JobFinding] = []
    unavailable: str | None = None  # only when no trace has GPU activity


class Report(Record):
    schema_version: int
    ranks: list[RankReport]  # one per trace, in the order given
    job: Job
    # With GPU PC samples among the inputs: their stall analysis (analysis/gpu_stalls.py)
    gpu_stalls: dict[str, Any] | None = None


def _plain(value: Any) -> Any:
    """numpy scalars as the numbers they are (a safety net for computed values)."""
    item = getattr(value, "item", None)
    if item is not None and getattr(value, "shape", None) == ():
        return item()
    raise TypeError(f"cannot encode {type(value).__name__}")


_ENCODER = msgspec.json.Encoder(enc_hook=_plain)


# C1 controls and bidirectional formatting characters, which JSON may hold raw but which a
# terminal obeys (`cat report.json`): written as \\u escapes, the same text to a JSON reader.
_ESCAPED = {
    c: f"\\u{c:04x}"
    for c in (*range(0x7F, 0xA0), 0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F),
              *range(0x2066, 0x206A))
}  # fmt: skip


def to_json(report: Report, indent: int = 1) -> str:
    """The report as JSON text (valid JSON: NaN and infinities are null; characters a
    terminal would obey escaped, as JSON escapes the C0 controls)."""
    return msgspec.json.format(_ENCODER.encode(report), indent=indent).decode().translate(_ESCAPED)


def to_builtins(report: Any) -> Any:
    """Dicts and lists of the report (or of one of its records), as the JSON has them."""
    return msgspec.json.decode(_ENCODER.encode(report))


def json_schema() -> dict[str, Any]:
    """JSON Schema of the report (draft 2020-12)."""
    return msgspec.json.schema(Report)
