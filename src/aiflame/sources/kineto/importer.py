"""PyTorch profiler (Kineto) traces: full-stack GPU flame graphs.

Every GPU activity (kernel, memcpy, memset, MTIA device event) becomes a sample whose stack
is: the Python frames active on the launching thread -> the nested operators -> the
runtime/driver call -> ``-`` -> the activity, weighted by its GPU duration (``gpu-time``,
ns) and counted (``kernel-count``). Activity whose launch is not in the trace hangs under
``[launch not in trace]``, so the flame graph's total is the trace's total GPU time. The
CPU slices give a second view: the self time of every Python function, operator and
runtime call (``wall-time``, ns: the profiler times slices by the wall clock, so a thread
sleeping inside a function counts as much as one computing; ``cpu-time``, the old name, is
accepted as an alias). Slices that overlap partially are counted once (see
:func:`aiflame.transforms.correlate.nest`): per thread, the total never exceeds the time
the thread spent in slices.

Layouts: recent traces with ``python_function`` events; older ones whose operators carry
a ``Call stack`` string; the 2021 ``Operator``/``Runtime``/``Kernel`` layout; AMD (HIP
names in the same categories; kernels named by their mangled symbol are demangled); MTIA;
GPU-only and CPU-only traces (a metric with no data is left out: no ``gpu-time`` without GPU
activity).

Options: ``python_names`` ('short': ``function (file.py:12)``, ``Class > method``; 'raw':
as written by the profiler), ``kernel_names`` ('full', the default, exactly as in the
trace; 'short': template arguments and parameters folded, but for the arguments that tell
kernels of the trace apart: symbolize/cxxnames.py), ``module_instances`` (keep the
``nn.Module: Layer_0``, ``Layer_1``... frames of every module instance; by default the
instances of a class merge, see :mod:`aiflame.transforms.pynames`) and ``merge_steps``
(``ProfilerStep#N`` as one ``ProfilerStep#*``).
"""

from __future__ import annotations

import re
from array import array
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from aiflame.errors import AiflameError, InputError
from aiflame.model import FrameKind, Profile, ProfileBuilder, gpu
from aiflame.model.stacks import EMPTY_STACK
from aiflame.model.trace import TraceData
from aiflame.sources.gpu_idle_samples import add_gpu_idle
from aiflame.sources.inputs import Input
from aiflame.sources.kineto.events import (
    Cls,
    Columns,
    EventCollector,
    TimeOutOfRange,
    ValueOutOfRange,
    correlation_ids,
)
from aiflame.sources.kineto.info import describe, time_range_problem
from aiflame.sources.kineto.json_stream import TraceStream
from aiflame.sources.kineto.names import PyFrame, python_frame
from aiflame.sources.kineto.samples import (
    DELIMITER,
    GPU_IDLE_TIME,
    SAMPLE_TYPES,
    UNLINKED_ROOT,
    Labels,
    add_cpu_samples,
    add_gpu_samples,
)
from aiflame.sources.kineto.trace_data import from_columns, rank_of
from aiflame.sources.trace_input import TraceInput
from aiflame.symbolize.cxa import demangle_all
from aiflame.symbolize.cxxnames import distinct_short_names, short_kernel_name
from aiflame.symbolize.demangle import is_mangled
from aiflame.symbolize.pyframes import NamedFrame, PythonNaming
from aiflame.transforms import correlate
from aiflame.transforms.pynames import merge_steps as merge_profiler_steps
from aiflame.transforms.pynames import module_methods
from aiflame.transforms.strip import drop_empty_types

if TYPE_CHECKING:
    from aiflame.model.timeline import Timeline

FORMAT = "kineto"

_MARKERS = (
    b'"cpu_op"',
    b'"python_function"',
    b'"cuda_runtime"',
    b'"cuda_driver"',
    b'"kernel"',
    b'"gpu_memcpy"',
    b'"user_annotation"',
    b'"Operator"',
    b'"Runtime"',
    b'"Kernel"',
    b'"mtia_runtime"',
    b'"mtia_ccp_events"',
    b'"schemaVersion"',
    b'"deviceProperties"',
    b'"distributedInfo"',
    b"PyTorch Profiler",
    b'"ac2g"',
)
# Enclosing order of slices that start together and last as long: Python encloses the
# operator it calls, which encloses the runtime call it makes.
_RANK = {Cls.PYTHON: 0, Cls.ANNOTATION: 1, Cls.OP: 2, Cls.RUNTIME: 3}
_KINDS = {Cls.PYTHON: FrameKind.PYTHON, Cls.OP: FrameKind.CPP, Cls.ANNOTATION: FrameKind.CPP}


class NoKinetoEvents(InputError):
    """A Chrome trace without Kineto's events: maybe a generic one (JAX, Chrome, Perfetto)."""


def sniff(head: bytes, path: str) -> bool:
    start = head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1]
    if start not in (b"{", b"["):
        return False
    if start == b"{" and b'"traceEvents"' in head:
        return True  # a Chrome trace; without Kineto's events it loads as "no events"
    return start == b"[" and any(m in head for m in _MARKERS)


def load(
    source: Input,
    python_names: str = "short",
    kernel_names: str = "full",
    python_roots: Sequence[str] | None = None,
    module_instances: bool = False,
    merge_steps: bool = False,
    python_naming: PythonNaming | None = None,
    **_: object,
) -> Profile:
    """``python_roots``: the traced interpreter's ``sys.path``, when known (``aiflame
    record``): Python frames are then named per function as the samplers' are (see
    :mod:`aiflame.symbolize.pyframes`), with classes read from the source files.
    ``python_naming``: that naming itself, shared with the samplers of the recording."""
    if python_names not in ("short", "raw"):
        raise AiflameError(f"python_names must be 'short' or 'raw', not '{python_names}'")
    if kernel_names not in ("full", "short"):
        raise AiflameError(f"kernel_names must be 'full' or 'short', not '{kernel_names}'")
    try:
        cols, trace_meta = read_columns(source)
    except NoKinetoEvents as no_events:
        from aiflame.sources.kineto import trace_events

        try:
            return trace_events.load(source)
        except trace_events.NoSlices:
            raise no_events from None
    naming = python_naming
    if naming is None and python_roots is not None:
        naming = PythonNaming(python_roots)
    return build_profile(
        cols,
        trace_meta,
        source.path,
        python_names,
        kernel_names,
        naming,
        module_instances=module_instances,
        merge_steps=merge_steps,
    )


def trace_input(
    source: Input,
    kernel_args: bool = False,
    module_instances: bool = False,
    merge_steps: bool = False,
    **_: object,
) -> TraceInput:
    """The trace for ``aiflame analyze`` and, from the same parse, its flame graph (with
    the flame graph options ``module_instances`` and ``merge_steps``).

    ``kernel_args``: read the kernel names launch calls carry (the trace of a graph's
    capture, which is matched to the replays by them)."""
    try:
        cols, meta = read_columns(source, shapes=True, kernels=kernel_args, memory=True)
    except NoKinetoEvents as no_events:
        from aiflame.sources.kineto import trace_events

        try:
            return trace_events.trace_input(source)
        except trace_events.NoSlices:
            raise no_events from None
    trace = from_columns(cols, meta, source.path, correlation_ids(cols))
    flame: dict[str, Any] = {"module_instances": module_instances, "merge_steps": merge_steps}

    def profile() -> Profile:
        return build_profile(cols, meta, source.path, "short", "full", **flame)

    return TraceInput(FORMAT, trace, profile, state=(cols, meta, flame))


def trace(source: Input, kernel_args: bool = False, **_: object) -> TraceData:
    return trace_input(source, kernel_args).trace


def read_columns(
    source: Input, shapes: bool = False, memory: bool = False, kernels: bool = False
) -> tuple[Columns, dict[str, Any]]:
    """Stream the trace into columns; the top-level keys other than traceEvents beside.

    ``shapes``: keep the operators' recorded input shapes and dtypes too (for FLOPs);
    ``memory``: keep the ``[memory]`` events (see :mod:`.memory`); ``kernels``: the
    kernel names of launch calls.
    """
    collector = EventCollector(shapes, memory, kernels=kernels)
    with source.open_binary() as f:
        stream = TraceStream(f, source.path, collector.event_type)
        try:
            for batch in stream.batches():
                collector.add(batch)
        except ValueOutOfRange as e:
            raise InputError(source.path, str(e)) from None
    try:
        cols = collector.freeze()
    except TimeOutOfRange as e:
        raise InputError(source.path, str(e)) from None
    problem = time_range_problem(cols, stream.meta)
    if problem:
        raise InputError(source.path, problem)
    _demangle_kernels(cols)
    if cols.cpu_ts.size == 0 and cols.gpu_ts.size == 0:
        what = ", ".join(f"{n} {c}" for c, n in cols.ignored.most_common(4))
        raise NoKinetoEvents(
            source.path,
            "no profiler events in this trace (no CPU operators, Python functions, runtime "
            "calls or GPU activity)" + (f"; only: {what}" if what else ""),
        )
    return cols, stream.meta


def _demangle_kernels(cols: Columns) -> None:
    """Readable names of the kernels the trace names by their C++ symbol.

    CUPTI writes CUDA kernels demangled; ROCm's profiler names the kernels it launches
    through ``hipModuleLaunchKernel`` (aiter, composable_kernel, sglang's) by their mangled
    symbol: ``_ZN5aiter24add_rmsnorm_quant_kernel...`` for ``void
    aiter::add_rmsnorm_quant_kernel<...>(...)``. Names that do not demangle stay as they are.
    """
    used = np.unique(cols.gpu_name[cols.gpu_cls == Cls.KERNEL]).tolist()
    if cols.cpu_kernel is not None:  # the kernels launch calls name (graph captures): alike
        used += np.unique(cols.cpu_kernel[cols.cpu_kernel >= 0]).tolist()
    mangled = {i: cols.names[i] for i in set(used) if is_mangled(cols.names[i])}
    if not mangled:
        return
    readable = demangle_all(mangled.values())
    for i, name in mangled.items():
        cols.names[i] = readable.get(name, name)


class Frames:
    """Frame ids by (class, name id), created on first use with the chosen naming."""

    def __init__(
        self,
        builder: ProfileBuilder,
        cols: Columns,
        py: str,
        kernel: str,
        naming: PythonNaming | None = None,
    ) -> None:
        self.b, self.names, self.py, self.kernel = builder, cols.names, py, kernel
        self.naming = naming if py == "short" else None
        self._short: dict[str, str] = {}
        if kernel == "short":  # shortened together, so that they stay apart
            used = np.unique(cols.gpu_name[cols.gpu_cls == Cls.KERNEL]).tolist()
            self._short = distinct_short_names(self.names[i] for i in used)
        self._ids: dict[tuple[int, int], int] = {}
        self._stacks: dict[int, list[int]] = {}
        self._functions: dict[int, list[tuple[str, str]]] = {}
        self.call_stacks = cols.call_stacks

    def python(self, raw: str) -> int:
        f = python_frame(raw, self.py)
        shown: PyFrame | NamedFrame = f
        if self.naming is not None and f.func:
            shown = self.naming.traced(f.func, f.file, f.line)
        return self.b.frame(shown.name, FrameKind.PYTHON, shown.file, shown.line)

    def get(self, cls: int, name_id: int) -> int:
        key = (cls, name_id)
        fid = self._ids.get(key)
        if fid is None:
            name = self.names[name_id]
            if cls == Cls.PYTHON:
                fid = self.python(name)
            elif cls == Cls.RUNTIME:
                fid = self.b.frame(name, FrameKind.RUNTIME)
            elif cls in Cls.GPU:
                if self.kernel == "short" and cls == Cls.KERNEL:
                    name = self._short.get(name) or short_kernel_name(name)
                fid = self.b.frame(name, FrameKind.GPU_KERNEL)
            else:
                fid = self.b.frame(name, _KINDS[cls])
            self._ids[key] = fid
        return fid

    def column(self, cls: np.ndarray, name: np.ndarray) -> np.ndarray:
        """Frame id of every row of (class, name id) columns."""
        if cls.size == 0:
            return np.zeros(0, dtype=np.int64)
        # A (class x name) table: no sort over millions of rows.
        table = np.full((8, len(self.names)), -1, dtype=np.int64)
        table[cls, name] = 0
        for c, m in zip(*np.nonzero(table == 0), strict=True):
            table[c, m] = self.get(int(c), int(m))
        return table[cls, name]

    def call_stack(self, cs: int) -> list[int]:
        """Python frame ids of a ``Call stack`` string, root first."""
        ids = self._stacks.get(cs)
        if ids is None:
            ids = self._stacks[cs] = [self.python(p) for p in self._parts(cs)]
        return ids

    def call_stack_functions(self, cs: int) -> list[tuple[str, str]]:
        """(file, function) of each frame of a ``Call stack``, root first: a frame of the
        same function is the same call whatever line it was at."""
        funcs = self._functions.get(cs)
        if funcs is None:
            funcs = self._functions[cs] = []
            for part in self._parts(cs):
                f = python_frame(part, "raw")
                funcs.append((f.file, f.func) if f.func else ("", part))
        return funcs

    def _parts(self, cs: int) -> list[str]:
        parts = [p.strip() for p in self.call_stacks[cs].split(";")]
        return [p for p in reversed(parts) if p]


def build_profile(
    cols: Columns,
    trace_meta: dict[str, Any],
    path: str,
    python_names: str,
    kernel_names: str,
    naming: PythonNaming | None = None,
    *,
    module_instances: bool = False,
    merge_steps: bool = False,
    replays: tuple[Columns, np.ndarray] | None = None,
) -> Profile:
    """``replays``: the columns of a CUDA/HIP graph's capture trace and, per GPU activity,
    the captured launch (a CPU slice of the capture, -1: none) of replayed ones: those
    hang under their graph launch, ``[graph replay]`` and the captured stack."""
    builder = ProfileBuilder(SAMPLE_TYPES)
    frames = Frames(builder, cols, python_names, kernel_names, naming)
    warnings = Counter(cols.warnings)
    rank = rank_of(trace_meta)

    cpu_corr, gpu_corr = correlation_ids(cols)
    slices = cpu_slice_stacks(builder, frames, cols, warnings)
    nesting, stack_of, use_call_stacks = slices.nesting, slices.stack_of, slices.call_stacks

    # Links: runtime/driver calls first; any other slice only for what is still unlinked.
    is_rt = cols.cpu_cls == Cls.RUNTIME
    links = correlate.link(gpu_corr, np.where(is_rt, cpu_corr, -1), cols.cpu_ts)
    rest = correlate.link(gpu_corr, np.where(is_rt, -1, cpu_corr), cols.cpu_ts)
    launch = np.where(links.launch >= 0, links.launch, rest.launch)
    if links.duplicates:
        warnings["duplicate correlation ids (the earliest launch is used)"] += links.duplicates
    dangling = int(np.count_nonzero((launch < 0) & (gpu_corr >= 0)))
    if dangling:
        warnings["GPU activities whose correlation id matches no launch"] += dangling
    missing = int(np.count_nonzero(gpu_corr < 0))
    if missing:
        warnings["GPU activities without a correlation id"] += missing

    labels = Labels(builder, cols, rank)
    add_cpu_samples(builder, cols, nesting, stack_of, labels)
    kernels = frames.column(cols.gpu_cls, cols.gpu_name)
    graft = _replayed_stacks(builder, cols, launch, stack_of)
    if replays is not None:
        captured = _captured_stacks(builder, cols, launch, stack_of, replays, python_names)
        graft = captured if graft is None else np.where(captured >= 0, captured, graft)
    unlinked = add_gpu_samples(builder, kernels, cols, launch, stack_of, labels, graft)
    trace = from_columns(cols, trace_meta, path, (cpu_corr, gpu_corr), nesting, launch)
    none = np.full(1, -1, dtype=np.int64)

    def thread_labels(th: np.ndarray) -> np.ndarray:
        return labels.ids(th, np.broadcast_to(none, th.shape), np.broadcast_to(none, th.shape))

    add_gpu_idle(builder, GPU_IDLE_TIME, trace, stack_of, thread_labels)

    builder.meta.update(describe(cols, unlinked, warnings, rank, trace_meta, use_call_stacks))
    if len(launch) and stack_of.size:
        # Which CPU stack launched each correlation id: joins GPU PC samples (gpujoin).
        linked = launch >= 0
        builder.meta[gpu.LAUNCHES] = {
            "correlation": gpu_corr[linked].astype(np.int64),
            "stack": stack_of[launch[linked]].astype(np.int64),
        }
    # A CPU-only trace has no gpu-time or kernel-count, a GPU-only one no wall-time: a
    # metric without data is not offered (info, the page's choice, pprof's sample types).
    profile = drop_empty_types(builder.build())
    if python_names == "short":  # 'raw' keeps the frames as the profiler wrote them
        profile = module_methods(profile, instances=module_instances)
    return merge_profiler_steps(profile) if merge_steps else profile


@dataclass
class CpuSlices:
    """The CPU slices nested by time, and the stack id of each (its enclosing slices'
    frames, then its own)."""

    nesting: correlate.Nesting
    stack_of: np.ndarray
    call_stacks: bool  # Python frames came from 'Call stack' strings


def cpu_slice_stacks(
    builder: ProfileBuilder, frames: Frames, cols: Columns, warnings: Counter[str]
) -> CpuSlices:
    """Nest the CPU slices of ``cols`` and intern their stacks into ``builder``."""
    nesting = correlate.nest(cols.cpu_thread, cols.cpu_ts, cols.cpu_dur, _ranks(cols.cpu_cls))
    if nesting.bleeding:
        warnings[correlate.OVERLAP_WARNING] += nesting.bleeding
    use_call_stacks = not np.any(cols.cpu_cls == Cls.PYTHON) and bool(cols.call_stacks)
    stack_of = _cpu_stacks(builder, frames, cols, nesting, use_call_stacks)
    return CpuSlices(nesting, stack_of, use_call_stacks)


REPLAY_FRAME = "[graph replay]"
NO_OP_REPLAY_FRAME = "[graph replay: no operator known]"
_GRAPH_LAUNCH = re.compile(r"^(cuda|hip|cu)GraphLaunch")


def _replayed_stacks(
    builder: ProfileBuilder, cols: Columns, launch: np.ndarray, stack_of: np.ndarray
) -> np.ndarray | None:
    """Per GPU activity launched by a CUDA/HIP graph launch: its launch's stack with a
    ``[graph replay: no operator known]`` frame, so the flame graph says what share of the
    GPU time ran in replays no operator is known for; -1 elsewhere (None: no replays)."""
    is_graph = np.fromiter(
        (bool(_GRAPH_LAUNCH.match(n)) for n in cols.names), dtype=bool, count=len(cols.names)
    )
    if not is_graph.any() or cols.cpu_ts.size == 0:
        return None
    replayed = (launch >= 0) & (cols.cpu_cls[np.maximum(launch, 0)] == Cls.RUNTIME)
    replayed &= is_graph[cols.cpu_name[np.maximum(launch, 0)]]
    if not replayed.any():
        return None
    label = builder.frame(NO_OP_REPLAY_FRAME, FrameKind.LABEL)
    out = np.full(launch.size, -1, dtype=np.int64)
    for s in np.unique(stack_of[launch[replayed]]).tolist():
        out[replayed & (stack_of[np.maximum(launch, 0)] == s)] = builder.stacks.child(s, label)
    return out


def _captured_stacks(
    builder: ProfileBuilder,
    cols: Columns,
    launch: np.ndarray,
    stack_of: np.ndarray,
    replays: tuple[Columns, np.ndarray],
    python_names: str,
) -> np.ndarray:
    """Per GPU activity: the stack it hangs under when replayed from a captured launch
    (graph launch -> [graph replay] -> the captured Python frames and ops), else -1."""
    cap, origin = replays
    frames = Frames(builder, cap, python_names, "full")
    nesting = correlate.nest(cap.cpu_thread, cap.cpu_ts, cap.cpu_dur, _ranks(cap.cpu_cls))
    label = builder.frame(REPLAY_FRAME, FrameKind.LABEL)
    out = np.full(origin.size, -1, dtype=np.int64)
    done: dict[tuple[int, int], int] = {}
    for j in np.nonzero((origin >= 0) & (launch >= 0))[0].tolist():
        key = (int(stack_of[launch[j]]), int(origin[j]))
        found = done.get(key)
        if found is None:
            chain, i = [], key[1]
            while i >= 0:
                chain.append(frames.get(int(cap.cpu_cls[i]), int(cap.cpu_name[i])))
                i = int(nesting.parent[i])
            found = done[key] = builder.stacks.intern([label, *chain[::-1]], key[0])
        out[j] = found
    return out


def replay_profile(replay: TraceInput, capture: TraceInput, origin: np.ndarray) -> Profile:
    """The flame graph of ``replay`` with its graph replays under the captured stacks
    (``origin``: per GPU activity of the replay, the capture's CPU slice or -1)."""
    (cols, meta, flame), cap = replay.state, capture.state[0]
    path = replay.trace.path
    return build_profile(cols, meta, path, "short", "full", **flame, replays=(cap, origin))


def _ranks(cls: np.ndarray) -> np.ndarray:
    table = np.zeros(8, dtype=np.int64)
    for c, r in _RANK.items():
        table[c] = r
    return table[cls]


def _cpu_stacks(
    builder: ProfileBuilder,
    frames: Frames,
    cols: Columns,
    nesting: correlate.Nesting,
    use_call_stacks: bool,
) -> np.ndarray:
    """Stack id of every CPU slice: its enclosing slices' frames, then its own.

    Slices are visited parents first, a chunk at a time (Python lists of a chunk only);
    results live in compact arrays, so millions of slices stay cheap.
    """
    n = int(cols.cpu_ts.shape[0])
    stack_of = array("q", bytes(8 * n))
    context = array("q", b"\xff" * (8 * n)) if use_call_stacks else None  # Call stack in force
    frame_of = frames.column(cols.cpu_cls, cols.cpu_name)
    child = builder.stacks.child
    intern = builder.stacks.intern
    inserted: dict[tuple[int, int], list[int]] = {}
    for lo in range(0, n, correlate.CHUNK):
        idx = nesting.order[lo : lo + correlate.CHUNK]
        parents, own = nesting.parent[idx].tolist(), frame_of[idx].tolist()
        css = cols.cpu_stack[idx].tolist() if context is not None else None
        for k, i in enumerate(idx.tolist()):
            p = parents[k]
            base = stack_of[p] if p >= 0 else EMPTY_STACK
            if context is not None and css is not None:
                outer = context[p] if p >= 0 else -1
                cs = css[k]
                if cs >= 0 and cs != outer:
                    extra = inserted.get((outer, cs))
                    if extra is None:
                        extra = inserted[outer, cs] = _new_frames(frames, outer, cs)
                    base = intern(extra, base)
                context[i] = cs if cs >= 0 else outer
            stack_of[i] = child(base, own[k])
    return np.frombuffer(stack_of, dtype=np.int64) if n else np.zeros(0, dtype=np.int64)


def _new_frames(frames: Frames, outer: int, cs: int) -> list[int]:
    """Frames of Call stack ``cs`` below the part it shares with the enclosing ``outer``.

    Shared frames are those of the same functions, not the same lines: an annotation such
    as ``ProfilerStep#6`` starts at ``<module>`` line 54 and encloses operators called from
    ``<module>`` line 42, one and the same ``<module>`` call, which must not repeat.
    """
    mine = frames.call_stack(cs)
    if outer < 0:
        return mine
    funcs, theirs = frames.call_stack_functions(cs), frames.call_stack_functions(outer)
    k = 0
    while k < len(funcs) and k < len(theirs) and funcs[k] == theirs[k]:
        k += 1
    return mine[k:]


__all__ = [
    "DELIMITER",
    "FORMAT",
    "SAMPLE_TYPES",
    "UNLINKED_ROOT",
    "build_profile",
    "load",
    "read_columns",
    "replay_profile",
    "sniff",
    "trace",
    "trace_input",
]


def load_timeline(source: Input, kernel_names: str = "full", **_: object) -> Timeline:
    """The trace's slices and GPU activity in time, for the Chrome trace exporter (a trace
    without Kineto events as :mod:`.trace_events` reads it)."""
    from aiflame.sources.kineto import trace_events
    from aiflame.sources.kineto.timeline import build_timeline

    try:
        cols, trace_meta = read_columns(source)
    except NoKinetoEvents as no_events:
        try:
            return trace_events.load_timeline(source)
        except trace_events.NoSlices:
            raise no_events from None
    return build_timeline(cols, trace_meta, kernel_names)
