"""CUDA/HIP API probes on live processes: attach, read events, detach, build profiles.

::

    with CudaProbes(CudaOptions()) as probes:
        probes.watch(pid)               # attaches once the process maps a CUDA/HIP library
        while running:
            probes.scan()               # new libraries / processes -> new probes
            probes.poll(100)            # events -> probes.log
    profile = probes.calls_profile()    # launch-count, sync-time, copy-bytes, alloc-...
    memory = probes.memory_profile()    # peak-bytes by allocation stack (--memory)

Continuously (``aiflame agent``, ``CudaOptions(every_process=True)``): ``probes.cut()``
every period returns the calls summed and the memory events seen since the last cut, probes
staying attached, and forgets the processes that have exited.

Probes are attached to library files, once per file, on the functions the file really
defines (:mod:`.cuda_libs`): they fire in every process that maps it, and the BPF programs
keep the recorded processes' calls (the ``targets`` map, which follows their forks, or
every process). One generic BPF program pair serves them all, told apart by the probe's
cookie (:func:`.cuda_apis.cookie`). The dynamic loaders the processes run with are probed
too (``_dl_debug_state``, where they report new libraries): a recorded process that loaded
a CUDA/HIP library it is not set up for is stopped there until the file is probed and the
process described (:mod:`.holds`), so the calls right after ``dlopen()`` are seen. Calls made from
inside a probed library (cudaMalloc -> cuMemAlloc_v2) count once: the caller's address is
looked up in the libraries' code ranges (the ``libs`` map), else in its mapping.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from aiflame.collectors import procs
from aiflame.collectors.ebpf import object_bytes
from aiflame.collectors.ebpf.cuda_apis import (
    ALL_ROLES,
    APIS,
    COPY,
    GRAPH,
    LAUNCH,
    MEMORY_ROLES,
    N_CLASSES,
    NO_ARG,
    SYNC,
    Api,
    ApiClass,
)
from aiflame.collectors.ebpf.cuda_apis import cookie as probe_cookie
from aiflame.collectors.ebpf.cuda_events import CallKey, CallSum, EventLog
from aiflame.collectors.ebpf.cuda_libs import (
    ElfError,
    GpuLibrary,
    gpu_libraries,
    kernel_dev,
    loader_of,
    loader_probe,
    probe_targets,
    read_maps,
)
from aiflame.collectors.ebpf.cuda_memory import memory_profile
from aiflame.collectors.ebpf.cuda_profile import (
    MapsSnapshots,
    Symbolizer,
    calls_profile,
    comm_of,
    resolver_symbolizer,
    user_stack_interner,
)
from aiflame.collectors.ebpf.cuda_python import PY_MARK, PythonStacks
from aiflame.collectors.ebpf.holds import Holds
from aiflame.collectors.ebpf.libbpf import (
    BPF_TRACE_UPROBE_MULTI,
    LIBRARY,
    BpfError,
    BpfObject,
)
from aiflame.model import Profile
from aiflame.symbolize.pyframes import PythonNaming

# Default per-second budgets (events per class); memory is unlimited: pairing frees with
# allocations needs every one, and allocators call far less often than launches.
DEFAULT_CAPS = {
    ApiClass.LAUNCH: 20_000,
    ApiClass.MEMORY: 0,
    ApiClass.COPY: 20_000,
    ApiClass.SYNC: 20_000,
    ApiClass.NAMING: 0,
}
MAX_LIB_RANGES = 8

# indices of the BPF program's per-CPU ``stats`` array
STAT_EMITTED, STAT_LOST, STAT_NESTED, STAT_INFLIGHT, STAT_STACK = 0, 1, 2, 3, 4
STAT_CALLS_FULL, STAT_STACKS_FULL, STAT_CAPPED = 5, 6, 8
N_STATS = 16
# struct call_key / struct call_sum of bpf/cuda.bpf.c
_CALL_KEY = struct.Struct("<IIQQQHHi")
_CALL_SUM = struct.Struct("<QQQQ")
# struct library_event of bpf/cuda.bpf.c: pid, tid, file (dev, inode), base, kind, held, name
_LIBRARY_EVENT = struct.Struct("<IIQQQII16s")
EV_LOADED_LIBRARY, EV_NEW_LOADER = 0, 1
_ONE = b"\x01"
SUMMED_ROLES = {LAUNCH, GRAPH, COPY, SYNC}  # summed in the kernel; the others are events


@dataclass
class CudaOptions:
    roles: set[str] = field(default_factory=lambda: set(ALL_ROLES))
    caps: dict[ApiClass, int] = field(default_factory=lambda: dict(DEFAULT_CAPS))
    ring_buffer_bytes: int = 8 << 20
    every_process: bool = False  # every process is recorded (--all, the agent)
    follow_children: bool = True  # processes forked by recorded ones are recorded
    # stop a recorded process that maps a CUDA/HIP library it is not set up for, until it
    # is (so that no call is missed); off: its first calls may be missed
    hold: bool = True

    @classmethod
    def memory_only(cls) -> CudaOptions:
        return cls(roles=set(MEMORY_ROLES))


@dataclass
class Attached:
    """A recorded process that maps CUDA/HIP libraries, and which."""

    pid: int
    libraries: list[GpuLibrary] = field(default_factory=list)


@dataclass
class ProbedFile:
    """The probes of one library file (every process that maps it)."""

    library: GpuLibrary  # as the process where it was found first maps it
    functions: list[str] = field(default_factory=list)
    links: int = 0
    handles: list[int] = field(default_factory=list)


@dataclass
class CudaCut:
    """One period of the probes: calls summed by call site, allocations and frees."""

    calls: dict[CallKey, CallSum]
    memory_events: np.ndarray  # EventLog.memory_events() rows of the period
    stacks: list[tuple[int, ...]]  # EventLog.stacks: what CallKey.stack and "stack" index


class CudaProbes:
    """See the module docstring. ``multi``: attach with uprobe_multi links (kernel 6.6+;
    None: where the kernel has them), one per library file, which detach in one RCU grace
    period instead of one per probe (5 s for libcudart's 50 probes on 6.18)."""

    PROGRAMS = ("cuda_entry", "cuda_return")
    PYTHON_PROGRAMS = ("cuda_entry_python", "cuda_return_python")  # walk Python stacks too

    def __init__(self, options: CudaOptions | None = None, multi: bool | None = None) -> None:
        self.options = options or CudaOptions()
        self.log = EventLog()
        self.maps = MapsSnapshots()
        self.attached: dict[int, Attached] = {}  # recorded processes mapping CUDA/HIP
        self.files: dict[tuple[str, int], ProbedFile] = {}  # (dev, inode) -> its probes
        self.loaders: dict[tuple[str, int], int | None] = {}  # dynamic loaders -> the link
        self.failures: list[str] = []
        self.comm: dict[int, str] = {}
        self.holds = Holds()
        self.hold_unavailable = ""  # why processes are not stopped at their first mapping
        self.not_stopped = 0  # foreground jobs of a shell, announced without a stop
        self._watched: set[int] = set()
        self._targets: set[int] = set()  # pids put in the kernel's `targets` map
        self._seen_libs: dict[int, set[tuple[str, int]]] = {}
        self._loader_seen: set[int] = set()  # processes whose dynamic loader is probed
        self._stacks_checked = 0
        self._kernel_stacks: dict[int, tuple[int, ...]] = {}  # stack hash -> addresses
        self._gone: list[int] = []  # processes found exited at the last cut
        self.naming: PythonNaming | None = None  # how Python frames are named (sys.path)
        self._final_stats: dict[str, int] | None = None
        self._entry, self._return = self.PYTHON_PROGRAMS
        if multi is None:
            try:
                self._obj, self.multi = self._open_any(True), True
            except BpfError:  # a kernel before 6.6: one link per probe
                self._obj, self.multi = self._open_any(False), False
        else:
            self._obj, self.multi = self._open_any(multi), multi
        self.python = PythonStacks(self._obj) if self._entry.endswith("_python") else None
        if self.python is not None:
            self.log.on_new_stack = self.python.seen
        try:
            self._fill_apis()
            self._rb = self._obj.ring_buffer("events", self.log)
            self._rb.add(self._obj.map("library_events").fd, self._on_library)
            self._obj.attach_raw_tracepoint("on_fork", "sched_process_fork")
            self._exec_link: int | None = self._obj.attach_raw_tracepoint(
                "on_exec", "sched_process_exec"
            )
            self._start_holds()
        except BaseException:
            self.holds.close()
            self._obj.close()
            raise

    def _start_holds(self) -> None:
        """Watch the dynamic loader this process runs with (that of the programs started
        here), and start the watchdog of stopped processes. Neither this process nor the
        watchdog is ever stopped (listed as announced already)."""
        own = read_maps(os.getpid())
        loader = loader_of(os.getpid(), own) if own else None
        if loader is not None:
            self._attach_loader(loader)
        exempt = [os.getpid()]
        if not self.options.hold:
            self.hold_unavailable = "turned off"
        else:
            try:
                exempt.append(self.holds.start_watchdog(self._obj.map("pending").fd, LIBRARY))
            except OSError as e:
                self.hold_unavailable = f"no watchdog process: {e}"
        for pid in exempt:
            self._obj.map("pending").update(struct.pack("<I", pid), _ONE)

    def _open_any(self, multi: bool) -> BpfObject:
        """The programs that walk Python stacks, else (no bpf_loop: Linux < 5.17) those
        that do not."""
        for names in (self.PYTHON_PROGRAMS, self.PROGRAMS):
            try:
                obj = self._open(multi, names)
            except BpfError:
                if names == self.PROGRAMS:
                    raise
                continue
            self._entry, self._return = names
            return obj
        raise AssertionError("unreachable")

    def _open(self, multi: bool, names: tuple[str, str]) -> BpfObject:
        obj = BpfObject(object_bytes("cuda"), name="aiflame-cuda")
        try:
            for prog in (*self.PROGRAMS, *self.PYTHON_PROGRAMS):
                if prog not in names:
                    obj.set_autoload(prog, False)
            if multi:
                for prog in names:
                    obj.set_expected_attach_type(prog, BPF_TRACE_UPROBE_MULTI)
            caps = [int(self.options.caps.get(ApiClass(c), 0)) for c in range(N_CLASSES)]
            obj.set_rodata(
                caps=struct.pack(f"<{N_CLASSES}Q", *caps),
                every_process=int(self.options.every_process),
                follow_children=int(self.options.follow_children),
                hold=int(self.options.hold),
            )
            obj.set_max_entries("events", _power_of_two(self.options.ring_buffer_bytes))
            obj.load()
        except BaseException:
            obj.close()
            raise
        return obj

    def _fill_apis(self) -> None:
        """What the kernel needs to sum launches, copies and syncs (``apis`` map)."""
        m = self._obj.map("apis")
        for i, api in enumerate(APIS):
            m.update(struct.pack("<I", i), _api_info(api))

    # -- targets ----------------------------------------------------------------------------
    def watch(self, pid: int) -> None:
        """Record ``pid`` (and, with ``follow_children``, the processes it forks from now
        on); its libraries are probed now if it maps CUDA/HIP ones, else when it maps one."""
        self._watched.add(pid)
        self._target(pid)
        self._scan_one(pid)

    def preexec(self) -> None:
        """For ``subprocess.Popen(preexec_fn=...)``: the child makes itself a target before
        it execs, so the libraries the dynamic loader maps before ``main`` are seen. Only
        a map update: safe between fork and exec."""
        if self._obj.ptr is not None:
            self._obj.map("targets").update(struct.pack("<I", os.getpid()), _ONE)

    def _target(self, pid: int) -> None:
        if pid not in self._targets and not self.options.every_process:
            self._targets.add(pid)
            self._obj.map("targets").update(struct.pack("<I", pid), _ONE)

    def watch_later(self, pids: Iterable[int]) -> None:
        """Processes for the next :meth:`scan` to look at."""
        self._watched.update(pids)

    def scan(self, children: bool = False) -> None:
        """Probe libraries mapped since the last scan (and look at child processes)."""
        pids = set(self._watched)
        if children:
            for p in list(self._watched):
                pids.update(procs.tree(p))
        for pid in sorted(pids):
            if procs.alive(pid):
                if children:
                    self._target(pid)  # started before it was watched
                self._scan_one(pid)
            else:
                self._watched.discard(pid)

    def scan_pids(self, pids: Iterable[int], known_maps: Mapping[int, str] | None = None) -> None:
        """Probe CUDA/HIP libraries these processes map now (and did not before): a
        continuous profiler chooses which to look at when, reading maps being the cost;
        ``known_maps``: the maps of some just read (their files' lines at least). A process
        that has ended has no maps to read (nothing is done)."""
        known_maps = known_maps or {}
        for pid in pids:
            self._scan_one(pid, known_maps.get(pid))

    def _scan_one(self, pid: int, text: str | None = None, force: bool = False) -> None:
        """Set up a process from its maps: its libraries probed, their code ranges and its
        Python described to the kernel. ``force``: it was stopped for this (do it all)."""
        text = read_maps(pid) if text is None else text
        if not text:
            return
        if pid in self.attached:  # stacks are symbolized at the end: keep the latest maps
            self.maps.refresh(pid, text)
        if pid not in self._loader_seen:  # the libraries it loads from now on are seen
            self._loader_seen.add(pid)
            loader = loader_of(pid, text)
            if loader is not None:
                self._attach_loader(loader)
        libs = gpu_libraries(pid, text)
        if not libs:
            return  # (a process that maps none keeps no state here)
        seen = self._seen_libs.setdefault(pid, set())
        new = [lib for lib in libs if (lib.dev, lib.inode) not in seen]
        if not new and not force:
            return
        self.maps.refresh(pid, text)
        self.comm.setdefault(pid, comm_of(pid))
        if self.python is not None:
            self.python.describe_process(pid, text)
        att = self.attached.setdefault(pid, Attached(pid))
        self._set_ranges(pid, libs)  # before the probes: nested calls must already be known
        for lib in new:
            seen.add((lib.dev, lib.inode))
            att.libraries.append(lib)
            if (lib.dev, lib.inode) not in self.files:
                self._attach_file(lib)
                file_key = struct.pack("<QQ", kernel_dev(lib.dev), lib.inode)
                self._obj.map("probed_files").update(file_key, _ONE)
        self._obj.map("known").update(struct.pack("<I", pid), _ONE)

    def _set_ranges(self, pid: int, libs: list[GpuLibrary]) -> None:
        ranges = [r for lib in libs for r in lib.text][:MAX_LIB_RANGES]
        lo = [a for a, _ in ranges] + [0] * (MAX_LIB_RANGES - len(ranges))
        hi = [b for _, b in ranges] + [0] * (MAX_LIB_RANGES - len(ranges))
        value = struct.pack(f"<{2 * MAX_LIB_RANGES}Q", *lo, *hi)
        self._obj.map("libs").update(struct.pack("<I", pid), value)

    def _attach_file(self, lib: GpuLibrary) -> None:
        """Probe the file's functions, in every process that maps it (the BPF programs
        keep the recorded processes' calls)."""
        probed = self.files[lib.dev, lib.inode] = ProbedFile(lib)
        try:
            targets = probe_targets(lib, self.options.roles)
        except (OSError, ElfError) as e:
            self.failures.append(f"{lib.path}: {e}")
            return
        if self.multi:
            self._attach_multi(probed, targets)
            return
        for api_id, offset in targets:
            api = APIS[api_id]
            ck = probe_cookie(api_id, api)
            try:
                probed.handles.append(
                    self._obj.attach_uprobe(self._entry, lib.host_path, offset=offset, cookie=ck)
                )
                probed.links += 1
                if api.needs_return:
                    h = self._obj.attach_uprobe(
                        self._return, lib.host_path, offset=offset, retprobe=True, cookie=ck
                    )
                    probed.handles.append(h)
                    probed.links += 1
            except BpfError as e:
                self.failures.append(f"{lib.path} {api.name}: {e}")
                continue
            probed.functions.append(api.name)

    def _attach_multi(self, probed: ProbedFile, targets: list[tuple[int, int]]) -> None:
        if not targets:
            return
        lib = probed.library
        cookies = [probe_cookie(i, APIS[i]) for i, _ in targets]
        offsets = [off for _, off in targets]
        back = [k for k, (i, _) in enumerate(targets) if APIS[i].needs_return]
        try:
            probed.handles.append(
                self._obj.attach_uprobe_multi(self._entry, lib.host_path, offsets, cookies)
            )
            probed.links += 1
            if back:
                h = self._obj.attach_uprobe_multi(
                    self._return,
                    lib.host_path,
                    [offsets[k] for k in back],
                    [cookies[k] for k in back],
                    retprobe=True,
                )
                probed.handles.append(h)
                probed.links += 1
        except BpfError as e:
            self.failures.append(f"{lib.path}: {e}")
            return
        probed.functions.extend(APIS[i].name for i, _ in targets)

    def _attach_loader(self, loader: GpuLibrary) -> None:
        """Probe a dynamic loader's ``_dl_debug_state`` (where it says the list of loaded
        libraries changed), in every process that runs it."""
        key = (loader.dev, loader.inode)
        if key in self.loaders:
            return
        self.loaders[key] = None
        try:
            where = loader_probe(loader.host_path)
        except (OSError, ElfError) as e:
            self.failures.append(f"{loader.path}: {e}")
            return
        if where is None:
            self.failures.append(f"{loader.path}: no _dl_debug_state and _r_debug (not glibc's)")
            return
        offset, delta = where
        try:
            self.loaders[key] = self._obj.attach_uprobe(
                "on_loader_state", loader.host_path, offset=offset, cookie=delta & (1 << 64) - 1
            )
        except BpfError as e:
            self.failures.append(str(e))
            return
        file_key = struct.pack("<QQ", kernel_dev(loader.dev), loader.inode)
        self._obj.map("probed_loaders").update(file_key, _ONE)

    def _on_library(self, data: bytes) -> None:
        """A recorded process loaded a CUDA/HIP library it was not set up for, or was
        started with a dynamic loader not probed yet (stopped, unless a shell's foreground
        job): set it up, then let it go on."""
        pid, tid, dev, inode, _, kind, held, _ = _LIBRARY_EVENT.unpack_from(data)
        try:
            if held:
                self.holds.stopped(pid, tid)
            else:
                self.not_stopped += 1
            if kind == EV_NEW_LOADER:
                text = read_maps(pid)
                loader = loader_of(pid, text) if text else None
                if loader is not None:
                    self._attach_loader(loader)
                self._obj.map("probed_loaders").update(struct.pack("<QQ", dev, inode), _ONE)
            else:
                self._scan_one(pid, force=True)
                self._obj.map("probed_files").update(struct.pack("<QQ", dev, inode), _ONE)
        finally:
            self._obj.map("pending").delete(struct.pack("<I", pid))
            if held:
                self.holds.release(pid)

    # -- events -----------------------------------------------------------------------------
    def poll(self, timeout_ms: int = 100) -> int:
        n = self._rb.poll(timeout_ms)
        self._check_new_stacks()
        return n

    def drain(self) -> int:
        n = self._rb.consume()
        self._check_new_stacks()
        return n

    def _check_new_stacks(self) -> None:
        """New stacks with addresses outside a process's maps snapshot mean it loaded a
        library since: read its maps again while it (probably) still runs."""
        stacks = self.log.stacks
        if self._stacks_checked == len(stacks):
            return
        self._stacks_checked = len(stacks)
        for pid in self.log.pids:
            if pid in self.attached:
                native = [s[: s.index(PY_MARK)] if PY_MARK in s else s for s in stacks[-64:]]
                self.maps.ensure(pid, [a for s in native for a in s[:4]])
            elif procs.alive(pid):  # a fork of a recorded process, set up in the kernel
                self._scan_one(pid)

    def stats(self) -> dict[str, int]:
        """Counters of the BPF program, summed over CPUs (as they were at close)."""
        if self._final_stats is not None:
            return dict(self._final_stats)
        m = self._obj.map("stats")
        totals = []
        for i in range(N_STATS):
            per_cpu = m.lookup_percpu(struct.pack("<I", i)) or []
            totals.append(sum(struct.unpack("<Q", v)[0] for v in per_cpu))
        out = {
            "events": totals[STAT_EMITTED],
            "lost (ring buffer full)": totals[STAT_LOST],
            "nested calls skipped": totals[STAT_NESTED],
            "calls not tracked (table full)": totals[STAT_INFLIGHT],
            "stacks not read": totals[STAT_STACK],
            "calls not summed (table full)": totals[STAT_CALLS_FULL],
            "stacks not stored (table full)": totals[STAT_STACKS_FULL],
            "processes stopped until probed": self.holds.count,
            "foreground jobs not stopped": self.not_stopped,
        }
        for c in range(N_CLASSES):
            out[f"over the {ApiClass(c).name.lower()} cap"] = totals[STAT_CAPPED + c]
        return out

    def notes(self) -> list[str]:
        """One line per problem worth telling: drops, failures to attach."""
        lines = []
        s = self.stats()
        dropped = {k: v for k, v in s.items() if v and k.startswith("over the")}
        for what, n in dropped.items():
            cls = what.removeprefix("over the ").removesuffix(" cap")
            cap = self.options.caps.get(ApiClass[cls.upper()], 0)
            lines.append(f"{n:,} {cls} calls not recorded: {what} of {cap:,}/s")
        for what in (
            "lost (ring buffer full)",
            "calls not tracked (table full)",
            "calls not summed (table full)",
            "stacks not stored (table full)",
        ):
            if s[what]:
                lines.append(f"{s[what]:,} CUDA API events {what}")
        if s.get("foreground jobs not stopped"):
            lines.append(
                f"{s['foreground jobs not stopped']} shell foreground jobs were not stopped "
                "when they loaded a CUDA/HIP library: their first calls may be missing"
            )
        if self.hold_unavailable and self.options.hold:
            lines.append(
                "CUDA/HIP libraries are probed within 0.2 s of being loaded, not from their "
                f"first call ({self.hold_unavailable})"
            )
        lines.extend(self.failures[:5])
        if len(self.failures) > 5:
            lines.append(f"... and {len(self.failures) - 5} more attach failures")
        return lines

    # -- results ----------------------------------------------------------------------------
    def symbolizer(self) -> Symbolizer:
        native = resolver_symbolizer(self.maps)
        return self.python.symbolizer(native, self.naming) if self.python else native

    def calls_profile(self, symbolize: Symbolizer | None = None) -> Profile:
        self.collect()
        return calls_profile(
            self.log, symbolize or self.symbolizer(), comm=self.comm, meta=self._meta()
        )

    def memory_profile(self, symbolize: Symbolizer | None = None) -> Profile:
        intern = user_stack_interner(self.log, symbolize or self.symbolizer())
        return memory_profile(self.log.memory_events(), intern, meta=self._meta())

    def _meta(self) -> dict[str, object]:
        meta: dict[str, object] = {"source": "ebpf cuda probes", "cuda_stats": self.stats()}
        for att in self.attached.values():
            libs = ", ".join(lib.path for lib in att.libraries)
            probed = [self.files.get((lib.dev, lib.inode)) for lib in att.libraries]
            n = sum(len(p.functions) for p in probed if p is not None)
            meta[f"info:probed PID {att.pid}"] = f"{n} functions in {libs}"
        if self.holds.count:
            meta["info:cuda first calls"] = (
                f"{self.holds.count} processes stopped when they mapped a CUDA/HIP library, "
                f"until probed (at most {self.holds.longest_s * 1000:.1f} ms)"
            )
        for i, line in enumerate(self.notes()):
            meta[f"info:cuda note {i + 1}"] = line
        return meta

    # -- teardown ---------------------------------------------------------------------------
    def collect(self) -> None:
        """Read the calls summed in the kernel so far into ``log.summed`` (done by
        :meth:`close`; the sums of a closed object are those read then)."""
        if self._obj.ptr is None or not self._obj.loaded:
            return
        self.log.summed.clear()
        self._add_sums(self._obj.map("calls").items())

    def _add_sums(self, items: Iterable[tuple[bytes, bytes]]) -> set[int]:
        """Kernel sums into ``log.summed``; returns the stack hashes they refer to."""
        stacks = self._obj.map("stacks")
        known = self._kernel_stacks
        used = set()
        for raw_key, raw_sum in items:
            pid, tid, stack, target, caller, api, _, error = _CALL_KEY.unpack(raw_key)
            ips = known.get(stack) if stack else ()
            if ips is None:
                value = stacks.lookup(struct.pack("<Q", stack))
                words = struct.unpack(f"<{len(value) // 8}Q", value) if value else ()
                ips = tuple(a for a in words if a)
                if value:
                    known[stack] = ips
            used.add(stack)
            count, duration, nbytes, ok = _CALL_SUM.unpack(raw_sum)
            sums = CallSum(count, duration, nbytes, ok)
            self.log.add_sum(pid, tid, api, error, ips, caller, target, sums)
        return used

    # -- continuous use ---------------------------------------------------------------------
    def cut(self) -> CudaCut:
        """The calls and memory events since the last cut (or the start), taken out of the
        kernel's sums while the probes stay attached; then processes that have exited are
        detached and forgotten. Once the kernel's stack map is half full, the stacks no sum
        of this period used are removed from it (a stack seen again is stored again)."""
        self.drain()
        self.log.summed.clear()
        used = self._add_sums(self._obj.map("calls").take_all())
        calls = self.log.take_calls()
        memory = self.log.take_memory_events()
        stacks_map = self._obj.map("stacks")
        if len(self._kernel_stacks) >= stacks_map.max_entries // 2:
            for h in [h for h in self._kernel_stacks if h not in used]:
                del self._kernel_stacks[h]
                stacks_map.delete(struct.pack("<Q", h))
        self._detach_exited()
        return CudaCut(calls, memory, self.log.stacks)

    def program_fds(self) -> list[int]:
        """Descriptors of the loaded BPF programs (for the kernel's BPF statistics)."""
        if self._obj.ptr is None:
            return []
        programs = (self._entry, self._return, "on_loader_state", "on_exec", "on_fork")
        return [self._obj.program_fd(p) for p in programs]

    def _detach_exited(self) -> None:
        """Forget processes gone since the last cut, in the kernel and here (what names
        their calls once they are gone before it: the maps of a process that exited during
        this period name its last calls)."""
        for pid in self._gone:
            self.comm.pop(pid, None)
            self.maps.forget(pid)
            if self.python is not None:
                self.python.forget(self._obj, pid)
        self._loader_seen = {p for p in self._loader_seen if procs.alive(p)}
        self._gone = [p for p in self.attached if not procs.alive(p)]
        for pid in self._gone:  # the files stay probed, for the processes still to come
            self.attached.pop(pid)
            self._loader_seen.discard(pid)
            self._watched.discard(pid)
            self._targets.discard(pid)
            self._seen_libs.pop(pid, None)
            key = struct.pack("<I", pid)
            for name in ("libs", "known", "targets"):
                self._obj.map(name).delete(key)

    def close(self) -> None:
        """Read what the kernel summed, detach every probe and free the BPF object
        (idempotent); events, sums and counters stay readable. No process is stopped from
        the first step on, and those stopped before are set up and continued."""
        try:
            self._stop_holding()
            if self._final_stats is None and self._obj.loaded and self._obj.ptr is not None:
                try:
                    self._rb.consume()
                    self.collect()
                    self._final_stats = self.stats()
                except BpfError:
                    self._final_stats = {}
        finally:
            self.holds.close()
            self._obj.close()
            if self.python is not None:
                self.python.close()

    def _stop_holding(self) -> None:
        """Detach what stops processes (the loaders' probes, the exec hook), so that none
        is stopped while the rest is read and closed."""
        if self._obj.ptr is None:
            return
        for key, link in list(self.loaders.items()):
            if link is not None:
                self._obj.detach(link)
                self.loaders[key] = None
        if self._exec_link is not None:
            self._obj.detach(self._exec_link)
            self._exec_link = None

    def __enter__(self) -> CudaProbes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _api_info(api: Api) -> bytes:
    """struct api_info of bpf/cuda.bpf.c."""
    target = api.func_arg if api.role == LAUNCH else api.kind_arg if api.role == COPY else -1
    fields = (api.size_arg, api.size_arg2, target)
    packed = [f if f >= 0 else NO_ARG for f in fields]
    return struct.pack("<BBBB", *packed, 1 if api.role in SUMMED_ROLES else 0)


def _power_of_two(n: int) -> int:
    size = 4096
    while size < n:
        size *= 2
    return size
