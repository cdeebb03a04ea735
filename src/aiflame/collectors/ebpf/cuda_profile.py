"""CUDA/HIP API calls recorded by the probes -> a Profile.

Stacks read, root first: the user frames of the call site, the API function as a
``runtime`` frame, and for work sent to the GPU a ``-`` delimiter and what ran there:
the kernel for launches (named from the host stub a runtime launch passes, or from the
name recorded when a driver launch's function handle was created), ``Memcpy HtoD`` etc.
for copies, ``[CUDA graph]`` for graph launches.

Metrics: ``launch-count`` (launch calls, graphs included), ``sync-time`` (ns blocked in
synchronisation calls), ``copy-bytes``, ``alloc-bytes`` and ``alloc-count`` (successful
allocations), ``api-calls`` (every probed call, failed ones too, with label ``error``).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from aiflame.collectors.ebpf.cuda_apis import ALLOC, APIS, COPY, FREE, GRAPH, LAUNCH, SYNC
from aiflame.collectors.ebpf.cuda_events import CallKey, CallSum, EventLog
from aiflame.collectors.ebpf.cuda_libs import parse_maps, read_maps
from aiflame.model import FrameKind, Profile, ProfileBuilder, SampleType
from aiflame.symbolize.cxa import demangle_all

SAMPLE_TYPES = (
    SampleType("launch-count", "count"),
    SampleType("sync-time", "nanoseconds"),
    SampleType("copy-bytes", "bytes"),
    SampleType("alloc-bytes", "bytes"),
    SampleType("alloc-count", "count"),
    SampleType("api-calls", "count"),
)
LAUNCHES, SYNC_NS, COPY_BYTES, ALLOC_BYTES, ALLOC_COUNT, CALLS = range(6)
DELIMITER = "-"
UNKNOWN_KERNEL = "[unknown kernel]"
GRAPH_NAMES = {"cudart": "[CUDA graph]", "cuda": "[CUDA graph]", "hip": "[HIP graph]"}

# (name, kind, module) of one address
FrameInfo = tuple[str, FrameKind, str]
# pid, addresses -> one FrameInfo per address; ``exact`` is False for return addresses
Symbolizer = Callable[[int, Sequence[int], bool], list[FrameInfo]]


@dataclass
class MapsSnapshots:
    """The latest ``/proc/PID/maps`` of each traced process, kept after it exits (stacks
    are symbolized at the end, when short-lived processes are gone)."""

    texts: dict[int, str] = field(default_factory=dict)
    _ranges: dict[int, tuple[list[int], list[int]]] = field(default_factory=dict)

    def refresh(self, pid: int, text: str | None = None) -> bool:
        """Keep ``text`` (the maps just read) or read them now; False if the process is gone."""
        text = read_maps(pid) if text is None else text
        if not text:
            return False
        if self.texts.get(pid) != text:
            self.texts[pid] = text
            maps = sorted((m.start, m.end) for m in parse_maps(text) if "x" in m.perms)
            self._ranges[pid] = ([s for s, _ in maps], [e for _, e in maps])
        return True

    def forget(self, pid: int) -> None:
        self.texts.pop(pid, None)
        self._ranges.pop(pid, None)

    def covers(self, pid: int, addrs: Sequence[int]) -> bool:
        """Do the executable file mappings of the snapshot hold every address?"""
        starts, ends = self._ranges.get(pid, ([], []))
        for a in addrs:
            i = bisect_right(starts, a) - 1
            if i < 0 or a >= ends[i]:
                return False
        return True

    def ensure(self, pid: int, addrs: Sequence[int]) -> None:
        """Read the maps again if some address is outside them (a library loaded since)."""
        if not self.covers(pid, addrs):
            self.refresh(pid)


def resolver_symbolizer(snapshots: MapsSnapshots, resolver: object | None = None) -> Symbolizer:
    """Symbolize with :class:`aiflame.symbolize.process.SymbolResolver` (ELF symbols,
    debug files, perf maps; demangled), from the maps snapshots; pass ``resolver`` to keep
    its caches of files across profiles (a continuous profiler)."""
    from aiflame.symbolize.process import SymbolResolver

    resolver = resolver or SymbolResolver()
    per_pid: dict[int, object] = {}

    def symbolize(pid: int, addrs: Sequence[int], exact: bool) -> list[FrameInfo]:
        proc = per_pid.get(pid)
        if proc is None:
            proc = per_pid[pid] = resolver.process(pid, snapshots.texts.get(pid, ""))  # type: ignore[attr-defined]
        # A return address is the instruction after the call: the call itself is before it.
        look = list(addrs) if exact else [a - 1 if a else a for a in addrs]
        syms = proc.symbolize(look)  # type: ignore[attr-defined]
        return [(s.name, s.kind, s.module) for s in syms]

    return symbolize


UserStackInterner = Callable[[ProfileBuilder, int, int], int]
# (API role, call, its sums) -> one value per sample type
ValueFunction = Callable[[str, CallKey, CallSum], list[float]]


def user_stack_interner(log: EventLog, symbolize: Symbolizer) -> UserStackInterner:
    """``intern(builder, pid, stack)`` -> the builder's stack id of a recorded call site's
    frames, root first (each stack is symbolized once)."""
    infos: dict[tuple[int, int], list[FrameInfo]] = {}
    ids: dict[tuple[int, int, int], int] = {}

    def intern(b: ProfileBuilder, pid: int, stack: int) -> int:
        key = (id(b), pid, stack)
        sid = ids.get(key)
        if sid is None:
            found = infos.get((pid, stack))
            if found is None:
                addrs = log.stacks[stack]
                found = infos[(pid, stack)] = symbolize(pid, addrs, False) if addrs else []
            sid = ids[key] = b.stack([b.frame(n, k, module=m) for n, k, m in reversed(found)])
        return sid

    return intern


class _Frames:
    """Interns the frames of user stacks, kernels and API functions into a builder."""

    def __init__(self, builder: ProfileBuilder, log: EventLog, symbolize: Symbolizer) -> None:
        self.b = builder
        self.log = log
        self.symbolize = symbolize
        self._user = user_stack_interner(log, symbolize)
        self._kernels: dict[tuple[int, int | str | None, int], int] = {}
        self.delimiter = builder.frame(DELIMITER, FrameKind.DELIMITER)

    def user_stack(self, pid: int, stack: int) -> int:
        """Stack id of the call site's frames (root first)."""
        return self._user(self.b, pid, stack)

    def gpu_side(self, key: CallKey) -> list[int]:
        """Frames under the API frame: ``-`` and the kernel, copy or graph."""
        api = APIS[key.api]
        if api.role == COPY:
            return [self.delimiter, self.b.frame(f"Memcpy {key.target}", FrameKind.GPU_KERNEL)]
        if api.role == GRAPH:
            return [self.delimiter, self.b.frame(GRAPH_NAMES[api.family], FrameKind.LABEL)]
        if api.role != LAUNCH:
            return []
        cache = (key.pid, key.target, key.api if api.driver else -1)
        fid = self._kernels.get(cache)
        if fid is None:
            fid = self._kernels[cache] = self._kernel_frame(key.pid, key.target, api.driver)
        return [self.delimiter, fid]

    def _kernel_frame(self, pid: int, target: int | str | None, driver: bool) -> int:
        if driver or not isinstance(target, int):
            name = str(target or "") or UNKNOWN_KERNEL
            return self.b.frame(name, FrameKind.GPU_KERNEL)
        name, _, module = self.symbolize(pid, [target], True)[0]
        return self.b.frame(name, FrameKind.GPU_KERNEL, module=module)


def calls_profile(
    log: EventLog,
    symbolize: Symbolizer,
    comm: dict[int, str] | None = None,
    meta: dict[str, object] | None = None,
    calls: dict[CallKey, CallSum] | None = None,
    sample_types: Sequence[SampleType] = SAMPLE_TYPES,
    values: ValueFunction | None = None,
) -> Profile:
    """The profile of every recorded call (see the module docstring), or of ``calls``
    (those of one period, whose stacks are the log's); ``sample_types`` and ``values``
    (role, call, sums -> one value per type) choose other metrics than record's."""
    values = values or _values
    b = ProfileBuilder(sample_types)
    frames = _Frames(b, log, symbolize)
    api_frames: dict[int, int] = {}
    calls = _readable_kernel_names(log.all_calls() if calls is None else calls)
    for key, s in sorted(calls.items(), key=lambda kv: _order(kv[0])):
        api = APIS[key.api]
        fid = api_frames.get(key.api)
        if fid is None:
            fid = api_frames[key.api] = b.frame(api.name, FrameKind.RUNTIME)
        stack = b.stack([fid, *frames.gpu_side(key)], frames.user_stack(key.pid, key.stack))
        labels: dict[str, object] = {"pid": key.pid, "tid": key.tid}
        if comm and key.pid in comm:
            labels["comm"] = comm[key.pid]
        if key.error:
            labels["error"] = key.error
        if api.memory:
            labels["memory"] = api.memory
        b.add(stack, values(api.role, key, s), b.labels(labels))
    b.meta.update(meta or {})
    b.meta.setdefault("default_type", LAUNCHES)
    return b.build()


def _order(key: CallKey) -> tuple:
    return (key.pid, key.tid, key.api, key.stack, str(key.target), key.error)


def _values(role: str, key: CallKey, s: CallSum) -> list[float]:
    v = [0.0] * len(SAMPLE_TYPES)
    v[CALLS] = s.calls
    if role in (LAUNCH, GRAPH):
        v[LAUNCHES] = s.calls
    elif role == SYNC:
        v[SYNC_NS] = s.duration_ns
    elif role == COPY:
        v[COPY_BYTES] = s.nbytes
    elif role == ALLOC and not key.error:
        v[ALLOC_BYTES] = s.nbytes if s.ok else 0
        v[ALLOC_COUNT] = s.ok
    elif role == FREE:
        pass  # counted in api-calls; freed bytes are the memory tracker's business
    return v


def _readable_kernel_names(calls: dict[CallKey, CallSum]) -> dict[CallKey, CallSum]:
    """Kernel names recorded at module load are mangled; driver launches are keyed by them."""
    readable = demangle_all({k.target for k in calls if isinstance(k.target, str)})
    if not readable:
        return calls
    renamed: dict[CallKey, CallSum] = {}
    for key, s in calls.items():
        if isinstance(key.target, str) and key.target in readable:
            key = CallKey(key.pid, key.tid, key.api, key.stack, readable[key.target], key.error)
        if key in renamed:
            other = renamed[key]
            other.calls += s.calls
            other.duration_ns += s.duration_ns
            other.nbytes += s.nbytes
            other.ok += s.ok
        else:
            renamed[key] = CallSum(s.calls, s.duration_ns, s.nbytes, s.ok)
    return renamed


def comm_of(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return ""
