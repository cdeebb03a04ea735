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
from typing import Any

import numpy as np

from aiflame.errors import AiflameError, InputError
from aiflame.model import FrameKind, Profile, ProfileBuilder, SampleType
from aiflame.model.stacks import EMPTY_STACK
from aiflame.sources.inputs import Input
from aiflame.sources.kineto_events import Cls, Columns, Event, EventCollector
from aiflame.sources.kineto_json import TraceStream
from aiflame.sources.kineto_names import python_frame, short_kernel_name
from aiflame.transforms import correlate

FORMAT = "kineto"

SAMPLE_TYPES = (
    SampleType("gpu-time", "nanoseconds"),
    SampleType("kernel-count", "count"),
    SampleType("cpu-time", "nanoseconds"),
)
GPU_TIME, KERNEL_COUNT, CPU_TIME = 0, 1, 2
UNLINKED_ROOT = "[launch not in trace]"
_DENSE_KEYS = 1 << 22  # (stack, labels) pairs counted in a table up to this many
DELIMITER = "-"

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


def sniff(head: bytes, path: str) -> bool:
    start = head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1]
    if start not in (b"{", b"["):
        return False
    if start == b"{" and b'"traceEvents"' in head:
        return True  # a Chrome trace; without Kineto's events it loads as "no events"
    return start == b"[" and any(m in head for m in _MARKERS)


def load(
    source: Input, python_names: str = "short", kernel_names: str = "full", **_: object
) -> Profile:
    if python_names not in ("short", "raw"):
        raise AiflameError(f"python_names must be 'short' or 'raw', not '{python_names}'")
    if kernel_names not in ("full", "short"):
        raise AiflameError(f"kernel_names must be 'full' or 'short', not '{kernel_names}'")
    cols, trace_meta = read_columns(source)
    return build_profile(cols, trace_meta, source.path, python_names, kernel_names)


def read_columns(source: Input) -> tuple[Columns, dict[str, Any]]:
    """Stream the trace into columns; the top-level keys other than traceEvents beside."""
    collector = EventCollector()
    with source.open_binary() as f:
        stream = TraceStream(f, source.path, Event)
        for batch in stream.batches():
            collector.add(batch)
    cols = collector.freeze()
    if cols.cpu_ts.size == 0 and cols.gpu_ts.size == 0:
        what = ", ".join(f"{n} {c}" for c, n in cols.ignored.most_common(4))
        raise InputError(
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

    def __init__(self, builder: ProfileBuilder, cols: Columns, py: str, kernel: str) -> None:
        self.b, self.names, self.py, self.kernel = builder, cols.names, py, kernel
        self._ids: dict[tuple[int, int], int] = {}
        self._stacks: dict[int, list[int]] = {}
        self.call_stacks = cols.call_stacks

    def python(self, raw: str) -> int:
        f = python_frame(raw, self.py)
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
    cols: Columns, trace_meta: dict[str, Any], path: str, python_names: str, kernel_names: str
) -> Profile:
    builder = ProfileBuilder(SAMPLE_TYPES)
    frames = _Frames(builder, cols, python_names, kernel_names)
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

    labels = _Labels(builder, cols, rank)
    _add_cpu_samples(builder, cols, nesting, stack_of, labels)
    unlinked = _add_gpu_samples(builder, frames, cols, launch, stack_of, labels)

    builder.meta.update(
        _describe(cols, launch, unlinked, warnings, rank, trace_meta, nesting, use_call_stacks)
    )
    return builder.build()


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


class _Labels:
    """Label-set ids: per CPU thread (pid, tid, rank) and per GPU (device, stream) x thread."""

    def __init__(self, builder: ProfileBuilder, cols: Columns, rank: str | None) -> None:
        self.b, self.cols, self.rank = builder, cols, rank
        self._cache: dict[tuple[int, int, int], int] = {}

    def ids(self, thread: np.ndarray, device: np.ndarray, stream: np.ndarray) -> np.ndarray:
        """Label ids for rows of (launch thread or -1, device name id or -1, stream or -1)."""
        uniq, inverse = _unique_rows(thread, device, stream)
        out = np.empty(uniq.shape[0], dtype=np.int64)
        names, threads = self.cols.names, self.cols.threads
        for k, (t, d, s) in enumerate(uniq.tolist()):
            labels: dict[str, str] = {}
            if self.rank is not None:
                labels["rank"] = self.rank
            if t >= 0:
                labels["pid"], labels["tid"] = (str(x) for x in threads[t])
            if d >= 0:
                labels["device"] = names[d]
            if s >= 0:
                labels["stream"] = names[s]
            out[k] = self.b.labels(labels)
        return out[inverse]


def _unique_rows(*columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct rows of int columns (values >= -1) and each row's index among them.

    Packs the columns into one int64 key when they fit (much faster than ``axis=0``).
    """
    spans = [int(c.max()) + 2 if c.size else 1 for c in columns]
    if np.prod([float(x) for x in spans]) < 2.0**62:
        key = np.zeros(columns[0].shape[0], dtype=np.int64)
        for c, span in zip(columns, spans, strict=True):
            key = key * span + (c + 1)
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        rows = np.stack([c[first] for c in columns], axis=1)
        return rows, inverse.reshape(-1)
    rows, inverse = np.unique(np.stack(columns, axis=1), axis=0, return_inverse=True)
    return rows, inverse.reshape(-1)


def _add_aggregated(
    builder: ProfileBuilder,
    stacks: np.ndarray,
    labels: np.ndarray,
    columns: dict[int, np.ndarray | None],
) -> None:
    """Add one sample per distinct (stack, labels); ``columns``: sample-type column ->
    per-row weights summed into it (None: count the rows)."""
    if stacks.size == 0:
        return
    n_labels = int(labels.max()) + 1
    size = (int(stacks.max()) + 1) * n_labels
    if stacks.min() >= 0 and size <= _DENSE_KEYS:
        # Few distinct (stack, labels) keys: count them in a dense table, no sort.
        key = stacks * n_labels + labels
        present = np.nonzero(np.bincount(key, minlength=size))[0]
        sums = np.zeros((present.shape[0], len(SAMPLE_TYPES)))
        for c, weights in columns.items():
            sums[:, c] = np.bincount(key, weights=weights, minlength=size)[present]
        builder.add_many(present // n_labels, sums, present % n_labels)
        return
    uniq, inverse = _unique_rows(stacks, labels)
    sums = np.zeros((uniq.shape[0], len(SAMPLE_TYPES)))
    for c, weights in columns.items():
        sums[:, c] = np.bincount(inverse, weights=weights, minlength=uniq.shape[0])
    builder.add_many(uniq[:, 0], sums, uniq[:, 1])


def _add_cpu_samples(
    builder: ProfileBuilder,
    cols: Columns,
    nesting: correlate.Nesting,
    stack_of: np.ndarray,
    labels: _Labels,
) -> None:
    self_ns = correlate.self_times(cols.cpu_ts, cols.cpu_dur, nesting.parent)
    keep = np.nonzero(self_ns > 0)[0]
    thread = cols.cpu_thread[keep]
    # Label ids by thread (a lookup table), not by slice: no sort over millions of rows.
    threads = np.nonzero(np.bincount(thread, minlength=len(cols.threads)))[0]
    none = np.full(threads.shape[0], -1, dtype=np.int64)
    per_thread = np.zeros(len(cols.threads), dtype=np.int64)
    per_thread[threads] = labels.ids(threads, none, none)
    lab = per_thread[thread]
    weights = self_ns[keep].astype(np.float64)
    del self_ns
    _add_aggregated(builder, stack_of[keep], lab, {CPU_TIME: weights})


def _add_gpu_samples(
    builder: ProfileBuilder,
    frames: _Frames,
    cols: Columns,
    launch: np.ndarray,
    stack_of: np.ndarray,
    labels: _Labels,
) -> np.ndarray:
    """One sample per GPU activity (aggregated); returns the mask of unlinked ones."""
    n = int(cols.gpu_ts.shape[0])
    if n == 0:
        return np.zeros(0, dtype=bool)
    unlinked = launch < 0
    root = EMPTY_STACK
    if unlinked.any():
        root = builder.stacks.child(EMPTY_STACK, builder.frame(UNLINKED_ROOT, FrameKind.LABEL))
    base = np.where(unlinked, root, stack_of[np.maximum(launch, 0)] if stack_of.size else root)
    kernel = frames.column(cols.gpu_cls, cols.gpu_name)
    delim = builder.frame(DELIMITER, FrameKind.DELIMITER)
    pairs, inverse = _unique_rows(base, kernel)
    child = builder.stacks.child
    leaves = [child(child(b, delim), k) for b, k in pairs.tolist()]
    leaf = np.asarray(leaves, dtype=np.int64)[inverse]
    thread = np.where(unlinked, -1, cols.cpu_thread[np.maximum(launch, 0)] if stack_of.size else -1)
    lab = labels.ids(thread, cols.gpu_device, cols.gpu_stream)
    weights = cols.gpu_dur.astype(np.float64)
    _add_aggregated(builder, leaf, lab, {GPU_TIME: weights, KERNEL_COUNT: None})
    return unlinked


def _int(v: object) -> int:
    if isinstance(v, int):
        return v
    return int(v) if isinstance(v, str) and v.isdigit() else 0


def _ns(v: float) -> str:
    for scale, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "us")):
        if abs(v) >= scale:
            return f"{v / scale:.3f} {unit}"
    return f"{v:.0f} ns"


def _describe(
    cols: Columns,
    launch: np.ndarray,
    unlinked: np.ndarray,
    warnings: Counter[str],
    rank: str | None,
    trace_meta: dict[str, Any],
    nesting: correlate.Nesting,
    used_call_stacks: bool,
) -> dict[str, object]:
    """Profile meta: default metric, time range and the ``info:`` lines of ``aiflame info``."""
    n_gpu = int(cols.gpu_ts.size)
    meta: dict[str, object] = {"default_type": GPU_TIME if n_gpu else CPU_TIME}
    first = min(int(t.min()) for t in (cols.cpu_ts, cols.gpu_ts) if t.size)
    last = max(
        int((t + d).max())
        for t, d in ((cols.cpu_ts, cols.cpu_dur), (cols.gpu_ts, cols.gpu_dur))
        if t.size
    )
    # Kineto writes microseconds since baseTimeNanoseconds (a wall-clock origin) when set.
    base_ns = int(cols.base_us) * 1000 + _int(trace_meta.get("baseTimeNanoseconds"))
    meta["time_range_ns"] = (base_ns + first, base_ns + last)
    if rank is not None:
        meta["rank"] = rank
        meta["info:rank"] = rank
    devices = trace_meta.get("deviceProperties")
    if isinstance(devices, list) and devices:
        names = Counter(str(d.get("name", "?")) for d in devices if isinstance(d, dict))
        meta["info:devices"] = ", ".join(f"{n} x {name}" for name, n in names.items())
    counts = np.bincount(cols.cpu_cls, minlength=8)
    meta["info:cpu slices"] = (
        f"{counts[Cls.PYTHON]:,} Python functions, {counts[Cls.OP]:,} operators, "
        f"{counts[Cls.ANNOTATION]:,} annotations, {counts[Cls.RUNTIME]:,} runtime calls"
        + (" (Python stacks from 'Call stack')" if used_call_stacks else "")
    )
    if n_gpu:
        g = np.bincount(cols.gpu_cls, minlength=8)
        total = int(cols.gpu_dur.sum())
        meta["info:gpu activity"] = (
            f"{g[Cls.KERNEL]:,} kernels, {g[Cls.MEMCPY]:,} memcpy, {g[Cls.MEMSET]:,} memset "
            f"on {len(set(cols.gpu_device.tolist()))} device(s), "
            f"{len(set(zip(cols.gpu_device.tolist(), cols.gpu_stream.tolist(), strict=True)))} "
            f"stream(s); {_ns(total)} in all"
        )
        busy = correlate.busy_time(cols.gpu_ts, cols.gpu_dur)
        meta["info:gpu busy time"] = _ns(busy) + " (union of all GPU activity intervals)"
        lost = int(cols.gpu_dur[unlinked].sum())
        meta["info:unlinked gpu time"] = (
            f"{_ns(lost)} ({100 * lost / total if total else 0:.1f}%) in "
            f"{int(unlinked.sum()):,} activities under '{UNLINKED_ROOT}'"
        )
        meta["gpu_time_ns"], meta["gpu_busy_ns"], meta["unlinked_gpu_ns"] = total, busy, lost
    if warnings:
        meta["info:warnings"] = "; ".join(f"{n:,} {what}" for what, n in warnings.most_common())
    if cols.ignored:
        meta["info:not used"] = ", ".join(f"{c} {n:,}" for c, n in cols.ignored.most_common())
    return meta
