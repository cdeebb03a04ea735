"""Recording with the CUDA/HIP probes.

:func:`launch` / :func:`attach`: the probes alone (``aiflame record --memory``): launch a
program (or attach to a PID), probe the CUDA/HIP libraries its processes map, read events
until it exits, ``-d`` seconds pass, Ctrl-C or SIGTERM; every probe is detached before
returning, whatever happens.

:class:`CudaRecorder`: the probes as one part of a larger session, beside the CPU sampler
(the interface of :class:`aiflame.collectors.ebpf.recording.EbpfRecorder`)::

    rec = CudaRecorder(follow_children=True)    # system_wide=True: every process
    rec.start()                                 # loads the BPF object; BpfError if refused
    Popen(argv, preexec_fn=rec.preexec)         # a target from before its exec
    rec.add_target(pid)
    rec.tick(50)                                # waits up to 50 ms: libraries, events
    profile = rec.finish()                      # detaches; None when no call was seen
    rec.notes                                   # drops over the caps, attach failures
    rec.close()

A recorded process that loads a CUDA/HIP library is stopped as its dynamic loader reports
it until its probes are attached (:class:`.cuda.CudaProbes`), so even the calls made right
after the library is loaded are seen; ``/proc/PID/maps`` is also looked at every
``scan_s``, for the libraries of processes not stopped (a shell's foreground job, a loader
other than glibc's).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from aiflame.collectors import procs
from aiflame.collectors.ebpf.cuda import CudaOptions, CudaProbes
from aiflame.collectors.ebpf.cuda_python import target_naming
from aiflame.model import Profile

SYSTEM_SCAN_S = 2.0  # every process's maps, system-wide: a slower pace


class CudaRecorder:
    def __init__(
        self,
        follow_children: bool = True,
        system_wide: bool = False,
        options: CudaOptions | None = None,
        scan_s: float = 0.2,  # reading /proc/PID/maps takes the target's mmap lock
    ) -> None:
        self.follow_children = follow_children
        self.system_wide = system_wide
        self.options = options
        self.scan_s = SYSTEM_SCAN_S if system_wide else scan_s
        self.probes: CudaProbes | None = None
        self.notes: list[str] = []
        self._next_scan = 0.0

    def start(self) -> None:
        options = self.options or CudaOptions()
        options.every_process = self.system_wide
        options.follow_children = self.follow_children
        self.probes = CudaProbes(options)

    def preexec(self) -> None:
        """``preexec_fn`` of the launched program: a target before its exec."""
        if self.probes is not None and not self.system_wide:
            self.probes.preexec()

    def add_target(self, pid: int) -> None:
        if self.probes is not None:
            self.probes.watch(pid)

    def tick(self, timeout_ms: int = 0) -> None:
        """Attach to what appeared since (at most every ``scan_s``), read the events,
        waiting up to ``timeout_ms`` for them (a process stopped for its set-up waits)."""
        if self.probes is None:
            return
        now = time.monotonic()
        if now >= self._next_scan:
            if self.system_wide:
                self.probes.watch_later(_all_pids())
            self.probes.scan(children=self.follow_children)
            self._next_scan = now + self.scan_s
        self.probes.poll(timeout_ms)

    def finish(self) -> Profile | None:
        """Detach, then build the calls profile (launch-count, sync-time, copy-bytes,
        alloc-bytes, alloc-count, api-calls)."""
        if self.probes is None:
            return None
        self.probes.drain()
        self.probes.close()
        self.notes.extend(self.probes.notes())
        if not self.probes.log.all_calls():
            return None
        return self.probes.calls_profile()

    def close(self) -> None:
        if self.probes is not None:
            self.probes.close()


def _all_pids() -> list[int]:
    me = os.getpid()
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != me]


@dataclass
class CudaRecordOptions:
    probes: CudaOptions = field(default_factory=CudaOptions)
    duration: float | None = None
    subprocesses: bool = False
    scan_s: float = 0.05
    status: Callable[[str], None] | None = None


@dataclass
class CudaRecording:
    probes: CudaProbes  # closed (detached); its log and maps stay readable
    target: subprocess.Popen | None = None
    elapsed_s: float = 0.0
    interrupted: bool = False


def launch(argv: list[str], options: CudaRecordOptions) -> CudaRecording:
    """Run ``argv`` and record it; the program's exit status stays in ``target``."""
    options.probes.follow_children = True  # what the program starts is its part
    probes = CudaProbes(options.probes)
    try:
        target = procs.start(argv, preexec_fn=probes.preexec)
        rec = CudaRecording(probes, target)
        _record(rec, target.pid, options, target)
        return rec
    finally:
        probes.close()


def attach(pid: int, options: CudaRecordOptions) -> CudaRecording:
    procs.check_attachable(pid)
    options.probes.follow_children = options.subprocesses
    probes = CudaProbes(options.probes)
    try:
        rec = CudaRecording(probes)
        _record(rec, pid, options, None)
        return rec
    finally:
        probes.close()


def _record(
    rec: CudaRecording, pid: int, options: CudaRecordOptions, target: subprocess.Popen | None
) -> None:
    probes = rec.probes
    t0 = time.monotonic()
    with _trap_signals() as stop:
        probes.watch(pid)
        probes.naming = target_naming(pid)
        next_scan = 0.0
        while not stop:
            now = time.monotonic()
            if now >= next_scan:
                probes.scan(children=options.subprocesses)
                next_scan = now + options.scan_s
            probes.poll(int(options.scan_s * 1000))
            done = target.poll() is not None if target is not None else not procs.alive(pid)
            if done or (options.duration is not None and now - t0 >= options.duration):
                break
            if options.status:
                options.status(_status(probes, now - t0))
        rec.interrupted = bool(stop)
    probes.drain()
    rec.elapsed_s = time.monotonic() - t0


def _status(probes: CudaProbes, elapsed: float) -> str:
    n = probes.stats()["events"]
    procs_n = len(probes.attached)
    return f"aiflame: {elapsed:5.1f} s, {n:,} CUDA/HIP calls, {procs_n} processes probed"


@contextlib.contextmanager
def _trap_signals() -> Iterator[list[int]]:
    """Ctrl-C / SIGTERM end the recording (the profile is still written); the list the
    block gets is non-empty once one arrived. Signals the caller ignores stay ignored."""
    got: list[int] = []

    def handler(signum: int, frame: object) -> None:
        got.append(signum)

    wanted = [s for s in (signal.SIGINT, signal.SIGTERM) if signal.getsignal(s) != signal.SIG_IGN]
    old = {s: signal.signal(s, handler) for s in wanted}
    try:
        yield got
    finally:
        for s, h in old.items():
            signal.signal(s, h)
