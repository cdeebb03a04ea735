"""Generic Chrome Trace Event Format files (JAX/TensorFlow, Chrome, Perfetto JSON, Hermes).

A JSON array of events, or an object with ``traceEvents``. Used: complete slices (``ph``
``X``, ``ts``/``dur`` in microseconds; ``tdur`` when ``dur`` is missing), begin/end pairs
(``B``/``E``) and the ``process_name``/``thread_name`` metadata (``M``). Instant, counter,
flow, async and other events are counted, not used. A truncated bare array (no closing
``]``, which the format allows) is read up to its last whole event.

Per (pid, tid), B/E events are sorted by time (file order among equal times) and matched
as a stack: an E closes the innermost open slice; an E named after an enclosing open slice
closes that one and everything opened inside it; an E on an empty stack or naming no open
slice is ignored; a slice still open at the end closes at the thread's last timestamp.
Then all slices of the thread nest by time (:func:`aiflame.transforms.correlate.nest`) and
each slice's self time is the ``wall-time`` (ns) of the stack ``process -> thread ->
enclosing slices -> slice``; the process and thread LABEL frames appear when named.
"""

from __future__ import annotations

import contextlib
import io
import re
from array import array
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from typing import Any, BinaryIO

import msgspec
import numpy as np

from aiflame.errors import InputError
from aiflame.model import FrameKind, Profile, ProfileBuilder, SampleType
from aiflame.model.stacks import EMPTY_STACK
from aiflame.model.timeline import Timeline, TimelineBuilder
from aiflame.model.trace import Kind, TraceData, is_communication
from aiflame.sources.gpu_idle_samples import GPU_IDLE, add_gpu_idle
from aiflame.sources.inputs import Input
from aiflame.sources.kineto.events import TimeOutOfRange, _ident, _number, us_to_ns
from aiflame.sources.kineto.json_stream import TraceStream
from aiflame.sources.kineto.samples import unique_rows
from aiflame.sources.trace_input import TraceInput
from aiflame.transforms import correlate

FORMAT = "trace-events"
SAMPLE_TYPES = (SampleType("wall-time", "nanoseconds"),)
UNNAMED = "(unnamed)"
_IGNORED_PHASES = {
    "i": "instant",
    "I": "instant",
    "R": "mark",
    "C": "counter",
    "s": "flow",
    "t": "flow",
    "f": "flow",
    "b": "async",
    "e": "async",
    "n": "async",
    "S": "async",
    "T": "async",
    "p": "async",
    "F": "async",
    "P": "sample",
    "N": "object",
    "O": "object",
    "D": "object",
    "c": "clock sync",
}


class NoSlices(InputError):
    """The trace holds no slices (the Kineto importer then keeps its own message)."""


class _Args(msgspec.Struct, gc=False):
    name: Any = None  # of a process_name / thread_name metadata event


class _Event(msgspec.Struct, gc=False):
    ph: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    tdur: Any = None
    args: _Args | None = None


def sniff(head: bytes, path: str) -> bool:
    start = head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1]
    if start == b"{":
        return b'"traceEvents"' in head
    return start == b"[" and b'"ph"' in head


def _coerce(item: Any) -> _Event | None:
    """An :class:`_Event` from a plain decoded item (a batch with odd field types)."""
    if not isinstance(item, dict):
        return None
    raw = item.get("args")
    args = _Args(raw.get("name")) if isinstance(raw, dict) else None
    get = item.get
    return _Event(
        get("ph"), get("name"), get("pid"), get("tid"), get("ts"), get("dur"), get("tdur"), args
    )


class _Collector:
    """Slices (X) and begin/end events (B/E) as compact columns, plus thread names."""

    def __init__(self) -> None:
        self.threads: dict[tuple[Any, Any], int] = {}
        self._raw_threads: dict[tuple[Any, Any], int] = {}  # (pid, tid) as written
        self.thread_keys: list[tuple[Any, Any]] = []
        self.names: dict[str, int] = {}
        self.process_names: dict[Any, str] = {}
        self.thread_names: dict[tuple[Any, Any], str] = {}
        # X slices: thread, ts (us), dur (us), name id, file position
        self.x = (array("q"), array("d"), array("d"), array("q"), array("q"))
        # B/E events: thread, ts (us), 1 for B / 0 for E, name id (-1: none), file position
        self.be = (array("q"), array("d"), array("b"), array("q"), array("q"))
        self.base_us: float | None = None
        self.seq = 0
        self.warnings: Counter[str] = Counter()
        self.ignored: Counter[str] = Counter()

    def _thread(self, pid: Any, tid: Any) -> int:
        key = (_ident(pid), _ident(tid))
        try:
            i = self.threads.get(key)
        except TypeError:  # a list or object as pid/tid
            key = (str(pid), str(tid))
            i = self.threads.get(key)
        if i is None:
            i = self.threads[key] = len(self.thread_keys)
            self.thread_keys.append(key)
        with contextlib.suppress(TypeError):  # unhashable pid/tid: always the slow path
            self._raw_threads[(pid, tid)] = i
        return i

    def _name(self, name: Any) -> int:
        s = name if isinstance(name, str) else ("" if name is None else str(name))
        i = self.names.get(s)
        if i is None:
            i = self.names[s] = len(self.names)
        return i

    def add(self, events: list[Any]) -> None:
        """Collect one batch (the hot loop: locals bound up front, fast paths for the usual
        types; odd values go through the slow helpers)."""
        x, be = self.x, self.be
        x_th, x_ts, x_dur, x_nm, x_sq = (
            x[0].append,
            x[1].append,
            x[2].append,
            x[3].append,
            x[4].append,
        )
        b_th, b_ts, b_ph, b_nm, b_sq = (
            be[0].append,
            be[1].append,
            be[2].append,
            be[3].append,
            be[4].append,
        )
        names, raw_threads, warn = self.names, self._raw_threads, self.warnings
        seq = self.seq
        for e in events:
            seq += 1
            if type(e) is not _Event:
                e = _coerce(e)
                if e is None:
                    warn["events that are not JSON objects"] += 1
                    continue
            ph = e.ph
            if ph == "X" or ph == "B" or ph == "E":
                ts = e.ts
                if type(ts) is not float and type(ts) is not int:
                    ts = _number(ts)
                    if ts is None:
                        warn[f"{ph} events without ts"] += 1
                        continue
                if self.base_us is None:
                    self.base_us = float(int(ts))
                try:
                    th = raw_threads.get((e.pid, e.tid))
                except TypeError:  # a list or object as pid/tid
                    th = None
                if th is None:
                    th = self._thread(e.pid, e.tid)
                name = e.name
                nid = names.get(name) if type(name) is str else None
                if ph == "X":
                    dur = e.dur
                    if type(dur) is not float and type(dur) is not int:
                        dur = _number(dur)
                        if dur is None:
                            dur = _number(e.tdur)  # thread duration: better than nothing
                        if dur is None:
                            warn["X events without dur"] += 1
                            continue
                    if dur < 0:
                        warn["X events with a negative duration"] += 1
                        continue
                    x_th(th)
                    x_ts(ts)
                    x_dur(dur)
                    x_nm(self._name(name) if nid is None else nid)
                    x_sq(seq)
                else:
                    if nid is None:
                        nid = -1 if ph == "E" and name is None else self._name(name)
                    b_th(th)
                    b_ts(ts)
                    b_ph(ph == "B")
                    b_nm(nid)
                    b_sq(seq)
            elif ph == "M":
                self._metadata(e)
            else:
                kind = _IGNORED_PHASES.get(ph) if isinstance(ph, str) else None
                self.ignored[f"{kind} events" if kind else f"'{ph}' events"] += 1
        self.seq = seq

    def _metadata(self, e: _Event) -> None:
        value = e.args.name if e.args is not None else None
        if not isinstance(value, str) or not value:
            return
        if e.name == "process_name":
            self.process_names[_ident(e.pid)] = value
        elif e.name == "thread_name":
            self.thread_names[(_ident(e.pid), _ident(e.tid))] = value


class _CloseAtEnd(io.RawIOBase):
    """The input with a ``]`` after its end: a bare event array cut short is still valid."""

    def __init__(self, inner: BinaryIO) -> None:
        self._inner, self._done = inner, False

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:  # type: ignore[override]
        data = self._inner.read(n)
        if data or self._done:
            return data
        self._done = True
        return b"]"


def _collect(source: Input) -> _Collector:
    collector = _Collector()
    with source.open_binary() as f:
        stream = TraceStream(f, source.path, _Event)
        try:
            for batch in stream.batches():
                collector.add(batch)
            return collector
        except InputError as e:
            if not (stream.bare_array and "truncated" in str(e)):
                raise
    collector = _Collector()  # read again, closing the array where the file stops
    with source.open_binary() as f:
        for batch in TraceStream(_CloseAtEnd(f), source.path, _Event).batches():  # type: ignore[arg-type]
            collector.add(batch)
    collector.warnings["truncated event arrays (read up to the last whole event)"] += 1
    return collector


def _ns(us: array, base: float) -> np.ndarray:
    return us_to_ns(us, base, "time" if base else "duration")


def _ints(a: array) -> np.ndarray:
    return np.frombuffer(a, dtype=np.int64) if len(a) else np.zeros(0, dtype=np.int64)


def match_begin_end(
    thread: np.ndarray,
    ts: np.ndarray,
    begin: np.ndarray,
    name: np.ndarray,
    seq: np.ndarray,
    thread_end: np.ndarray,
    warnings: Counter[str],
) -> tuple[np.ndarray, ...]:
    """Slices (thread, ts, dur, name, seq) from B/E events, matched per thread as a stack.

    ``thread_end[t]``: the last timestamp of thread ``t``, where slices left open end.
    """
    out: tuple[list[int], ...] = ([], [], [], [], [])
    order = np.lexsort((seq, ts, thread)).tolist()
    th_l, ts_l, b_l, nm_l, sq_l = (c.tolist() for c in (thread, ts, begin, name, seq))
    open_: list[tuple[int, int, int]] = []  # (ts, name, seq) of open B events
    current = -1

    def close(t: int, end: int, count: int) -> None:
        for _ in range(count):
            start, nm, sq = open_.pop()
            for col, v in zip(out, (t, start, end - start, nm, sq), strict=True):
                col.append(v)

    unmatched = inner = mismatched = 0
    for i in order:
        t = th_l[i]
        if t != current:
            if open_:
                warnings["B events never ended (closed at their thread's last timestamp)"] += len(
                    open_
                )
                close(current, int(thread_end[current]), len(open_))
            current = t
        if b_l[i]:
            open_.append((ts_l[i], nm_l[i], sq_l[i]))
            continue
        nm = nm_l[i]
        if not open_:
            unmatched += 1
        elif nm < 0 or open_[-1][1] == nm:
            close(t, ts_l[i], 1)
        else:
            k = next((k for k in range(len(open_) - 1, -1, -1) if open_[k][1] == nm), -1)
            if k < 0:
                unmatched += 1
            else:
                inner += len(open_) - 1 - k
                close(t, ts_l[i], len(open_) - k)
                mismatched += 1
    if open_:
        warnings["B events never ended (closed at their thread's last timestamp)"] += len(open_)
        close(current, int(thread_end[current]), len(open_))
    if unmatched:
        warnings["E events without a matching B (ignored)"] += unmatched
    if mismatched:
        warnings["E events that close an enclosing slice"] += mismatched
        warnings["slices closed by their enclosing slice's E event"] += inner
    return tuple(np.asarray(c, dtype=np.int64) for c in out)


@dataclass
class _Slices:
    """Every slice of a trace (X events, and B/E pairs matched), times in ns from ``base_us``."""

    col: _Collector
    base_us: float
    thread: np.ndarray
    ts: np.ndarray
    dur: np.ndarray
    name: np.ndarray
    seq: np.ndarray  # position in the file
    complete: int  # how many were X events (the rest: B/E pairs)

    @cached_property
    def nesting(self) -> correlate.Nesting:
        """Per thread, each slice's enclosing slice; equal slices: the one written first
        encloses."""
        nesting = correlate.nest(self.thread, self.ts, self.dur, self.seq)
        if nesting.bleeding:
            self.col.warnings[correlate.OVERLAP_WARNING] += nesting.bleeding
        return nesting


def _slices(source: Input, col: _Collector | None = None) -> _Slices:
    col = col or _collect(source)
    base = col.base_us or 0.0
    try:
        x_ts, x_dur, be_ts = _ns(col.x[1], base), _ns(col.x[2], 0.0), _ns(col.be[1], base)
    except TimeOutOfRange as e:
        raise InputError(source.path, str(e)) from None
    x_thread, x_name, x_seq = _ints(col.x[0]), _ints(col.x[3]), _ints(col.x[4])
    be_thread = _ints(col.be[0])
    n_threads = len(col.thread_keys)
    thread_end = np.full(n_threads, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(thread_end, x_thread, x_ts + x_dur)
    np.maximum.at(thread_end, be_thread, be_ts)
    be_begin = np.frombuffer(col.be[2], dtype=np.int8) if len(col.be[2]) else np.zeros(0)
    warnings = col.warnings
    b_thread, b_ts, b_dur, b_name, b_seq = match_begin_end(
        be_thread, be_ts, be_begin, _ints(col.be[3]), _ints(col.be[4]), thread_end, warnings
    )
    thread = np.concatenate([x_thread, b_thread])
    ts = np.concatenate([x_ts, b_ts])
    dur = np.concatenate([x_dur, b_dur])
    name = np.concatenate([x_name, b_name])
    seq = np.concatenate([x_seq, b_seq])
    if ts.size == 0:
        what = ", ".join(f"{n:,} {c}" for c, n in col.ignored.most_common(4))
        raise NoSlices(
            source.path,
            "no slices in this trace (no 'X' complete events or 'B'/'E' pairs)"
            + (f"; only: {what}" if what else ""),
        )
    return _Slices(col, base, thread, ts, dur, name, seq, int(x_ts.shape[0]))


def load(source: Input, **_: object) -> Profile:
    sl = _slices(source)
    col, thread, ts, name, nesting = sl.col, sl.thread, sl.ts, sl.name, sl.nesting
    base, warnings, n_threads = sl.base_us, col.warnings, len(col.thread_keys)
    dur = sl.dur
    self_ns = correlate.self_times(ts, nesting.dur, nesting.parent)

    builder = ProfileBuilder(SAMPLE_TYPES)
    roots, labels = _thread_roots(builder, col)
    names = list(col.names)
    frame_of = [builder.frame(n or UNNAMED, FrameKind.UNKNOWN) for n in names]
    stacks = [0] * ts.shape[0]
    child = builder.stacks.child
    order, parent = nesting.order.tolist(), nesting.parent.tolist()
    th_l, nm_l = thread.tolist(), name.tolist()
    for i in order:  # parents before children
        p = parent[i]
        stacks[i] = child(stacks[p] if p >= 0 else roots[th_l[i]], frame_of[nm_l[i]])
    stack_of = np.asarray(stacks, dtype=np.int64)
    keep = self_ns > 0
    lab = labels[thread[keep]]
    uniq, inverse = unique_rows(stack_of[keep], lab)
    sums = np.bincount(inverse, weights=self_ns[keep], minlength=uniq.shape[0])
    builder.add_many(uniq[:, 0], sums.reshape(-1, 1), uniq[:, 1])
    _add_gpu_idle(builder, _trace_data(source.path, sl))

    first, last = int(ts.min()), int((ts + dur).max())
    builder.meta.update(
        {
            "format": FORMAT,
            "default_type": 0,
            "time_range_ns": (int(base) * 1000 + first, int(base) * 1000 + last),
            "info:slices": (
                f"{sl.complete:,} complete (X), {len(ts) - sl.complete:,} begin/end pairs (B/E) "
                f"on {n_threads:,} thread(s)"
            ),
        }
    )
    if warnings:
        builder.meta["info:warnings"] = "; ".join(
            f"{n:,} {what}" for what, n in warnings.most_common()
        )
    if col.ignored:
        builder.meta["info:not used"] = ", ".join(
            f"{c} {n:,}" for c, n in col.ignored.most_common()
        )
    return builder.build()


def _add_gpu_idle(builder: ProfileBuilder, trace: TraceData) -> None:
    """``gpu-idle`` of the GPU stream tracks, where there are some: launches are not
    linked in this format, so all of it is under ``[GPU idle: unexplained]``."""
    if trace.gpu_ts.size < 2:
        return
    column = builder.add_type(GPU_IDLE)
    add_gpu_idle(builder, column, trace, np.zeros(0, np.int64), lambda th: np.zeros_like(th))


def _thread_roots(builder: ProfileBuilder, col: _Collector) -> tuple[list[int], np.ndarray]:
    """Per thread: the stack of its process/thread LABEL frames (where named), its labels."""
    roots: list[int] = []
    labels = np.zeros(len(col.thread_keys), dtype=np.int64)
    for t, (pid, tid) in enumerate(col.thread_keys):
        frames = []
        pname = col.process_names.get(pid)
        if pname:
            frames.append(builder.frame(f"{pname} ({pid})", FrameKind.LABEL))
        tname = col.thread_names.get((pid, tid))
        if tname:
            frames.append(builder.frame(f"{tname} ({tid})", FrameKind.LABEL))
        roots.append(builder.stack(frames) if frames else EMPTY_STACK)
        labels[t] = builder.labels({"pid": pid, "tid": tid})
    return roots, labels


# Tracks of GPU work in traces of other profilers: JAX/TensorFlow name the process of a GPU
# "/device:GPU:0" and its threads "Stream #12(...)"; Perfetto/Chrome-trace exports of
# other GPU profilers name processes or threads after the GPU or its streams.
_GPU_PROCESS = re.compile(r"/device:(GPU|TPU)|\bGPU\b|\bgpu\b|\bHIP\b|\bCUDA\b")
_GPU_THREAD = re.compile(r"\bstream\b", re.IGNORECASE)
_NOT_ACTIVITY = re.compile(r"XLA (Ops|Modules)|Steps|TraceMe|Framework", re.IGNORECASE)
_COPY = re.compile(r"memcpy|MemcpyD2H|MemcpyH2D|copy_start|copyBuffer", re.IGNORECASE)
_SET = re.compile(r"memset", re.IGNORECASE)


def _gpu_threads(col: _Collector) -> tuple[np.ndarray, list[str]]:
    """Per thread: is it a GPU stream (its activities are GPU work), and its device name."""
    is_gpu = np.zeros(len(col.thread_keys), dtype=bool)
    device = [""] * len(col.thread_keys)
    for t, (pid, tid) in enumerate(col.thread_keys):
        pname = col.process_names.get(pid, "")
        tname = col.thread_names.get((pid, tid), "")
        if _NOT_ACTIVITY.search(tname):
            continue
        on_gpu = _GPU_PROCESS.search(pname) and (not tname or _GPU_THREAD.search(tname))
        if on_gpu or _GPU_THREAD.search(tname):
            is_gpu[t] = True
            device[t] = pname or str(pid)
    return is_gpu, device


def trace_input(source: Input, **_: object) -> TraceInput:
    """A generic trace for ``aiflame analyze``: slices on GPU stream tracks (by process and
    thread names) are GPU activity, the others CPU slices; the format links no launch to
    its GPU work, so idle time is measured but not explained by CPU stacks."""
    sl = _slices(source)
    trace = _trace_data(source.path, sl)

    def profile() -> Profile:
        return load(source)

    return TraceInput(FORMAT, trace, profile)


def _trace_data(path: str, sl: _Slices) -> TraceData:
    """The analysis columns of the slices: GPU activity on stream tracks, CPU slices."""
    col = sl.col
    is_gpu, device_of = _gpu_threads(col)
    names = list(col.names)
    ids = {n: i for i, n in enumerate(names)}

    def intern(text: str) -> int:
        if text not in ids:
            ids[text] = len(names)
            names.append(text)
        return ids[text]

    gpu = is_gpu[sl.thread] if sl.thread.size else np.zeros(0, dtype=bool)
    # A stream track's slices may nest (a module span over its kernels): the leaves are work.
    has_child = np.zeros(sl.ts.size, dtype=bool)
    par = sl.nesting.parent
    has_child[par[par >= 0]] = True
    g = np.nonzero(gpu & ~has_child)[0]
    c = np.nonzero(~gpu)[0]
    kind = np.full(g.size, Kind.COMPUTE, dtype=np.int8)
    for k, n in enumerate(sl.name[g].tolist()):
        text = names[n]
        if _COPY.search(text):
            kind[k] = Kind.MEMCPY
        elif _SET.search(text):
            kind[k] = Kind.MEMSET
        elif is_communication(text):
            kind[k] = Kind.COMM
    device = np.asarray([intern(device_of[t]) for t in sl.thread[g].tolist()], dtype=np.int64)
    stream = np.asarray(
        [intern(col.thread_names.get(col.thread_keys[t], str(t))) for t in sl.thread[g].tolist()],
        dtype=np.int64,
    )
    cpu_index = np.full(sl.ts.size, -1, dtype=np.int64)
    cpu_index[c] = np.arange(c.size)
    cpu_parent = np.where(par[c] >= 0, cpu_index[np.maximum(par[c], 0)], -1)
    order = np.argsort(sl.ts[g], kind="stable")
    g, kind, device, stream = g[order], kind[order], device[order], stream[order]
    none = np.full(g.size, -1, dtype=np.int64)
    trace = TraceData(
        path=path,
        rank=None,
        gpu_ts=sl.ts[g],
        gpu_dur=sl.dur[g],
        gpu_kind=kind,
        gpu_name=sl.name[g],
        gpu_device=device,
        gpu_launch=none,
        gpu_op=none.copy(),
        cpu_ts=sl.ts[c],
        cpu_dur=sl.nesting.dur[c],  # partial overlaps resolved: children inside parents
        cpu_name=sl.name[c],
        cpu_is_op=np.zeros(c.size, dtype=bool),
        cpu_parent=cpu_parent,
        names=names,
        format=FORMAT,
        cpu_is_runtime=np.zeros(c.size, dtype=bool),
        cpu_thread=sl.thread[c],
        gpu_stream=stream,
    )
    trace.notes.append(
        "a generic Chrome trace links no CPU launch to its GPU work: idle time is measured "
        "but not explained by CPU stacks"
        if g.size
        else "no GPU stream tracks in this trace (processes or threads named after a GPU or "
        "its streams, as JAX's /device:GPU:0)"
    )
    return trace


def trace(source: Input, **options: object) -> TraceData:
    return trace_input(source, **options).trace


def load_timeline(source: Input, **_: object) -> Timeline:
    """The trace's slices on its processes and threads (B/E pairs as complete slices).
    Categories, ``args`` and flows of generic traces are not read, so not kept."""
    sl = _slices(source)
    col, base, thread, ts, dur, name, seq = (
        sl.col,
        sl.base_us,
        sl.thread,
        sl.ts,
        sl.dur,
        sl.name,
        sl.seq,
    )
    b = TimelineBuilder()
    tracks = np.asarray(
        [
            b.track(pid, tid, col.process_names.get(pid, ""), col.thread_names.get((pid, tid), ""))
            for pid, tid in col.thread_keys
        ],
        dtype=np.int32,
    )
    names = np.asarray([b.string(n or UNNAMED) for n in col.names], dtype=np.int32)
    order = np.lexsort((seq, ts))
    b.add_many(
        tracks[thread[order]],
        round(base * 1000) + ts[order],
        dur[order],
        names[name[order]],
        np.full(order.size, b.string(""), dtype=np.int32),
    )
    b.meta["format"] = FORMAT
    return b.build()
