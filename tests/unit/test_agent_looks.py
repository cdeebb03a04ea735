"""When the continuous profiler looks at a process again (agent/profiler.py and the
sampler's second look): what a new process costs on a busy host is reading its maps, so
a process is read again only when that can tell something new."""

from __future__ import annotations

import heapq
import os
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import cast

from aiflame.agent.identity import Identities
from aiflame.agent.profiler import RAN_SINCE_FROM_STEP, ContinuousProfiler
from aiflame.collectors.ebpf.cuda import CudaProbes
from aiflame.collectors.ebpf.sampler import _PID_EVENT, EV_PROCESS, CpuSampler, SamplerOptions


class ScanLog:
    """In place of the CUDA probes: which processes' maps they were asked to read."""

    def __init__(self) -> None:
        self.scanned: list[int] = []
        self.attached: dict[int, object] = {}

    def scan_pids(self, pids: Iterable[int], known_maps: Mapping[int, str] | None = None) -> None:
        self.scanned.extend(pids)

    def poll(self, timeout_ms: int = 0) -> None:
        pass

    def close(self) -> None:
        pass


@contextmanager
def sleepers(n: int) -> Iterator[list[int]]:
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
             for _ in range(n)]  # fmt: skip
    try:
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_later_looks_are_for_processes_that_ran_since():
    """From the look after a 15 s wait on, a process that was not sampled since its last
    look is not read again (it has loaded no CUDA library); earlier looks, while a new
    program loads its libraries, read every process."""
    with sleepers(3) as (ran, idle, young):
        profiler = ContinuousProfiler(Identities(host="h"), cuda=False)
        log = ScanLog()
        profiler.probes = cast(CudaProbes, log)
        profiler._next_list = float("inf")  # no listing of /proc in this test
        profiler._seen |= {ran, idle, young}
        profiler._ran = {ran}
        profiler._scan_queue = [
            (0.0, ran, RAN_SINCE_FROM_STEP),
            (0.0, idle, RAN_SINCE_FROM_STEP),
            (0.0, young, 1),
        ]
        heapq.heapify(profiler._scan_queue)
        profiler.tick(0.001)
        assert sorted(log.scanned) == sorted([ran, young])
        assert profiler._ran == set()  # looked at: it must run again to be read again
        # every one keeps its place in the schedule, the one left out too
        steps = {pid: step for _, pid, step in profiler._scan_queue}
        assert steps == {ran: RAN_SINCE_FROM_STEP + 1, idle: RAN_SINCE_FROM_STEP + 1, young: 2}
        profiler.close()


def test_the_second_look_waits_for_its_time():
    """A continuous profiler's second look comes ``second_look_s`` after a process's first
    sample, not sooner at a search for starting interpreters: one that ends before is
    never described to the kernel."""
    options = SamplerOptions(pids=None, code_maps_only=True, python_at_second_look=True,
                             python_search_s=0.05, second_look_s=2.0)  # fmt: skip
    sampler = CpuSampler(options)  # not started: its looks at processes only
    # this process: one that lives on whatever else the test run starts and stops
    pid = os.getpid()
    t0 = time.monotonic()
    sampler._on_event(_PID_EVENT.pack(pid, EV_PROCESS, 0))  # its first sample
    assert pid in sampler._undescribed and sampler.maps[pid]
    while time.monotonic() - t0 < 0.5:
        sampler.poll(20)  # searches for interpreters, ten a second
    assert pid in sampler._undescribed
    while pid in sampler._undescribed and time.monotonic() - t0 < 30:
        sampler.poll(20)
    state = (sampler._recheck, sampler._python_search)
    assert pid not in sampler._undescribed, state
    assert time.monotonic() - t0 >= 2.0


def test_a_process_listed_first_is_named_when_it_is_sampled():
    """A process found by listing /proc before its first sample is named at that sample,
    while it runs (not at the cut, when a short-lived one is gone: its series would then
    be its name alone, without its container's or job's labels)."""
    with sleepers(1) as (pid,):
        profiler = ContinuousProfiler(Identities(host="h"), cuda=False)
        profiler._first_sight(pid, time.monotonic(), sampled=False)
        profiler.tick(0.001)
        assert pid not in profiler.identities._cache  # listed only: not named yet
        profiler.sampler._on_event(_PID_EVENT.pack(pid, EV_PROCESS, 0))  # its first sample
        profiler.tick(0.001)
        assert profiler.identities._cache[pid].labels["host"] == "h"
        assert pid not in profiler._listed
        profiler.close()
