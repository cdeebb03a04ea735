"""Continuous profiles of every process of the host, cut every period, per process.

The collectors of ``aiflame record`` (:mod:`aiflame.collectors.ebpf`), used continuously:
the CPU sampler (every process, Python frames walked in the kernel) and, where the
kernel allows them, the CUDA/HIP API probes on every process that maps a CUDA or HIP
library. Every period :meth:`ContinuousProfiler.cut` takes what the kernel summed since
the last cut (nothing is detached) and builds, per process, up to three profiles in the
sample types other tools know (Pyroscope, Grafana, ``go tool pprof``):

==============  ==============================================================  ===========
profile         sample types (pprof ``type/unit``)                              from
==============  ==============================================================  ===========
``process_cpu`` ``samples/count``, ``cpu/nanoseconds`` (period: 1e9 / rate)     CPU sampler
``memory``      ``alloc_objects/count``, ``alloc_space/bytes``,                 allocation
                ``inuse_objects/count``, ``inuse_space/bytes``                  probes
``gpu_api``     ``launches/count``, ``sync/nanoseconds``, ``copies/count``,     launch, sync
                ``copy/bytes``                                                  and copy probes
==============  ==============================================================  ===========

``alloc_*`` is what the process allocated in the period; ``inuse_*`` what it held at its
peak in the period (the first moment its live GPU memory was highest, allocations carried
from earlier periods included), by allocation stack. The memory profiles' period type is
``space/bytes``, as Go's heap profiles have it, so their Pyroscope profile types are the
ones Grafana knows (``memory:inuse_space:bytes:space:bytes``...).
Kernel threads have no process of their own to speak of: their samples make one profile
(``service_name=kernel``), each stack under its thread's name.

One profile per *series* and type, not per process: the processes whose series labels
(:mod:`.identity`: the workload's labels, without ``pid`` by default) are the same make one
profile (the ranks of a job differ by ``rank``; a service's workers, or a hundred short
shell commands, do not). A process left out by the configuration's filters or relabel
rules is not symbolized at all.

Which processes to probe is decided here, since reading ``/proc/PID/maps`` is what costs:
a process is looked at when first seen, again 0.5, 2, 5, 15 and 30 s later (``import
torch`` loads libcudart late), then every minute; from the look after the 15 s wait on, only if
it was sampled since its last look (a process that has not run has loaded nothing).
"""

from __future__ import annotations

import ctypes
import heapq
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from aiflame.agent.identity import Identities
from aiflame.collectors.ebpf.cpu_profile import NO_USER_STACK, StackCache, build_profile
from aiflame.collectors.ebpf.cuda import CudaOptions, CudaProbes
from aiflame.collectors.ebpf.cuda_apis import APIS, COPY, GRAPH, LAUNCH, SYNC
from aiflame.collectors.ebpf.cuda_events import CallKey, CallSum
from aiflame.collectors.ebpf.cuda_libs import gpu_libraries
from aiflame.collectors.ebpf.cuda_memory import LiveMemory
from aiflame.collectors.ebpf.cuda_profile import (
    calls_profile,
    resolver_symbolizer,
    user_stack_interner,
)
from aiflame.collectors.ebpf.cuda_python import target_naming
from aiflame.collectors.ebpf.libbpf import BpfError
from aiflame.collectors.ebpf.sampler import CpuSampler, RawProfile, SamplerOptions
from aiflame.model import FrameKind, Profile, ProfileBuilder, SampleType
from aiflame.symbolize.elf import release_mapped_pages
from aiflame.symbolize.process import SymbolResolver
from aiflame.symbolize.pyframes import PythonNaming
from aiflame.transforms.merge import merge

PROCESS_CPU, MEMORY, GPU_API = "process_cpu", "memory", "gpu_api"
CPU_TYPES = [SampleType("samples", "count"), SampleType("cpu", "nanoseconds")]
MEMORY_TYPES = [
    SampleType("alloc_objects", "count"),
    SampleType("alloc_space", "bytes"),
    SampleType("inuse_objects", "count"),
    SampleType("inuse_space", "bytes"),
]
GPU_API_TYPES = [
    SampleType("launches", "count"),
    SampleType("sync", "nanoseconds"),
    SampleType("copies", "count"),
    SampleType("copy", "bytes"),
]
KERNEL_PID = 0  # the pseudo-process of kernel threads' samples
SCAN_STEPS_S = (0.5, 2.0, 5.0, 15.0, 30.0, 60.0)
# From this look on (the one a 15 s wait after the one before), a process is looked at
# again only if it was sampled since its last look: one that has not run has loaded no
# library (a CUDA runtime's start alone takes a tenth of a second of CPU), and the host's
# idle daemons then cost no reading of their maps a minute.
RAN_SINCE_FROM_STEP = 4
# A sampled process's interpreter is described at its second look, this long after its
# first sample: most processes a busy host starts (a shell's, a probe's, a cron job's
# Python) have ended by then and cost one reading of their maps only.
SECOND_LOOK_S = 1.0
# how often /proc is listed for new processes (those not sampled yet: a CUDA program is
# sampled as its runtime starts, which takes a tenth of a second of CPU or more)
PROC_LIST_S = 2.0
LOOK_FRESH_S = 1.0  # the start time, name and arguments the sampler read this recently
MAPS_FRESH_S = 1.0  # maps the sampler read this recently are current enough for the probes
MAX_CACHED_STACKS = 200_000
MAX_SYMBOL_FILES = 256
# Each period samples at a period drawn within this fraction of 1 / rate (its profiles say
# which): with a prime mean rate, no periodic work of the host is sampled in step with it.
JITTER = 0.2
SeriesKey = tuple[tuple[str, str], ...]


# The sampler's counters that are losses (what the metric aiflame_dropped_events_total
# counts), and those that say a sample is incomplete (its stack cut or partly unreadable).
# The others (samples, idle, samples with a Python stack) are no loss of anything.
LOSSES = {
    "counts_full": "ebpf samples",  # the count map was full: samples not counted
    "stacks_full": "ebpf stacks",  # the stack map was full: a sample without its stack
    "events_lost": "ebpf announcements",  # ring buffer full: a new process not announced
}
INCOMPLETE = {
    "user_stack_empty": "user stack unreadable",
    "kernel_stack_failed": "kernel stack unreadable",
    "python_failed": "python frames unreadable",
    "python_depth": "python stack cut",
}


@dataclass
class CutProfile:
    """One series' profile of one type for one period."""

    pid: int  # its first process; KERNEL_PID for kernel threads
    kind: str  # PROCESS_CPU, MEMORY, GPU_API
    profile: Profile  # in the sample types above, pprof meta set
    samples: int  # CPU samples, or probed calls and allocations
    rate_hz: int = 0
    labels: dict[str, str] = field(default_factory=dict)  # the series: see identity.py
    pids: tuple[int, ...] = ()  # the processes in it


@dataclass
class CutStats:
    cpu_samples: int = 0
    cuda_events: int = 0
    processes_seen: int = 0  # first sights (the agent's cost grows with them)
    profiles: int = 0
    left_out: int = 0  # samples of processes the configuration leaves out
    lost: dict[str, int] = field(default_factory=dict)  # LOSSES of the last cut
    incomplete: dict[str, int] = field(default_factory=dict)  # INCOMPLETE, since the start


def gpu_api_values(role: str, key: CallKey, s: CallSum) -> list[float]:
    """launches, sync ns, copies, copy bytes of one summed call site."""
    if role in (LAUNCH, GRAPH):
        return [float(s.calls), 0.0, 0.0, 0.0]
    if role == SYNC:
        return [0.0, float(s.duration_ns), 0.0, 0.0]
    if role == COPY:
        return [0.0, 0.0, float(s.calls), float(s.nbytes)]
    return [0.0, 0.0, 0.0, 0.0]


def pprof_meta(start_ns: int, duration_ns: int, **extra: object) -> dict[str, object]:
    return {"time_nanos": start_ns, "duration_nanos": duration_ns, **extra}


def cpu_profile(
    profile: Profile,
    rate_hz: int,
    start_ns: int,
    duration_ns: int,
    rate_note: str = "",
    period_ns: int = 0,
) -> Profile:
    """``cpu-samples`` of the sampler as ``samples/count`` + ``cpu/nanoseconds``, the period
    the one actually used (``period_ns``, the rate's jittered; default ``1e9 / rate_hz``).
    Labels are dropped: the process's labels go with the series. ``rate_note`` says why the
    rate is not the configured one (the CPU budget)."""
    period = period_ns or round(1e9 / max(rate_hz, 1))
    counts = profile.values[:, 0] if len(profile) else np.zeros(0)
    values = np.column_stack([counts, counts * period]) if len(profile) else np.zeros((0, 2))
    said = f"aiflame agent: sampled at {rate_hz} Hz"
    if period_ns:
        said += f", jittered: {1e9 / period_ns:.2f} Hz in this period"
    said += f" ({rate_note})" if rate_note else ""
    comments = [*profile.meta.get("comments", ()), said]  # type: ignore[misc]
    meta = pprof_meta(
        start_ns,
        duration_ns,
        period_type=("cpu", "nanoseconds"),
        period=period,
        default_type=1,
        comments=comments,
        sampling_rate_hz=rate_hz,
    )
    return replace(
        profile,
        sample_types=list(CPU_TYPES),
        values=values,
        sample_labels=np.zeros(len(profile), dtype=np.int64),
        label_sets=[()],
        timestamps=None,
        meta=meta,
    )


class ContinuousProfiler:
    """See the module docstring. ``tick`` often (it waits on the ring buffers), ``cut``
    every period; ``close`` detaches everything (also on any error of ``start``)."""

    def __init__(
        self,
        identities: Identities,
        rate_hz: int = 19,
        cuda: bool = True,
        exclude_pids: set[int] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.identities = identities
        self.rate_hz = rate_hz
        self.rate_note = ""  # why the rate is lowered, said in each CPU profile
        self.period_ns = 0  # the sampling period of the period in progress (0: 1e9 / rate)
        self.want_cuda = cuda
        self.exclude = exclude_pids if exclude_pids is not None else {os.getpid()}
        self.clock = clock
        # a few maps snapshots per process: enough for the libraries of one period
        # (an interpreter that maps libpython after its exec is looked for twice a second)
        self.sampler = CpuSampler(
            SamplerOptions(
                freq=rate_hz,
                pids=None,
                max_snapshots=3,
                python_search_s=0.5,
                code_maps_only=True,
                python_at_second_look=True,
                second_look_s=SECOND_LOOK_S,
            )
        )
        self.probes: CudaProbes | None = None
        self.live_memory = LiveMemory()
        self.stack_cache = StackCache()  # stacks symbolized in earlier periods
        # files whose symbols stay loaded: a bound on memory whatever the host runs (the
        # least recently used are read again if a process still maps them)
        self.resolver = SymbolResolver(max_files=MAX_SYMBOL_FILES)
        self.notes: list[str] = []
        self.stats = CutStats()
        self._namings: dict[int, PythonNaming] = {}
        self._scan_queue: list[tuple[float, int, int]] = []  # (when next, pid, step): a heap
        self._seen: set[int] = set()
        self._ran: set[int] = set()  # sampled since their last look (RAN_SINCE_FROM_STEP)
        self._listed: set[int] = set()  # first seen by listing /proc, not sampled since
        self._gone: set[int] = set()
        self._next_list = 0.0
        self._period_start = 0.0

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        self.sampler.start()
        if self.sampler.python_unavailable:
            self.notes.append(self.sampler.python_unavailable)
        if self.want_cuda:
            try:
                self.probes = CudaProbes(CudaOptions(every_process=True))
            except BpfError as e:
                self.notes.append(f"CUDA/HIP API probes not used: {e}")
        self._period_start = self.clock()
        self._retime()

    def close(self) -> None:
        self.sampler.close()
        if self.probes is not None:
            self.probes.close()
            self.probes = None

    def program_fds(self) -> list[int]:
        fds = self.sampler.program_fds()
        if self.probes is not None:
            fds += self.probes.program_fds()
        return fds

    def set_rate(self, hz: int, note: str = "") -> None:
        self.rate_note = note
        if hz != self.rate_hz:
            self.rate_hz = hz
            self.sampler.set_rate(hz)  # new timers, at 1 / hz
            self._retime()

    def _retime(self) -> None:
        """Draw the sampling period of the next period (see JITTER)."""
        period = round(1e9 / self.rate_hz * random.uniform(1 - JITTER, 1 + JITTER))
        try:
            self.sampler.set_period_ns(period)
        except OSError as e:  # the kernel refused: the timers keep 1 / rate
            if self.period_ns >= 0:
                self.notes.append(f"sampling without jitter: {e.strerror or e}")
            self.period_ns = -1
            return
        self.period_ns = period

    # -- between cuts -----------------------------------------------------------------------
    def tick(self, timeout_s: float = 0.1) -> None:
        """Wait up to ``timeout_s`` for the kernel's announcements; meanwhile name new
        processes and probe those that loaded CUDA/HIP libraries."""
        self.sampler.poll(max(1, int(timeout_s * 1000)))
        now = time.monotonic()
        for pid in self.sampler.maps.keys() - self._seen:
            self._first_sight(pid, now, sampled=True)
        for pid in self._listed & self.sampler.maps.keys():
            # found by listing /proc first, sampled now: named while it runs, as any other
            self._listed.discard(pid)
            self.identities.of(pid, self.sampler.last_look(pid, LOOK_FRESH_S))
        if self.probes is not None and now >= self._next_list:
            # a CUDA process may not have been sampled yet: look at its maps all the same
            self._next_list = now + PROC_LIST_S
            for pid in _pids() - self._seen:
                self._first_sight(pid, now, sampled=False)
        if self.probes is not None:
            due = []
            while self._scan_queue and self._scan_queue[0][0] <= now:
                _, pid, step = heapq.heappop(self._scan_queue)
                if pid in self._seen:
                    # (from RAN_SINCE_FROM_STEP on, only if it has run since its last look)
                    worth = step < RAN_SINCE_FROM_STEP or pid in self._ran
                    if worth and (step > 0 or self._may_map_gpu_libraries(pid)):
                        due.append(pid)
                        self._ran.discard(pid)
                    later = now + SCAN_STEPS_S[min(step, len(SCAN_STEPS_S) - 1)]
                    heapq.heappush(self._scan_queue, (later, pid, step + 1))
            if due:  # (maps the sampler has just read are not read again)
                known = {p: t for p in due if (t := self.sampler.recent_maps(p, MAPS_FRESH_S))}
                self.probes.scan_pids(due, known)
                for pid in due:  # probed (it maps CUDA/HIP): named while it runs
                    if pid in self.probes.attached:
                        self.identities.of(pid)
            self.probes.poll(0)

    def _may_map_gpu_libraries(self, pid: int) -> bool:
        """At first sight of a sampled process, the sampler has just read its maps: no
        CUDA/HIP library in them, no need to read them again now (later looks do)."""
        texts = self.sampler.maps.get(pid)
        return not texts or bool(gpu_libraries(pid, texts[-1]))

    def _first_sight(self, pid: int, now: float, sampled: bool) -> None:
        self._seen.add(pid)
        self.stats.processes_seen += 1
        if pid in self.exclude:
            return
        if sampled:  # read while it runs: a short-lived process is gone by the cut
            info = self.identities.of(pid, self.sampler.last_look(pid, LOOK_FRESH_S))
            if info is not None and info.series is None:
                return  # left out by the configuration: not probed either
        else:
            self._listed.add(pid)
        # (one never sampled is read when it has something to say: CUDA calls). One found
        # by listing /proc, not sampled, is looked at a listing later: most processes a
        # busy host starts (a shell's pipeline) have ended by then, and the sampler
        # announces one that works sooner.
        heapq.heappush(self._scan_queue, (now if sampled else now + PROC_LIST_S, pid, 0))

    # -- the cut ----------------------------------------------------------------------------
    def cut(self) -> list[CutProfile]:
        """Every process's profiles of the period that ends now."""
        end = self.clock()
        start_ns, duration_ns = int(self._period_start * 1e9), int((end - self._period_start) * 1e9)
        self._period_start = end
        out: list[CutProfile] = []
        raw = self.sampler.cut()
        self._ran.update(k.pid for k, _ in raw.counts)
        period_ns = max(self.period_ns, 0)  # what this period was sampled at
        if self.period_ns >= 0:
            self._retime()
        self.stats.lost = {LOSSES[k]: v for k, v in raw.stats.items() if k in LOSSES and v}
        for k, what in INCOMPLETE.items():
            self.stats.incomplete[what] = self.stats.incomplete.get(what, 0) + raw.stats.get(k, 0)
        out.extend(self._cpu_profiles(raw, start_ns, duration_ns, period_ns))
        if self.probes is not None:
            out.extend(self._cuda_profiles(start_ns, duration_ns))
        self.stats.profiles += len(out)
        self._forget_exited()
        # The symbol tables stay cached, the file pages they were read from need not stay
        # resident until the next period (they are clean: the page cache has them).
        release_mapped_pages()
        release_free_heap()
        return out

    def _series(self, pid: int, comm: str = "") -> dict[str, str] | None:
        """The series of process ``pid`` (None: the configuration leaves it out)."""
        if pid == KERNEL_PID:
            return self.identities.gone_series("kernel", kernel=True)
        info = self.identities.of(pid)
        if info is not None:
            return info.series
        # gone before it could be read: its name is all there is
        return self.identities.gone_series(self.sampler.process_names.get(pid) or comm)

    def _group(self, pids: dict[int, str]) -> dict[SeriesKey, tuple[dict[str, str], list[int]]]:
        """The processes (pid -> a name of it) by series; those left out are not in it.
        Kernel threads are a group of their own whatever their labels."""
        out: dict[SeriesKey, tuple[dict[str, str], list[int]]] = {}
        for pid in sorted(pids):
            series = self._series(pid, pids[pid])
            if series is not None:
                key = tuple(sorted(series.items())) + ((("", "kernel"),) if not pid else ())
                out.setdefault(key, (series, []))[1].append(pid)
        return out

    def _cpu_profiles(
        self, raw: RawProfile, start_ns: int, duration_ns: int, period_ns: int = 0
    ) -> list[CutProfile]:
        by_pid: dict[int, list] = {}
        names: dict[int, str] = {}
        for key, count in raw.counts:
            if key.pid in self.exclude:
                continue
            group = KERNEL_PID if key.user_stack == NO_USER_STACK or not key.pid else key.pid
            by_pid.setdefault(group, []).append((key, count))
            names.setdefault(group, key.comm)
        out = []
        groups = self._group(names)
        kept = {p for _, ps in groups.values() for p in ps}
        self.stats.left_out += sum(c for p in by_pid.keys() - kept for _, c in by_pid[p])
        for series, pids in groups.values():
            counts = [kc for pid in pids for kc in by_pid[pid]]
            in_it = {k.pid for k, _ in counts}
            sub = replace(
                raw,
                counts=counts,
                python_modules={p: m for p, m in raw.python_modules.items() if p in in_it},
                python_unsupported={p: m for p, m in raw.python_unsupported.items() if p in in_it},
            )
            kernel = pids[0] == KERNEL_PID
            # Python frames are named relative to one program's directories: a series' processes
            # run the same program (those of Python first, where there are several kinds)
            python = [p for p in pids if p in raw.python_modules]
            naming = None if kernel else self._naming((python or pids)[0])
            profile, _ = build_profile(
                sub, self.resolver, kernel, naming, self.stack_cache, labels=False
            )  # (the series carries the labels)
            samples = sum(c for _, c in counts)
            self.stats.cpu_samples += samples
            cpu = cpu_profile(profile, raw.freq, start_ns, duration_ns, self.rate_note, period_ns)
            out.append(
                CutProfile(pids[0], PROCESS_CPU, cpu, samples, raw.freq, series, tuple(pids))
            )
        return out

    def _cuda_profiles(self, start_ns: int, duration_ns: int) -> list[CutProfile]:
        assert self.probes is not None
        cut = self.probes.cut()
        calls_by_pid: dict[int, dict[CallKey, CallSum]] = {}
        for key, s in cut.calls.items():
            calls_by_pid.setdefault(key.pid, {})[key] = s
        sites = self.live_memory.period(cut.memory_events)
        # a process that ended holds nothing from now on: its last profile (this one) says
        # what it held when it ended
        for pid in {pid for pid, _ in self.live_memory.live} - _pids():
            self.live_memory.forget(pid)
        sites_by_pid: dict[int, dict] = {}
        for (pid, stack, api), site in sites.items():
            sites_by_pid.setdefault(pid, {})[(stack, api)] = site
        out = []
        for pid in sorted(calls_by_pid.keys() | sites_by_pid.keys()):
            if pid in self.exclude or self._series(pid) is None:
                continue
            symbolize = self._cuda_symbolizer(pid)
            calls = {
                k: s for k, s in calls_by_pid.get(pid, {}).items()
                if APIS[k.api].role in (LAUNCH, GRAPH, SYNC, COPY)
            }  # fmt: skip
            if calls:
                p = calls_profile(
                    self.probes.log,
                    symbolize,
                    calls=calls,
                    sample_types=GPU_API_TYPES,
                    values=gpu_api_values,
                )
                p.meta = pprof_meta(start_ns, duration_ns, default_type=0)
                n = sum(s.calls for s in calls.values())
                self.stats.cuda_events += n
                out.append(CutProfile(pid, GPU_API, _without_labels(p), n))
            if pid in sites_by_pid:
                p = self._memory_profile(pid, sites_by_pid[pid], symbolize)
                p.meta = pprof_meta(
                    start_ns, duration_ns, default_type=3, period_type=["space", "bytes"], period=1
                )
                n = sum(s.alloc_count for s in sites_by_pid[pid].values())
                out.append(CutProfile(pid, MEMORY, p, n))
        return self._by_series(out)

    def _by_series(self, per_process: list[CutProfile]) -> list[CutProfile]:
        """Per-process profiles as one per series and type (summed: merged)."""
        groups = self._group({cp.pid: "" for cp in per_process})
        series_of = {p: (key, series) for key, (series, ps) in groups.items() for p in ps}
        merged: dict[tuple[str, SeriesKey], list[CutProfile]] = {}
        for cp in per_process:
            if cp.pid in series_of:
                key, cp.labels = series_of[cp.pid]
                merged.setdefault((cp.kind, key), []).append(cp)
        out = []
        for cps in merged.values():
            first = cps[0]
            if len(cps) > 1:
                profile = merge([cp.profile for cp in cps])
                profile.meta = dict(first.profile.meta)
                first = replace(first, profile=_without_labels(profile),
                                samples=sum(cp.samples for cp in cps))  # fmt: skip
            first.pids = tuple(cp.pid for cp in cps)
            out.append(first)
        return out

    def _memory_profile(self, pid: int, sites: dict, symbolize) -> Profile:
        assert self.probes is not None
        b = ProfileBuilder(MEMORY_TYPES)
        intern = user_stack_interner(self.probes.log, symbolize)
        api_frames: dict[int, int] = {}
        for (stack, api), s in sorted(sites.items()):
            fid = api_frames.get(api)
            if fid is None:
                fid = api_frames[api] = b.frame(APIS[api].name, FrameKind.RUNTIME)
            sid = b.stack([fid], intern(b, pid, stack))
            b.add(sid, [s.alloc_count, s.alloc_bytes, s.inuse_count, s.inuse_bytes])
        return b.build()

    def _cuda_symbolizer(self, pid: int):
        assert self.probes is not None
        native = resolver_symbolizer(self.probes.maps, self.resolver)
        if self.probes.python is None:
            return native
        return self.probes.python.symbolizer(native, self._naming(pid))

    def _naming(self, pid: int) -> PythonNaming:
        naming = self._namings.get(pid)
        if naming is None:
            # The class is in the code object's qualified name (3.11+): reading and parsing
            # the program's sources to find it, as ``record`` can afford, would cost a
            # continuous profiler seconds per new process.
            roots = target_naming(pid).roots
            naming = self._namings[pid] = PythonNaming(roots, read_sources=False)
        return naming

    def _forget_exited(self) -> None:
        """Forget processes found gone at the previous cut (their last samples, taken by
        the kernel before they exited, were in this one)."""
        self.stack_cache.forget(self._gone)
        self.resolver.forget_processes(self._gone)
        if len(self.stack_cache.stacks) > MAX_CACHED_STACKS:
            self.stack_cache = StackCache()  # a bound, whatever runs on the host
        for pid in self._gone:
            self._seen.discard(pid)  # its entry leaves the scan queue when it comes up
            self._ran.discard(pid)
            self._listed.discard(pid)
            self._namings.pop(pid, None)
            self.live_memory.forget(pid)
            self.identities.forget(pid)
        self._gone = {p for p in self._seen if not os.path.exists(f"/proc/{p}")}


def _libc_malloc_trim() -> Callable[[int], int] | None:
    try:
        fn = ctypes.CDLL(None).malloc_trim  # glibc's; other C libraries may lack it
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
    return fn


_MALLOC_TRIM = _libc_malloc_trim()


def release_free_heap() -> None:
    """Hand the heap memory freed since the last period back to the kernel.

    Each period builds and drops its profiles; the C allocator keeps what was freed for
    later use, so a daemon's resident set would stay at its largest period. glibc's
    ``malloc_trim`` returns whole free pages of every arena (a few milliseconds a period)."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def _without_labels(p: Profile) -> Profile:
    return replace(p, sample_labels=np.zeros(len(p), dtype=np.int64), label_sets=[()])


def _pids() -> set[int]:
    try:
        return {int(n) for n in os.listdir("/proc") if n.isdigit()}
    except OSError:
        return set()
