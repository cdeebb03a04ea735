"""CPU stack sampling with ``bpf/profile.bpf.c``: timers on every CPU, counts in the kernel.

    sampler = CpuSampler(SamplerOptions(freq=99, pids=[1234], follow_children=True))
    sampler.start()
    while recording:
        sampler.poll(100)       # snapshots /proc/PID/maps of processes as they appear
    raw = sampler.stop()        # detaches everything, then reads the maps: a RawProfile
    sampler.close()             # idempotent; also done by stop() and on garbage collection

Continuously (``aiflame agent``): ``sampler.cut()`` every period returns what was sampled
since the last cut without detaching anything (the counts are taken out of the kernel's
map), and forgets the processes that have exited; ``sampler.set_rate(hz)`` changes the
timers' frequency between cuts.

Only aggregates cross into user space: (pid, tid, cgroup, comm, user stack id, kernel stack
id, Python stack id) -> count, plus each distinct stack once. Python stacks are walked in
the kernel for the CPython processes described to it (:mod:`.pyruntime`); their code
objects are named from the live process as each new stack is announced (:mod:`.pycode`).
The kernel sheds every probe when this process dies (links are file descriptors), so even
a SIGKILL leaves nothing attached.
"""

from __future__ import annotations

import os
import re
import struct
import time
import weakref
from array import array
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from aiflame.collectors.ebpf import object_bytes
from aiflame.collectors.ebpf.libbpf import BpfError, BpfObject, RingBuffer
from aiflame.collectors.ebpf.perf import cpu_clock_attr, online_cpus, perf_event_open, set_period
from aiflame.collectors.ebpf.pycode import PyFunction, PythonProcesses
from aiflame.collectors.ebpf.pyruntime import maps_interpreter
from aiflame.collectors.procs import arguments, read_small
from aiflame.symbolize.maps import Maps

MAX_STACK_DEPTH = 127  # profile.bpf.c MAX_STACK_DEPTH
# A process is announced at its first sample, maybe before the dynamic loader has mapped
# its libraries: its maps are read again this much later (and once more at the end).
RESNAPSHOT_S = 0.2
PY_ENTRY = 1  # profile.bpf.c: low bit of a code address, the frame a C call entered
PY_NO_THREAD = -1  # python_stack: the thread runs no Python
PY_NOT_PYTHON = -2  # python_stack: the process is not a described CPython
# A launched interpreter maps libpython a moment after exec: look for it this long.
PYTHON_SEARCH_S = 3.0
MAX_NOT_CODE = 4096  # addresses a process's stacks hold outside its code, remembered
# struct sample_key: pid, tid, cgroup, user/kernel/Python stack, their errors, GIL, comm[16]
_KEY = struct.Struct("<IIQQQQiiiI16s")
# struct pid_event: pid, kind (EV_PROCESS, EV_PYTHON_STACK), stack
_PID_EVENT = struct.Struct("<IIQ")
EV_PROCESS, EV_PYTHON_STACK = 0, 1
GIL_HELD, GIL_RELEASED = 1, 2  # enum gil_state
# enum stat of profile.bpf.c, in order
STAT_NAMES = (
    "samples",
    "idle",
    "counts_full",
    "user_stack_empty",
    "stacks_full",
    "kernel_stack_failed",
    "events_lost",
    "python_stacks",
    "python_failed",
    "python_depth",
)


@dataclass
class SamplerOptions:
    freq: int = 99
    pids: Sequence[int] | None = None  # None: every process of the system
    follow_children: bool = False  # processes the targets fork are sampled too
    include_idle: bool = False
    stack_entries: int = 16384
    count_entries: int = 65536
    max_snapshots: int | None = None  # maps texts kept per process (None: all; a recording)
    python_search_s: float = 0.0  # between two looks for a starting interpreter (0: each poll)
    # keep only the mappings that name code (files, executable memory, the vDSO): a
    # process's heap and stacks change all the time, its code rarely (a continuous profiler
    # then re-reads the code mappings only when they change)
    code_maps_only: bool = False
    # describe a new process's interpreter to the kernel only once it is still running at
    # its second look (RESNAPSHOT_S after its first sample): its first sample was taken
    # before any description could be, and most processes a busy host starts end before
    # the second look (a system-wide profiler's cost per new process; a recording of
    # chosen programs describes at once)
    python_at_second_look: bool = False
    # when the second look is, after a process's first sample: a continuous profiler looks
    # later than a recording (a process of a busy host that lives under this is profiled by
    # its native frames; reading its maps again and describing it was most of its cost)
    second_look_s: float = RESNAPSHOT_S


# (not frozen: a frozen dataclass's __init__ costs four times as much, and a continuous
# profiler makes thousands a period; hashed all the same, and never changed)
@dataclass(slots=True, unsafe_hash=True)
class SampleKey:
    pid: int
    tid: int
    cgroup: int
    user_stack: int  # key in RawProfile.stacks (>= 0), or -errno; -1: a kernel thread
    kernel_stack: int  # key in RawProfile.stacks, or -errno (-EFAULT: in user mode)
    comm: str
    python_stack: int = PY_NOT_PYTHON  # key in RawProfile.stacks (code addresses), or <0
    python_gil: int = 0  # GIL_HELD / GIL_RELEASED for a Python thread, else 0


@dataclass
class RawProfile:
    """What the kernel aggregated, plus what user space saw of the processes meanwhile."""

    counts: list[tuple[SampleKey, int]]
    stacks: dict[int, tuple[int, ...]]  # stack id -> addresses, innermost first
    stats: dict[str, int]
    maps: dict[int, list[str]] = field(default_factory=dict)  # pid -> /proc/PID/maps texts
    process_names: dict[int, str] = field(default_factory=dict)  # pid -> comm of the process
    freq: int = 99
    duration_s: float = 0.0
    cpus: int = 0
    # (pid, Python stack id) -> its functions, innermost first (None: unreadable)
    python_frames: dict[tuple[int, int], tuple[PyFunction | None, ...]] = field(
        default_factory=dict
    )
    python_modules: dict[int, str] = field(default_factory=dict)  # pid -> interpreter file
    python_unsupported: dict[int, str] = field(default_factory=dict)  # pid -> why not walked
    commands: dict[int, str] = field(default_factory=dict)  # pid -> `python train.py --x`


def _weak_callback(method: Callable[[bytes], None]) -> Callable[[bytes], None]:
    """``method`` without a strong reference: a sampler dropped without close() is freed
    (and detached) at once, not whenever the cycle collector runs."""
    ref = weakref.WeakMethod(method)

    def call(data: bytes) -> None:
        bound = ref()
        if bound is not None:
            bound(data)

    return call


def _start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat)."""
    data = read_small(f"/proc/{pid}/stat", 4096)
    if not data:
        return None
    try:
        return int(data[data.rfind(b")") + 2 :].split()[19])
    except (IndexError, ValueError):
        return None


def _command_line(words: list[str], limit: int = 80) -> str:
    """``python train.py --lr 3``: the program's name and arguments, cut at ``limit``."""
    if not words:
        return ""  # a kernel thread, or a zombie
    text = " ".join([os.path.basename(words[0]), *words[1:]])
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True, slots=True)
class FirstLook:
    """What the sampler read of a process at a look (another reader need not read it
    again moments later): its start time, name and arguments."""

    at: float  # time.monotonic()
    started: int  # clock ticks after boot
    comm: str
    argv: list[str]


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            return f.read()
    except OSError:
        return None


class CpuSampler:
    """One sampling run; see the module docstring."""

    def __init__(self, options: SamplerOptions) -> None:
        self.options = options
        self.obj: BpfObject | None = None
        self.maps: dict[int, list[str]] = {}
        self.process_names: dict[int, str] = {}
        self.commands: dict[int, str] = {}  # pid -> its command line, shortened
        self.cpus: list[int] = []
        self._perf_links: list[int] = []
        self._perf_fds: list[int] = []  # owned by the links
        self._recheck: dict[int, float] = {}  # pid -> when to read its maps again
        self._started: dict[int, int] = {}  # pid -> its start time (pids are reused)
        self._maps_hash: dict[int, int] = {}  # pid -> hash of its maps text at the last look
        self._maps_read_at: dict[int, float] = {}  # pid -> when (monotonic) it was
        self._rb: RingBuffer | None = None
        self._pythons = PythonProcesses()  # described to the BPF program, with readers
        self._python_search: dict[int, float] = {}  # pid -> until when to look for Python
        self._python_stacks: list[tuple[int, int]] = []  # (pid, stack) announced, unread
        self._program = "on_sample_python"
        self.python_unavailable = ""  # why this kernel does not walk Python stacks
        self._python_frames: dict[tuple[int, int], tuple[PyFunction | None, ...]] = {}
        self._t0 = 0.0
        self._t1 = 0.0
        # continuous use (cut): stacks read so far, counters at the last cut, exited pids
        self._stack_cache: dict[int, tuple[int, ...]] = {}
        self._stats_base: dict[str, int] = {}
        self._exited: set[int] = set()
        self._next_python_search = 0.0
        self._undescribed: set[int] = set()  # interpreters to describe at the next look
        self._not_code: dict[int, set[int]] = {}  # pid -> stack addresses outside its code
        self._looks: dict[int, FirstLook] = {}  # pid -> what was read of it (until the cut)

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        try:
            self._load(python=True)
        except BpfError:
            # Walking Python stacks needs bpf_loop (Linux 5.17+): sample without it.
            self.close()
            self.python_unavailable = (
                "this kernel refused the Python stack walk (it needs bpf_loop, Linux 5.17+)"
            )
            try:
                self._load(python=False)
            except BaseException:
                self.close()
                raise
        obj = self.obj
        assert obj is not None
        o = self.options
        try:
            for pid in o.pids or ():
                self.add_target(pid)
            obj.attach_raw_tracepoint("on_exec", "sched_process_exec")
            if o.pids is not None and o.follow_children:
                obj.attach_raw_tracepoint("on_fork", "sched_process_fork")
            self._rb = obj.ring_buffer("events", _weak_callback(self._on_event))
            self.cpus = online_cpus()
            self.resume()
        except BaseException:
            self.close()
            raise
        self._t0 = time.monotonic()

    def _load(self, python: bool) -> None:
        o = self.options
        obj = self.obj = BpfObject(object_bytes("profile"), "profile")
        self._program = "on_sample_python" if python else "on_sample"
        obj.set_autoload("on_sample" if python else "on_sample_python", False)
        obj.set_rodata(
            filter_pids=int(o.pids is not None),
            follow_children=int(o.follow_children),
            include_idle=int(o.include_idle),
        )
        obj.set_max_entries("stacks", o.stack_entries)
        obj.set_max_entries("counts", o.count_entries)
        obj.load()

    def pause(self) -> None:
        """Stop the timers (no sample, no cost to the targets); the counts so far stay."""
        assert self.obj is not None
        for link in self._perf_links:
            self.obj.detach(link)
        self._perf_links.clear()
        self._perf_fds.clear()

    def resume(self) -> None:
        """Start the timers on every CPU (again, after :meth:`pause`)."""
        assert self.obj is not None
        if self._perf_links:
            return
        attr = cpu_clock_attr(self.options.freq)
        for cpu in self.cpus:
            fd = perf_event_open(attr, -1, cpu)
            self._perf_links.append(self.obj.attach_perf_event(self._program, fd))
            self._perf_fds.append(fd)

    def set_period_ns(self, period_ns: int) -> None:
        """Time samples ``period_ns`` apart from now on (around ``1e9 / freq``: a rate
        jittered between periods, so that periodic work is not sampled in step)."""
        for fd in self._perf_fds:
            set_period(fd, max(period_ns, 100_000))

    def add_target(self, pid: int) -> None:
        """Sample ``pid`` too (with ``pids`` given); its maps are snapshotted now."""
        assert self.obj is not None
        self.obj.map("targets").update(struct.pack("<I", pid), b"\x01")
        self._python_search[pid] = time.monotonic() + PYTHON_SEARCH_S
        self._snapshot(pid)
        self._recheck[pid] = time.monotonic() + self.options.second_look_s

    def preexec(self) -> None:
        """For ``subprocess.Popen(preexec_fn=...)``: the child makes itself a target before
        it execs, so the processes it forks at once are followed too (after Popen returns
        would be too late for them). Only a map update: safe between fork and exec."""
        if self.obj is not None:
            self.obj.map("targets").update(struct.pack("<I", os.getpid()), b"\x01")

    def poll(self, timeout_ms: int = 100) -> None:
        """Handle process announcements, waiting up to ``timeout_ms`` for one."""
        if self._rb is not None:
            self._rb.poll(timeout_ms)
        else:
            time.sleep(timeout_ms / 1000)
        now = time.monotonic()
        for pid in [p for p, due in self._recheck.items() if due <= now]:
            del self._recheck[pid]
            self._snapshot(pid)
        if self.options.python_search_s and now < self._next_python_search:
            self._name_python_stacks()
            return
        self._next_python_search = now + self.options.python_search_s
        for pid, until in list(self._python_search.items()):
            texts = self.maps.get(pid)
            # only interpreters are looked at again (its executable is mapped from the exec
            # on, libpython a moment later): not every process of a system-wide recording
            not_python = texts is not None and bool(texts) and "python" not in texts[-1]
            if pid in self._pythons.readers or until < now or not_python:
                del self._python_search[pid]
            elif pid in self._recheck:
                continue  # its second look is to come: the search does not bring it forward
            elif not self._snapshot(pid):
                del self._python_search[pid]  # it has ended
        self._name_python_stacks()

    def stop(self) -> RawProfile:
        """Stop sampling, read the aggregates, free everything."""
        if self.obj is None:
            raise BpfError("the sampler is not running")
        self._t1 = time.monotonic()
        try:
            self.pause()  # sampling ends here; the maps stay readable
            if self._rb is not None:
                self._rb.consume()
            return self._read_all()
        finally:
            self.close()

    def close(self) -> None:
        if self.obj is not None:
            self.obj.close()
            self.obj = None
        for reader in self._pythons.readers.values():
            reader.close()
        self._rb = None
        self._perf_links.clear()
        self._perf_fds.clear()

    def __del__(self) -> None:
        self.close()

    # -- process snapshots -------------------------------------------------------------------
    def _on_event(self, data: bytes) -> None:
        pid, kind, stack = _PID_EVENT.unpack_from(data)
        if kind == EV_PYTHON_STACK:
            self._python_stacks.append((pid, stack))
            return
        self._python_search.setdefault(pid, time.monotonic() + PYTHON_SEARCH_S)
        self._snapshot(pid)
        self._recheck[pid] = time.monotonic() + self.options.second_look_s

    def _snapshot(self, pid: int) -> bool:
        """Keep the process's current mappings (a new text after an exec or dlopen).
        False when the process has ended (or its pid is another process's now)."""
        text = _read(f"/proc/{pid}/maps")
        if text is None:
            return False
        seen = hash(text)
        if self._maps_hash.get(pid) == seen and pid in self.commands:
            # as at the last look (a continuous profiler looks again): the same process,
            # as another one at this pid would map its stack and heap elsewhere
            self._maps_read_at[pid] = time.monotonic()
            self._second_look(pid)
            return True
        # (its start time is read only now: it tells a pid reused from an exec or dlopen)
        started = _start_time(pid)
        if started is None or self._started.setdefault(pid, started) != started:
            return False  # keep the old maps
        self._maps_read_at[pid] = time.monotonic()
        self._maps_hash[pid] = seen
        if self.options.code_maps_only:
            text = code_mappings(text)
        texts = self.maps.setdefault(pid, [])
        first_look = not texts
        changed = first_look or texts[-1] != text
        if changed:
            exe_changed = first_look or texts[-1].split("\n", 1)[0] != text.split("\n", 1)[0]
            texts.append(text)
            keep = self.options.max_snapshots
            if keep and len(texts) > keep:
                del texts[:-keep]
            # a described interpreter stays described until an exec replaces the program
            if exe_changed and self.options.python_at_second_look:
                # a new program (a forked child first sampled before its exec too): it is
                # described at its second look
                if not first_look and self.obj is not None:
                    self._pythons.forget(self.obj, pid)
                self._undescribed.add(pid)
                # the wait starts again here, whichever look saw the exec
                self._recheck[pid] = time.monotonic() + self.options.second_look_s
            elif exe_changed or pid not in self._pythons.readers:
                self._undescribed.discard(pid)
                self._describe_python(pid, text)
        else:
            self._second_look(pid)
        if not changed and pid in self.process_names and pid in self.commands:
            return True  # the same program as at the last look (an exec changes its maps)
        comm = read_small(f"/proc/{pid}/comm", 256)
        if comm:
            self.process_names[pid] = comm.decode("utf-8", "surrogateescape").strip()
        argv = arguments(pid)
        if argv:
            self.commands[pid] = _command_line(argv)
        if comm:
            name = self.process_names[pid]
            self._looks[pid] = FirstLook(time.monotonic(), self._started[pid], name, argv)
        return True

    def last_look(self, pid: int, within_s: float) -> FirstLook | None:
        """The start time, name and arguments of the process as read at most
        ``within_s`` ago (at its first look, or when its program changed)."""
        look = self._looks.get(pid)
        return look if look is not None and time.monotonic() - look.at <= within_s else None

    def recent_maps(self, pid: int, within_s: float) -> str | None:
        """The process's maps as read at most ``within_s`` ago (None: not that recently):
        another reader of a new process's maps (the CUDA probes) need not read them again.
        With ``code_maps_only``, only the lines of code and files."""
        read_at = self._maps_read_at.get(pid)
        texts = self.maps.get(pid)
        if read_at is None or not texts or time.monotonic() - read_at > within_s:
            return None
        return texts[-1]

    def _second_look(self, pid: int) -> None:
        """Describe the interpreter of a process that is still running (see
        ``SamplerOptions.python_at_second_look``)."""
        if pid in self._undescribed:
            self._undescribed.discard(pid)
            self._describe_python(pid, self.maps[pid][-1])

    # -- Python stacks -----------------------------------------------------------------------
    def walks_python(self, pid: int) -> bool:
        """Whether this process's Python stacks are walked here (described now if its
        maps were not read yet)."""
        if self.obj is None or self.python_unavailable:
            return False
        if pid in self._undescribed:  # asked for before its second look
            self._second_look(pid)
        elif pid not in self._pythons.readers:
            self._snapshot(pid)
        return pid in self._pythons.readers

    def pythons_seen(self) -> bool:
        """Whether an interpreter was found in a sampled process (walked or not)."""
        return bool(self._pythons.readers or self._pythons.unsupported)

    def python_state(self, pid: int) -> str:
        """``walked`` (its Python stacks are walked here), ``other`` (an interpreter this
        walk does not read, or none is walked on this kernel) or ``none`` (no interpreter
        is mapped in it, as far as its mappings show now)."""
        if self.walks_python(pid):
            return "walked"
        if pid in self._pythons.unsupported:
            return "other"
        texts = self.maps.get(pid)
        return "other" if texts and maps_interpreter(texts[-1]) else "none"

    def _describe_python(self, pid: int, maps_text: str) -> None:
        if self.obj is not None and not self.python_unavailable:
            self._pythons.describe(self.obj, pid, maps_text)

    def _name_python_stacks(self) -> None:
        """Read the code objects of the Python stacks announced since the last call."""
        if not self._python_stacks or self.obj is None:
            return
        stacks_map = self.obj.map("stacks")
        todo, self._python_stacks = self._python_stacks, []
        for pid, stack in todo:
            reader = self._pythons.readers.get(pid)
            if reader is None or (pid, stack) in self._python_frames:
                continue
            raw = stacks_map.lookup(struct.pack("<Q", stack))
            if raw is not None:
                addrs = struct.unpack(f"<{len(raw) // 8}Q", raw)
                self._python_frames[pid, stack] = reader.read([a & ~PY_ENTRY for a in addrs if a])

    # -- reading -----------------------------------------------------------------------------
    def _read_all(self) -> RawProfile:
        assert self.obj is not None
        self._name_python_stacks()
        counts = _decode_counts(self.obj.map("counts").items())
        stacks_map = self.obj.map("stacks")
        stacks: dict[int, tuple[int, ...]] = {}
        for key, _ in counts:
            for sid in (key.user_stack, key.kernel_stack, key.python_stack):
                if sid >= 0 and sid not in stacks:
                    found = _lookup_stack(stacks_map, sid)
                    if found is not None:
                        stacks[sid] = found
        for pid in {k.pid for k, _ in counts if k.pid}:
            self._snapshot(pid)  # libraries loaded since; or the announcement was lost
        self._read_lost_python_stacks(counts, stacks)
        return self._raw(counts, stacks, self._stats(), self.maps, max(self._t1 - self._t0, 0.0))

    def _stats(self) -> dict[str, int]:
        assert self.obj is not None
        stats_map = self.obj.map("stats")
        stats = {}
        for i, name in enumerate(STAT_NAMES):
            per_cpu = stats_map.lookup_percpu(struct.pack("<I", i)) or []
            stats[name] = sum(struct.unpack("<Q", v)[0] for v in per_cpu)
        return stats

    def _read_lost_python_stacks(
        self, counts: list[tuple[SampleKey, int]], stacks: dict[int, tuple[int, ...]]
    ) -> None:
        """Name the Python stacks whose announcement was lost (ring buffer full)."""
        frames = self._python_frames
        for key, _ in counts:
            reader = self._pythons.readers.get(key.pid)
            fresh = (key.pid, key.python_stack) not in frames
            if reader is not None and key.python_stack >= 0 and fresh:
                entries = [a & ~PY_ENTRY for a in stacks.get(key.python_stack, ())]
                frames[key.pid, key.python_stack] = reader.read(entries)

    def _raw(
        self,
        counts: list[tuple[SampleKey, int]],
        stacks: dict[int, tuple[int, ...]],
        stats: dict[str, int],
        maps: dict[int, list[str]],
        duration_s: float,
    ) -> RawProfile:
        return RawProfile(
            counts,
            stacks,
            stats,
            maps,
            self.process_names,
            self.options.freq,
            duration_s,
            len(self.cpus),
            self._python_frames,
            {pid: r.python.module for pid, r in self._pythons.readers.items()},
            dict(self._pythons.unsupported),
            dict(self.commands),
        )

    # -- continuous use ----------------------------------------------------------------------
    def cut(self) -> RawProfile:
        """What was sampled since the start or the last cut, taken out of the kernel's
        count map while the timers keep running: a period of a continuous profile.

        Stacks stay stored in the kernel (most recur from one period to the next) and are
        read once; once the stack map is half full, those no count referred to in this
        period are removed, so a long-lived profiler never fills it. Processes that had
        exited by the previous cut and have no samples in this one are forgotten (their
        maps snapshots, code readers and Python stack names), so memory stays bounded
        however many short-lived processes come and go."""
        obj = self.obj
        if obj is None:
            raise BpfError("the sampler is not running")
        now = time.monotonic()
        if self._rb is not None:
            self._rb.consume()
        self._name_python_stacks()
        counts = _decode_counts(obj.map("counts").take_all())
        stacks_map = obj.map("stacks")
        stacks: dict[int, tuple[int, ...]] = {}
        fresh: dict[int, list[int]] = defaultdict(list)  # pid -> addresses of its new stacks
        for key, _ in counts:
            for sid in (key.user_stack, key.kernel_stack, key.python_stack):
                if sid < 0 or sid in stacks:
                    continue
                found = self._stack_cache.get(sid)
                if found is None:
                    found = _lookup_stack(stacks_map, sid)
                    if found is None:
                        continue
                    self._stack_cache[sid] = found
                    if sid == key.user_stack:
                        fresh[key.pid].extend(found)
                stacks[sid] = found
        in_cut = {k.pid for k, _ in counts if k.pid}
        unseen = in_cut - self.maps.keys()
        for pid in unseen:
            self._snapshot(pid)
        for pid, addrs in fresh.items():
            if pid in unseen:
                continue
            # new stacks that point into code mapped since the last look (a library loaded
            # since): read the maps again. Addresses no mapping of code held at a look after
            # they were sampled are not code (a walk through code without frame pointers
            # yields some) and are not looked for again.
            known_not_code = self._not_code.setdefault(pid, set())
            missing = _unmapped(self.maps.get(pid), addrs) - known_not_code
            if missing and self._snapshot(pid):
                if len(known_not_code) > MAX_NOT_CODE:
                    known_not_code.clear()
                known_not_code.update(_unmapped(self.maps.get(pid), list(missing)))
        self._read_lost_python_stacks(counts, stacks)
        total = self._stats()
        stats = {k: v - self._stats_base.get(k, 0) for k, v in total.items()}
        self._stats_base = total
        maps = {pid: self.maps[pid] for pid in in_cut if pid in self.maps}
        raw = self._raw(counts, stacks, stats, maps, max(now - (self._t1 or self._t0), 0.0))
        raw.python_frames = {k: v for k, v in self._python_frames.items() if k[0] in in_cut}
        raw.process_names = {p: n for p, n in self.process_names.items() if p in in_cut}
        raw.commands = {p: c for p, c in self.commands.items() if p in in_cut}
        self._t1 = now
        self._evict_stacks(stacks_map, stacks.keys())
        self._forget_exited(in_cut)
        self._looks.clear()
        return raw

    def program_fds(self) -> list[int]:
        """Descriptors of the loaded BPF programs (their run time is in the kernel's BPF
        statistics, ``/proc/self/fdinfo/FD``)."""
        if self.obj is None:
            return []
        return [self.obj.program_fd(p) for p in (self._program, "on_fork", "on_exec")]

    def set_rate(self, freq: int) -> None:
        """Sample at ``freq`` Hz from now on (between two cuts, so that each period has
        one rate)."""
        if freq == self.options.freq:
            return
        self.options.freq = freq
        if self._perf_links:
            self.pause()
            self.resume()

    def _evict_stacks(self, stacks_map, used: Iterable[int]) -> None:
        if len(self._stack_cache) < self.options.stack_entries // 2:
            return
        keep = set(used)
        for sid in [s for s in self._stack_cache if s not in keep]:
            del self._stack_cache[sid]
            stacks_map.delete(struct.pack("<Q", sid))
        self._python_frames = {k: v for k, v in self._python_frames.items() if k[1] in keep}

    def _forget_exited(self, in_cut: set[int]) -> None:
        """Drop what is kept of processes gone since the last cut (their last samples
        were in this one or the one before)."""
        gone = self._exited - in_cut
        for pid in gone:
            for table in (self.maps, self.process_names, self.commands, self._started,
                          self._maps_hash, self._maps_read_at, self._not_code):  # fmt: skip
                table.pop(pid, None)
            self._recheck.pop(pid, None)
            self._python_search.pop(pid, None)
            self._undescribed.discard(pid)
            if self.obj is not None:
                self._pythons.forget(self.obj, pid)
        if gone:
            self._python_frames = {k: v for k, v in self._python_frames.items() if k[0] not in gone}
        self._exited = {pid for pid in self.maps if not os.path.exists(f"/proc/{pid}")}


# a maps line ("start-end perms offset dev inode path") of executable memory, or of a file
# or the vDSO: one pass of the regex engine over the text (a continuous profiler reads the
# maps of every process that starts)
_CODE_LINE = re.compile(r"^\S+ (?:..x.|\S+ \S+ \S+ \S+ +(?:/|\[vdso\])).*\n?", re.MULTILINE)


def code_mappings(maps_text: str) -> str:
    """The lines of a ``/proc/PID/maps`` text that map files, executable memory (JIT code)
    or the vDSO."""
    return "".join(_CODE_LINE.findall(maps_text))


def _unmapped(texts: list[str] | None, addrs: list[int]) -> set[int]:
    """The addresses the last maps snapshot of a process (``texts``) does not map."""
    if not texts or not addrs:
        return set(addrs)
    where = Maps.parse_shared(texts[-1]).find(np.asarray(addrs, dtype=np.uint64))
    return {a for a, i in zip(addrs, where.tolist(), strict=True) if i < 0}


def _decode_counts(items: Iterable[tuple[bytes, bytes]]) -> list[tuple[SampleKey, int]]:
    items = list(items)
    keys = _KEY.iter_unpack(b"".join(k for k, _ in items))  # (one pass over a period's)
    values = struct.iter_unpack("<Q", b"".join(v for _, v in items))
    names: dict[bytes, str] = {}  # most keys of a period share a few names
    counts: list[tuple[SampleKey, int]] = []
    for (pid, tid, cgroup, ustack, kstack, pystack, uerr, kerr, pyerr, gil, comm), (n,) in zip(
        keys, values, strict=True
    ):
        name = names.get(comm)
        if name is None:
            name = names[comm] = comm.split(b"\0", 1)[0].decode("utf-8", "replace")
        key = SampleKey(
            pid, tid, cgroup, uerr or ustack, kerr or kstack, name, pyerr or pystack, gil
        )
        counts.append((key, n))
    return counts


def _lookup_stack(stacks_map, sid: int) -> tuple[int, ...] | None:
    raw = stacks_map.lookup(struct.pack("<Q", sid))
    if raw is None:
        return None
    return tuple(filter(None, array("Q", raw)))  # (the unused entries are zeros)
