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

from aiflame.transforms import correlate


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
    # of process_name / thread_name / process_labels / *_sort_index metadata ('M') events
    name: Any = None
    labels: Any = None
    sort_index: Any = None


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


class KernelArgs(ShapeArgs, gc=False):
    """:class:`ShapeArgs` plus the kernel a launch call names (ROCm traces; opt-in, for the
    trace of a graph's capture)."""

    kernel: Any = None


class KernelEvent(Event, gc=False):
    """A :class:`ShapeEvent` whose launch calls' kernel names are read too."""

    args: KernelArgs | None = None


class MemoryArgs(Args, gc=False):
    """:class:`Args` plus the fields of ``[memory]`` events (``profile_memory=True``)."""

    nbytes: Any = msgspec.field(default=None, name="Bytes")  # > 0 allocated, < 0 freed
    addr: Any = msgspec.field(default=None, name="Addr")
    device_type: Any = msgspec.field(default=None, name="Device Type")
    device_id: Any = msgspec.field(default=None, name="Device Id")
    total_allocated: Any = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Any = msgspec.field(default=None, name="Total Reserved")


class MemoryEvent(Event, gc=False):
    """An event whose ``[memory]`` fields are read too (``EventCollector(memory=True)``)."""

    args: MemoryArgs | None = None


class AnalysisArgs(KernelArgs, gc=False):
    """All of the above: shapes, launch calls' kernels and ``[memory]`` fields (what
    ``aiflame analyze`` reads)."""

    nbytes: Any = msgspec.field(default=None, name="Bytes")
    addr: Any = msgspec.field(default=None, name="Addr")
    device_type: Any = msgspec.field(default=None, name="Device Type")
    device_id: Any = msgspec.field(default=None, name="Device Id")
    total_allocated: Any = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Any = msgspec.field(default=None, name="Total Reserved")


class AnalysisEvent(Event, gc=False):
    args: AnalysisArgs | None = None


def _event_type(shapes: bool, memory: bool, kernels: bool) -> type[Event]:
    if memory and (shapes or kernels):
        return AnalysisEvent
    return MemoryEvent if memory else KernelEvent if kernels else ShapeEvent if shapes else Event


MEMORY_EVENT = "[memory]"
# c10::DeviceType values as Kineto writes them in "Device Type" (ROCm reports CUDA, 1).
DEVICE_TYPES = {0: "cpu", 1: "cuda", 6: "hip", 9: "xla", 12: "xpu", 13: "mps", 19: "mtia"}
GPU_DEVICE_TYPES = frozenset({"cuda", "hip", "xpu", "mps", "mtia"})


def device_name(device_type: Any, device_id: Any) -> str:
    """``cuda:0``, ``cpu``: a ``[memory]`` event's device as PyTorch names it."""
    kind = _int_or(device_type)
    name = DEVICE_TYPES.get(kind, f"device type {kind}" if kind >= 0 else "unknown device")
    index = _int_or(device_id)
    return f"{name}:{index}" if index >= 0 else name


def coerce_event(
    item: Any, shapes: bool = False, memory: bool = False, kernels: bool = False
) -> Event | None:
    """Build an :class:`Event` from a plain decoded item (the slow path for odd events)."""
    if not isinstance(item, dict):
        return None
    raw = item.get("args")
    args: Any = None  # of the Args type that goes with the event type below
    if isinstance(raw, dict):
        fields = {
            "correlation": raw.get("correlation"),
            "stream": raw.get("stream"),
            "device": raw.get("device"),
            "call_stack": raw.get("Call stack"),
            "name": raw.get("name"),
            "labels": raw.get("labels"),
            "sort_index": raw.get("sort_index"),
        }
        memory_fields = {
            "nbytes": raw.get("Bytes"),
            "addr": raw.get("Addr"),
            "device_type": raw.get("Device Type"),
            "device_id": raw.get("Device Id"),
            "total_allocated": raw.get("Total Allocated"),
            "total_reserved": raw.get("Total Reserved"),
        }
        if memory and (shapes or kernels):
            args = AnalysisArgs(
                **fields,
                input_dims=raw.get("Input Dims"),
                input_type=raw.get("Input type"),
                concrete_inputs=raw.get("Concrete Inputs"),
                bytes=raw.get("bytes"),
                kernel=raw.get("kernel"),
                **memory_fields,
            )
        elif memory:
            args = MemoryArgs(
                **fields,
                nbytes=raw.get("Bytes"),
                addr=raw.get("Addr"),
                device_type=raw.get("Device Type"),
                device_id=raw.get("Device Id"),
                total_allocated=raw.get("Total Allocated"),
                total_reserved=raw.get("Total Reserved"),
            )
        elif shapes or kernels:
            shape_fields = {
                "input_dims": raw.get("Input Dims"),
                "input_type": raw.get("Input type"),
                "concrete_inputs": raw.get("Concrete Inputs"),
                "bytes": raw.get("bytes"),
            }
            if kernels:
                args = KernelArgs(**fields, **shape_fields, kernel=raw.get("kernel"))
            else:
                args = ShapeArgs(**fields, **shape_fields)
        else:
            args = Args(**fields)
    get = item.get
    event_type = _event_type(shapes, memory, kernels)
    return event_type(
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


class ValueOutOfRange(ValueError):
    """An id, size or address beyond what an int64 column holds."""


# (JSON key, where it is) of the integers kept in int64 columns.
_INT64_FIELDS = (
    ("correlation", "args"),
    ("bytes", "args"),
    ("Bytes", "args"),
    ("Addr", "args"),
    ("id", "event"),
)
_INT64 = (-(2**63), 2**63 - 1)


def _beyond_int64(e: Any) -> str | None:
    """What of event ``e`` no int64 holds, said in a sentence, or None."""
    attrs = {"correlation": "correlation", "bytes": "bytes", "Bytes": "nbytes", "Addr": "addr"}
    for key, where in _INT64_FIELDS:
        if where == "event":
            v = e.get(key) if isinstance(e, dict) else getattr(e, key, None)
        else:
            args = e.get("args") if isinstance(e, dict) else getattr(e, "args", None)
            if isinstance(args, dict):
                v = args.get(key)
            else:
                v = getattr(args, attrs[key], None) if args is not None else None
        if type(v) is str and v.lstrip("-").isdigit():
            v = int(v)
        if type(v) is int and not _INT64[0] <= v <= _INT64[1]:
            field = f"args.{key}" if where == "args" else key
            return f"an event's {field} is {v}, beyond 64-bit integers"
    return None


def us_to_ns(us: array, base: float, what: str) -> np.ndarray:
    """Microseconds (floats, from ``base``) as int64 nanoseconds; raises
    :class:`TimeOutOfRange` for one beyond :data:`MAX_US` (or not a number)."""
    v = np.frombuffer(us, dtype=np.float64) if len(us) else np.zeros(0)
    if not abs(base) < MAX_US:  # the trace's start itself (NaN too)
        raise TimeOutOfRange(
            f"an event's time is {base:g} us, more than 64-bit nanoseconds hold "
            f"(up to {MAX_US:.2g} us)"
        )
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
    # ...and per CPU slice the kernel a launch call names (index into names, -1: none).
    cpu_kernel: np.ndarray | None = None
    # From the metadata ('M') events: names, labels and sort order of processes and threads,
    # keyed by pid and by (pid, tid) as in `threads`.
    process_meta: dict[Any, dict[str, Any]] = field(default_factory=dict)
    thread_meta: dict[tuple[Any, Any], dict[str, Any]] = field(default_factory=dict)
    categories: dict[str, int] = field(default_factory=dict)  # each `cat` seen -> its class
    # With EventCollector(memory=True): the ``[memory]`` events.
    memory: MemoryColumns | None = None


@dataclass
class MemoryColumns:
    """``[memory]`` events in trace order: allocations (bytes > 0) and frees (< 0)."""

    thread: np.ndarray  # index into Columns.threads
    ts: np.ndarray  # ns, relative to base_us like the slices
    nbytes: np.ndarray  # int64
    addr: np.ndarray  # int64, -1: not recorded (2021 traces)
    device: np.ndarray  # index into Columns.names ("cuda:0", "cpu")
    total_allocated: np.ndarray  # float64, NaN: not recorded
    total_reserved: np.ndarray


class EventCollector:
    """Feed batches of :class:`Event` with :meth:`add`; :meth:`freeze` gives :class:`Columns`."""

    def __init__(self, shapes: bool = False, memory: bool = False, kernels: bool = False) -> None:
        """``kernels``: read the kernel names of launch calls too (implies ``shapes``)."""
        shapes = shapes or kernels
        self.shapes, self.memory, self.kernels = shapes, memory, kernels
        self.event_type: type[Event] = _event_type(shapes, memory, kernels)
        self._shape_ids: dict[bytes, int] = {}
        self._shape_list: list[tuple[Any, Any, Any]] = []
        self.cpu_shape = array("i")
        self.cpu_kernel = array("i")
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
        self.mem: dict[str, array] = {
            "thread": array("i"),
            "ts": array("d"),
            "nbytes": array("q"),
            "addr": array("q"),
            "device": array("i"),
            "total_allocated": array("d"),
            "total_reserved": array("d"),
        }
        self._names: dict[str, int] = {}
        self._stacks: dict[str, int] = {}
        self._threads: dict[tuple[Any, Any], int] = {}
        self.thread_keys: list[tuple[Any, Any]] = []
        self._classes: dict[Any, int] = {}
        self.base_us: float | None = None
        self.warnings: Counter[str] = Counter()
        self.ignored: Counter[str] = Counter()
        self.process_meta: dict[Any, dict[str, Any]] = {}
        self.thread_meta: dict[tuple[Any, Any], dict[str, Any]] = {}

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
        """Collect one batch; an integer no int64 column holds is one :class:`ValueOutOfRange`
        naming its field."""
        try:
            self._add(events)
        except OverflowError:
            for e in events:
                problem = _beyond_int64(e)
                if problem:
                    raise ValueOutOfRange(problem) from None
            raise

    def _add(self, events: list[Event]) -> None:
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
        etype, shapes, memory, kernels = self.event_type, self.shapes, self.memory, self.kernels
        e: Event | None
        for e in events:
            if type(e) is not etype:
                e = coerce_event(
                    e, shapes, memory, kernels
                )  # plain dicts, from a batch that fell back
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
                    if kernels:
                        kernel = getattr(args, "kernel", None) if cls == Cls.RUNTIME else None
                        self.cpu_kernel.append(
                            self._intern(names, kernel) if type(kernel) is str else -1
                        )
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
            elif ph == "M":
                self._metadata(e)
            elif ph == "i" and memory and e.name == MEMORY_EVENT:
                self._memory_event(e)
                base = self.base_us
            elif ph == "B" or ph == "E":
                self.ignored[f"'{ph}' (begin/end) events"] += 1  # Kineto writes 'X' slices
            elif ph == "s" or ph == "f":
                if type(e.cat) is not str or e.cat not in _FLOW_CATEGORIES:
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

    def _metadata(self, e: Event) -> None:
        """Names and order of processes and threads, for timelines (not flame graphs)."""
        args = e.args
        kind = e.name
        if args is None or not isinstance(kind, str):
            return
        what, _, key = kind.partition("_")  # process_name -> ("process", "name")
        value = {"name": args.name, "labels": args.labels, "index": args.sort_index}.get(
            key.removeprefix("sort_")
        )
        if value is None or what not in ("process", "thread"):
            return
        try:
            if what == "process":
                self.process_meta.setdefault(_ident(e.pid), {})[key] = value
            else:
                self.thread_meta.setdefault((_ident(e.pid), _ident(e.tid)), {})[key] = value
        except TypeError:  # an unhashable pid/tid: no name for it
            pass

    def _memory_event(self, e: Any) -> None:
        """Keep one ``[memory]`` event (rare next to slices: no need for the hot loop)."""
        args = e.args
        ts = _number(e.ts)
        nbytes = _int_or(getattr(args, "nbytes", None), 0) if args is not None else 0
        if ts is None or not nbytes:
            self.warnings["[memory] events without ts or Bytes"] += 1
            return
        if self.base_us is None:
            self.base_us = int(ts)
        mem = self.mem
        mem["thread"].append(self._thread(e.pid, e.tid))
        mem["ts"].append(ts)
        mem["nbytes"].append(nbytes)
        mem["addr"].append(_int_or(args.addr))
        device = device_name(args.device_type, args.device_id)
        mem["device"].append(self._intern(self._names, device))
        for key in ("total_allocated", "total_reserved"):
            v = _number(getattr(args, key))
            mem[key].append(float("nan") if v is None else float(v))

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
            np_(self.cpu_kernel).astype(np.int64) if self.kernels else None,
            memory=self._freeze_memory(ts_) if self.memory else None,
            process_meta=self.process_meta,
            thread_meta=self.thread_meta,
            categories={c: k for c, k in self._classes.items() if isinstance(c, str)},
        )

    def _freeze_memory(self, ts_: Any) -> MemoryColumns:
        mem = self.mem

        def ints(a: array) -> np.ndarray:
            dtype = np.int64 if a.typecode == "q" else np.int32
            return (
                np.frombuffer(a, dtype=dtype).astype(np.int64) if len(a) else np.zeros(0, np.int64)
            )

        def floats(a: array) -> np.ndarray:
            return np.frombuffer(a, dtype=np.float64).copy() if len(a) else np.zeros(0)

        return MemoryColumns(
            ints(mem["thread"]),
            ts_(mem["ts"]),
            ints(mem["nbytes"]),
            ints(mem["addr"]),
            ints(mem["device"]),
            floats(mem["total_allocated"]),
            floats(mem["total_reserved"]),
        )


def correlation_ids(cols: Columns) -> tuple[np.ndarray, np.ndarray]:
    """Correlation ids of CPU slices and GPU activities, taken from ac2g arrows where an
    event's args lack one."""
    cpu_corr, gpu_corr = cols.cpu_corr.copy(), cols.gpu_corr.copy()
    need = np.nonzero(gpu_corr < 0)[0]
    if need.size and cols.flow_f[0].size:
        gpu_corr[need] = correlate.flow_ids(cols.gpu_thread[need], cols.gpu_ts[need], *cols.flow_f)
    need = np.nonzero((cpu_corr < 0) & (cols.cpu_cls == Cls.RUNTIME))[0]
    if need.size and cols.flow_s[0].size:
        cpu_corr[need] = correlate.flow_ids(cols.cpu_thread[need], cols.cpu_ts[need], *cols.flow_s)
    return cpu_corr, gpu_corr
