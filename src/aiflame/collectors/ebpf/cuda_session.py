"""A recording with the CUDA/HIP probes alone: launch a program (or attach to a PID), probe
the CUDA/HIP libraries its processes map, read events until it exits, ``-d`` seconds pass,
Ctrl-C or SIGTERM; every probe is detached before returning, whatever happens.

Libraries are looked for in ``/proc/PID/maps`` every ``scan_s`` (50 ms): a program that
loads ``libcudart`` late (``import torch``) is probed from then on; calls made in the few
milliseconds between the load and the attach are not seen.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from aiflame.collectors import procs
from aiflame.collectors.ebpf.cuda import CudaOptions, CudaProbes
from aiflame.errors import AiflameError


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
    probes = CudaProbes(options.probes)
    try:
        try:
            target = subprocess.Popen(argv)
        except FileNotFoundError:
            raise AiflameError(f"{argv[0]}: command not found") from None
        except PermissionError:
            raise AiflameError(f"{argv[0]}: permission denied (not executable?)") from None
        except OSError as e:
            raise AiflameError(f"{argv[0]}: cannot run: {e.strerror or e}") from None
        rec = CudaRecording(probes, target)
        _record(rec, target.pid, options, target)
        return rec
    finally:
        probes.close()


def attach(pid: int, options: CudaRecordOptions) -> CudaRecording:
    procs.check_attachable(pid)
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
    n = probes.log.records
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
