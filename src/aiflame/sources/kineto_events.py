"""Collect the events of a Kineto trace into compact columns (numpy arrays).

Only what the flame graphs need is kept: for CPU-side slices (Python functions, operators,
annotations, runtime/driver calls) the thread, start, duration, name, correlation id and
``Call stack``; for GPU-side activity (kernels, memcpy, memset, MTIA device events) the
device, stream, start, duration, name and correlation id; and the ``ac2g`` flow arrows.
About 40 bytes per event instead of the ~1 KB a parsed event dict costs.

Categories across trace generations: ``python_function``, ``cpu_op``/``Operator``,
``user_annotation``, ``cuda_runtime``/``cuda_driver``/``Runtime``/``mtia_runtime`` (any
``*_runtime``/``*_driver``), ``kernel``/``Kernel``, ``gpu_memcpy``/``Memcpy``,
``gpu_memset``/``Memset``, ``mtia_ccp_events``. Everything else is counted, not used.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np


class Cls:
    """Event classes (small ints stored per event)."""

    IGNORED = 0
    PYTHON = 1
    OP = 2
    ANNOTATION = 3
    RUNTIME = 4
    KERNEL = 5
    MEMCPY = 6
    MEMSET = 7

    CPU = frozenset({PYTHON, OP, ANNOTATION, RUNTIME})
    GPU = frozenset({KERNEL, MEMCPY, MEMSET})


_CATEGORIES = {
    "python_function": Cls.PYTHON,
    "cpu_op": Cls.OP,
    "operator": Cls.OP,
    "user_annotation": Cls.ANNOTATION,
    "runtime": Cls.RUNTIME,
    "kernel": Cls.KERNEL,
    "mtia_ccp_events": Cls.KERNEL,
    "gpu_memcpy": Cls.MEMCPY,
    "memcpy": Cls.MEMCPY,
    "gpu_memset": Cls.MEMSET,
    "memset": Cls.MEMSET,
}
_TYPECODE = {"corr": "q", "id": "q"}  # 64-bit ids; others "i" (32-bit), times "d"
_FLOW_CATEGORIES = frozenset({"ac2g", "async"})  # "async"/"launch": the 2021 layout


def classify(category: object) -> int:
    """Event class of a Kineto ``cat`` value."""
    if not isinstance(category, str):
        return Cls.IGNORED
    c = category.lower()
    found = _CATEGORIES.get(c)
    if found is not None:
        return found
    if c.endswith(("_runtime", "_driver")):
        return Cls.RUNTIME
    return Cls.IGNORED


class Args(msgspec.Struct, gc=False):
    """The ``args`` fields that are read; all others are skipped while decoding."""

    correlation: Any = None
    stream: Any = None
    device: Any = None
    call_stack: Any = msgspec.field(default=None, name="Call stack")


class Event(msgspec.Struct, gc=False):
    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    id: Any = None
    args: Args | None = None


class ShapeArgs(Args, gc=False):
    """:class:`Args` plus the recorded shapes and dtypes of operator inputs (opt-in)."""

    input_dims: Any = msgspec.field(default=None, name="Input Dims")
    input_type: Any = msgspec.field(default=None, name="Input type")
    concrete_inputs: Any = msgspec.field(default=None, name="Concrete Inputs")
    bytes: Any = None  # of a memcpy/memset


class ShapeEvent(Event, gc=False):
    """An event whose operator input shapes are read too (``EventCollector(shapes=True)``)."""

    args: ShapeArgs | None = None


def coerce_event(item: Any, shapes: bool = False) -> Event | None:
    """Build an :class:`Event` from a plain decoded item (the slow path for odd events)."""
    if not isinstance(item, dict):
        return None
    raw = item.get("args")
    args = None
    if isinstance(raw, dict):
        fields = (raw.get("correlation"), raw.get("stream"), raw.get("device"))
        if shapes:
            args = ShapeArgs(
                *fields,
                raw.get("Call stack"),
                raw.get("Input Dims"),
                raw.get("Input type"),
                raw.get("Concrete Inputs"),
                raw.get("bytes"),
            )
        else:
            args = Args(*fields, raw.get("Call stack"))
    get = item.get
    return (ShapeEvent if shapes else Event)(
        get("ph"),
        get("cat"),
        get("name"),
        get("pid"),
        get("tid"),
        get("ts"),
        get("dur"),
        get("id"),
        args,
    )


# Times are int64 nanoseconds from the trace's start: microseconds beyond this (73 years)
# would not fit once a start and a duration are added. A trace holding one is corrupt.
MAX_US = float(2**62) / 1000.0


class TimeOutOfRange(ValueError):
    """An event time or duration that no nanosecond column can hold."""


def us_to_ns(us: array, base: float, what: str) -> np.ndarray:
    """Microseconds (floats, from ``base``) as int64 nanoseconds; raises
    :class:`TimeOutOfRange` for one beyond :data:`MAX_US` (or not a number)."""
    v = np.frombuffer(us, dtype=np.float64) if len(us) else np.zeros(0)
    rel = v - base if base else v
    if not np.all(np.abs(rel) < MAX_US):  # NaN and infinities fail too
        bad = float(v[~(np.abs(rel) < MAX_US)][0])
        raise TimeOutOfRange(
            f"an event's {what} is {bad:g} us, more than 64-bit nanoseconds hold "
            f"(up to {MAX_US:.2g} us from the trace's start)"
        )
    return np.rint(rel * 1000.0).astype(np.int64)


def _number(v: Any) -> float | int | None:
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else None  # NaN and infinities are no time
    if isinstance(v, str):
        try:
            f = float(v)
        except ValueError:
            return None
        return f if math.isfinite(f) else None
    return None


def _ident(v: Any) -> Any:
    """pid/tid/stream as written: '5555' and 5555 are the same thread."""
    if isinstance(v, str) and v.isdigit():
        return int(v)
    return v


def _int_or(v: Any, default: int = -1) -> int:
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if isinstance(v, str) and v.lstrip("-").isdigit():
        return int(v)
    return default


@dataclass
class Columns:
    """Frozen columns of one trace (see :class:`EventCollector`)."""

    # CPU slices
    cpu_thread: np.ndarray
    cpu_ts: np.ndarray  # ns, relative to base_us
    cpu_dur: np.ndarray
    cpu_cls: np.ndarray
    cpu_name: np.ndarray  # index into names
    cpu_corr: np.ndarray  # -1: none
    cpu_stack: np.ndarray  # index into call_stacks, -1: none
    # GPU activity
    gpu_thread: np.ndarray  # the GPU event's own (pid, tid), to find its flow arrow
    gpu_ts: np.ndarray
    gpu_dur: np.ndarray
    gpu_cls: np.ndarray
    gpu_name: np.ndarray
    gpu_corr: np.ndarray
    gpu_device: np.ndarray  # index into names
    gpu_stream: np.ndarray  # index into names
    # flow arrows: start (launch side) and finish (GPU side)
    flow_s: tuple[np.ndarray, np.ndarray, np.ndarray]  # thread, ts, id
    flow_f: tuple[np.ndarray, np.ndarray, np.ndarray]
    names: list[str]
    call_stacks: list[str]
    threads: list[tuple[Any, Any]]
    base_us: float
    warnings: Counter[str] = field(default_factory=Counter)
    ignored: Counter[str] = field(default_factory=Counter)
    # With EventCollector(shapes=True): per CPU slice an index into `shapes` (-1: none),
    # each entry an operator's (Input Dims, Input type, Concrete Inputs) as recorded; per
    # GPU activity the bytes it copied or set (-1: not recorded).
    cpu_shape: np.ndarray | None = None
    shapes: list[tuple[Any, Any, Any]] = field(default_factory=list)
    gpu_bytes: np.ndarray | None = None


class EventCollector:
    """Feed batches of :class:`Event` with :meth:`add`; :meth:`freeze` gives :class:`Columns`."""

    def __init__(self, shapes: bool = False) -> None:
        self.shapes = shapes
        self.event_type: type[Event] = ShapeEvent if shapes else Event
        self._shape_ids: dict[bytes, int] = {}
        self._shape_list: list[tuple[Any, Any, Any]] = []
        self.cpu_shape = array("i")
        self.gpu_bytes = array("q")

        # Times are kept as written (float microseconds) and converted to integer ns
        # relative to the first event in numpy, once.
        # Ids that index small tables (threads, names, classes) fit in 32 bits.
        def cols(*keys: str) -> dict[str, array]:
            return {k: array("d" if k in ("ts", "dur") else _TYPECODE.get(k, "i")) for k in keys}

        self.cpu = cols("thread", "ts", "dur", "cls", "name", "corr", "stack")
        self.gpu = cols("thread", "ts", "dur", "cls", "name", "corr", "device", "stream")
        self.flow_s = cols("thread", "ts", "id")
        self.flow_f = cols("thread", "ts", "id")
        self._names: dict[str, int] = {}
        self._stacks: dict[str, int] = {}
        self._threads: dict[tuple[Any, Any], int] = {}
        self.thread_keys: list[tuple[Any, Any]] = []
        self._classes: dict[Any, int] = {}
        self.base_us: float | None = None
        self.warnings: Counter[str] = Counter()
        self.ignored: Counter[str] = Counter()

    def _intern(self, table: dict[str, int], s: str) -> int:
        i = table.get(s)
        if i is None:
            i = table[s] = len(table)
        return i

    def _thread(self, pid: Any, tid: Any) -> int:
        try:
            i = self._threads.get((pid, tid))
        except TypeError:  # a list or object as pid/tid
            pid, tid = str(pid), str(tid)
            i = self._threads.get((pid, tid))
        if i is None:
            key = (_ident(pid), _ident(tid))
            i = self._threads.get(key)
            if i is None:
                i = len(self.thread_keys)
                self.thread_keys.append(key)
            self._threads[(pid, tid)] = self._threads[key] = i
        return i

    def add(self, events: list[Event]) -> None:
        """Collect one batch (the hot loop: locals bound up front, no per-event calls)."""
        classes, names, threads = self._classes, self._names, self._threads
        warn = self.warnings
        cpu, gpu = self.cpu, self.gpu
        c_thread, c_ts, c_dur, c_cls, c_name, c_corr, c_stack = (
            cpu[k].append for k in ("thread", "ts", "dur", "cls", "name", "corr", "stack")
        )
        g_thread, g_ts, g_dur, g_cls, g_name, g_corr, g_device, g_stream = (
            gpu[k].append
            for k in ("thread", "ts", "dur", "cls", "name", "corr", "device", "stream")
        )
        base = self.base_us
        etype, shapes = self.event_type, self.shapes
        for e in events:
            if type(e) is not etype:
                e = coerce_event(e, shapes)  # plain dicts, from a batch that fell back
                if e is None:
                    warn["events that are not JSON objects"] += 1
                    continue
            ph = e.ph
            if ph == "X":
                cat = e.cat
                cls = classes.get(cat) if type(cat) is str else Cls.IGNORED
                if cls is None:
                    cls = classes[cat] = classify(cat)
                if not cls:
                    self.ignored["(no category)" if cat is None else str(cat)] += 1
                    continue
                ts, dur = e.ts, e.dur
                if type(ts) is not float and type(ts) is not int:
                    ts = _number(ts)
                if type(dur) is not float and type(dur) is not int:
                    dur = _number(dur)
                if ts is None or dur is None:
                    warn["events without ts or dur"] += 1
                    continue
                if dur < 0:
                    warn["events with a negative duration"] += 1
                    continue
                if base is None:
                    base = self.base_us = int(ts)
                name = e.name
                nid = names.get(name) if type(name) is str else None
                if nid is None:
                    name = name if type(name) is str else ("" if name is None else str(name))
                    nid = names.get(name)
                    if nid is None:
                        nid = names[name] = len(names)
                try:
                    th = threads.get((e.pid, e.tid))
                except TypeError:
                    th = None
                if th is None:
                    th = self._thread(e.pid, e.tid)
                args = e.args
                corr = -1
                if args is not None:
                    corr = args.correlation
                    if type(corr) is not int:
                        corr = -1 if corr is None else _int_or(corr)
                if cls < Cls.KERNEL:
                    cs = -1
                    if args is not None and args.call_stack:
                        cs = self._intern(self._stacks, str(args.call_stack))
                    c_stack(cs)
                    if shapes:
                        self.cpu_shape.append(self._shape(args, cls))
                    c_thread(th)
                    c_ts(ts)
                    c_dur(dur)
                    c_cls(cls)
                    c_name(nid)
                    c_corr(corr)
                else:
                    dev = stream = None
                    if args is not None:
                        dev, stream = args.device, args.stream
                    if shapes:
                        self.gpu_bytes.append(_int_or(getattr(args, "bytes", None)))
                    g_device(self._intern(names, str(_ident(e.pid if dev is None else dev))))
                    g_stream(self._intern(names, str(_ident(e.tid if stream is None else stream))))
                    g_thread(th)
                    g_ts(ts)
                    g_dur(dur)
                    g_cls(cls)
                    g_name(nid)
                    g_corr(corr)
            elif ph == "B" or ph == "E":
                self.ignored[f"'{ph}' (begin/end) events"] += 1  # Kineto writes 'X' slices
            elif ph == "s" or ph == "f":
                if e.cat not in _FLOW_CATEGORIES:
                    continue
                ts = e.ts
                if type(ts) is not float and type(ts) is not int:
                    ts = _number(ts)
                fid = e.id
                if type(fid) is not int:
                    fid = _int_or(fid)
                if ts is None or fid < 0:
                    warn["flow events without ts or id"] += 1
                    continue
                if base is None:
                    base = self.base_us = int(ts)
                flows = self.flow_s if ph == "s" else self.flow_f
                flows["thread"].append(self._thread(e.pid, e.tid))
                flows["ts"].append(ts)
                flows["id"].append(fid)

    def _shape(self, args: Any, cls: int) -> int:
        """Index of an operator's (Input Dims, Input type), -1 when it has none."""
        dims = getattr(args, "input_dims", None) if cls == Cls.OP else None
        if not dims:
            return -1
        types = getattr(args, "input_type", None)
        concrete = getattr(args, "concrete_inputs", None)
        key = msgspec.json.encode((dims, types, concrete))
        i = self._shape_ids.get(key)
        if i is None:
            i = self._shape_ids[key] = len(self._shape_list)
            self._shape_list.append((dims, types, concrete))
        return i

    def freeze(self) -> Columns:
        base = float(self.base_us or 0)

        def np_(a: array) -> np.ndarray:
            if a.typecode in "qi":
                dtype = np.int64 if a.typecode == "q" else np.int32
                return np.frombuffer(a, dtype=dtype) if len(a) else np.zeros(0, dtype)
            return us_to_ns(a, 0.0, "duration")

        def ts_(a: array) -> np.ndarray:
            return us_to_ns(a, base, "time")

        cpu = {k: ts_(v) if k == "ts" else np_(v) for k, v in self.cpu.items()}
        gpu = {k: ts_(v) if k == "ts" else np_(v) for k, v in self.gpu.items()}
        return Columns(
            cpu["thread"],
            cpu["ts"],
            cpu["dur"],
            cpu["cls"],
            cpu["name"],
            cpu["corr"],
            cpu["stack"],
            gpu["thread"],
            gpu["ts"],
            gpu["dur"],
            gpu["cls"],
            gpu["name"],
            gpu["corr"],
            gpu["device"],
            gpu["stream"],
            (np_(self.flow_s["thread"]), ts_(self.flow_s["ts"]), np_(self.flow_s["id"])),
            (np_(self.flow_f["thread"]), ts_(self.flow_f["ts"]), np_(self.flow_f["id"])),
            list(self._names),
            list(self._stacks),
            list(self.thread_keys),
            float(self.base_us or 0),
            self.warnings,
            self.ignored,
            np_(self.cpu_shape) if self.shapes else None,
            self._shape_list,
            np_(self.gpu_bytes) if self.shapes else None,
        )
