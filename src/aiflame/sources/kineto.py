"""PyTorch profiler (Kineto) traces: full-stack GPU flame graphs.

Every GPU activity (kernel, memcpy, memset, MTIA device event) becomes a sample whose stack
is: the Python frames active on the launching thread -> the nested operators -> the
runtime/driver call -> ``-`` -> the activity, weighted by its GPU duration (``gpu-time``,
ns) and counted (``kernel-count``). Activity whose launch is not in the trace hangs under
``[launch not in trace]``, so the flame graph's total is the trace's total GPU time. The
CPU slices give a second view: the self time of every Python function, operator and
runtime call (``cpu-time``, ns).

Layouts: recent traces with ``python_function`` events; older ones whose operators carry
a ``Call stack`` string; the 2021 ``Operator``/``Runtime``/``Kernel`` layout; AMD (HIP
names in the same categories); MTIA; GPU-only and CPU-only traces.

Options: ``python_names`` ('short': ``function (file.py:12)``, ``Class > method``; 'raw':
as written by the profiler) and ``kernel_names`` ('full', the default, exactly as in the
trace; 'short': template arguments and parameters folded).
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from aiflame.errors import AiflameError, InputError
from aiflame.model import FrameKind, Profile, ProfileBuilder
from aiflame.model.stacks import EMPTY_STACK
from aiflame.sources.inputs import Input
from aiflame.sources.kineto_events import Cls, Columns, EventCollector, TimeOutOfRange
from aiflame.sources.kineto_info import describe
from aiflame.sources.kineto_json import TraceStream
from aiflame.sources.kineto_names import python_frame, short_kernel_name
from aiflame.sources.kineto_samples import (
    DELIMITER,
    SAMPLE_TYPES,
    UNLINKED_ROOT,
    Labels,
    add_cpu_samples,
    add_gpu_samples,
)
from aiflame.symbolize.pyframes import PythonNaming
from aiflame.transforms import correlate
from aiflame.transforms.pynames import module_methods

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
    **_: object,
) -> Profile:
    """``python_roots``: the traced interpreter's ``sys.path``, when known (``aiflame
    record``): Python frames are then named per function as py-spy's samples are (see
    :mod:`aiflame.symbolize.pyframes`), with classes read from the source files."""
    if python_names not in ("short", "raw"):
        raise AiflameError(f"python_names must be 'short' or 'raw', not '{python_names}'")
    if kernel_names not in ("full", "short"):
        raise AiflameError(f"kernel_names must be 'full' or 'short', not '{kernel_names}'")
    try:
        cols, trace_meta = read_columns(source)
    except NoKinetoEvents as no_events:
        from aiflame.sources import trace_events

        try:
            return trace_events.load(source)
        except trace_events.NoSlices:
            raise no_events from None
    naming = PythonNaming(python_roots) if python_roots is not None else None
    return build_profile(cols, trace_meta, source.path, python_names, kernel_names, naming)


def read_columns(source: Input, shapes: bool = False) -> tuple[Columns, dict[str, Any]]:
    """Stream the trace into columns; the top-level keys other than traceEvents beside.

    ``shapes``: keep the operators' recorded input shapes and dtypes too (for FLOPs).
    """
    collector = EventCollector(shapes)
    with source.open_binary() as f:
        stream = TraceStream(f, source.path, collector.event_type)
        for batch in stream.batches():
            collector.add(batch)
    try:
        cols = collector.freeze()
    except TimeOutOfRange as e:
        raise InputError(source.path, str(e)) from None
    if cols.cpu_ts.size == 0 and cols.gpu_ts.size == 0:
        what = ", ".join(f"{n} {c}" for c, n in cols.ignored.most_common(4))
        raise NoKinetoEvents(
            source.path,
            "no profiler events in this trace (no CPU operators, Python functions, runtime "
            "calls or GPU activity)" + (f"; only: {what}" if what else ""),
        )
    return cols, stream.meta


def _rank_of(meta: dict[str, Any]) -> str | None:
    info = meta.get("distributedInfo")
    rank = info.get("rank") if isinstance(info, dict) else None
    if isinstance(rank, int) or (isinstance(rank, str) and rank.isdigit()):
        return str(rank)
    return None


class _Frames:
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
        self._ids: dict[tuple[int, int], int] = {}
        self._stacks: dict[int, list[int]] = {}
        self.call_stacks = cols.call_stacks

    def python(self, raw: str) -> int:
        f = python_frame(raw, self.py)
        if self.naming is not None and f.func:
            f = self.naming.traced(f.func, f.file, f.line)
        return self.b.frame(f.name, FrameKind.PYTHON, f.file, f.line)

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
                    name = short_kernel_name(name)
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
            parts = [p.strip() for p in self.call_stacks[cs].split(";")]
            ids = self._stacks[cs] = [self.python(p) for p in reversed(parts) if p]
        return ids


def build_profile(
    cols: Columns,
    trace_meta: dict[str, Any],
    path: str,
    python_names: str,
    kernel_names: str,
    naming: PythonNaming | None = None,
) -> Profile:
    builder = ProfileBuilder(SAMPLE_TYPES)
    frames = _Frames(builder, cols, python_names, kernel_names, naming)
    warnings = Counter(cols.warnings)
    rank = _rank_of(trace_meta)

    cpu_corr, gpu_corr = _fill_correlation_from_flows(cols)
    nesting = correlate.nest(cols.cpu_thread, cols.cpu_ts, cols.cpu_dur, _ranks(cols.cpu_cls))
    if nesting.bleeding:
        warnings["slices that end after their enclosing slice"] += nesting.bleeding
    use_call_stacks = not np.any(cols.cpu_cls == Cls.PYTHON) and bool(cols.call_stacks)
    stack_of = _cpu_stacks(builder, frames, cols, nesting, use_call_stacks)

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
    unlinked = add_gpu_samples(builder, kernels, cols, launch, stack_of, labels)

    builder.meta.update(describe(cols, unlinked, warnings, rank, trace_meta, use_call_stacks))
    profile = builder.build()
    return module_methods(profile) if python_names == "short" else profile


def _ranks(cls: np.ndarray) -> np.ndarray:
    table = np.zeros(8, dtype=np.int64)
    for c, r in _RANK.items():
        table[c] = r
    return table[cls]


def _fill_correlation_from_flows(cols: Columns) -> tuple[np.ndarray, np.ndarray]:
    """Correlation ids, taken from ac2g arrows where an event's args lack one."""
    cpu_corr, gpu_corr = cols.cpu_corr.copy(), cols.gpu_corr.copy()
    need = np.nonzero(gpu_corr < 0)[0]
    if need.size and cols.flow_f[0].size:
        gpu_corr[need] = correlate.flow_ids(cols.gpu_thread[need], cols.gpu_ts[need], *cols.flow_f)
    need = np.nonzero((cpu_corr < 0) & (cols.cpu_cls == Cls.RUNTIME))[0]
    if need.size and cols.flow_s[0].size:
        cpu_corr[need] = correlate.flow_ids(cols.cpu_thread[need], cols.cpu_ts[need], *cols.flow_s)
    return cpu_corr, gpu_corr


def _cpu_stacks(
    builder: ProfileBuilder,
    frames: _Frames,
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


def _new_frames(frames: _Frames, outer: int, cs: int) -> list[int]:
    """Frames of Call stack ``cs`` below the part it shares with the enclosing ``outer``."""
    mine = frames.call_stack(cs)
    if outer < 0:
        return mine
    theirs = frames.call_stack(outer)
    k = 0
    while k < len(mine) and k < len(theirs) and mine[k] == theirs[k]:
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
    "sniff",
]
