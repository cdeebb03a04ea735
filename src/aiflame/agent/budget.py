"""The agent's CPU budget: its own CPU time plus what its BPF programs cost the kernel.

The BPF programs run in the context of the sampled or probed process, so that cost is
not in the agent's CPU time: the kernel measures it itself when BPF statistics are on
(``BPF_ENABLE_STATS``, held as a file descriptor: they are switched off again when the
agent exits, and ``kernel.bpf_stats_enabled`` set by someone else is left alone), as
``run_time_ns`` in ``/proc/self/fdinfo/<program fd>``. What neither shows is the trap of
a uprobe (a few microseconds per probed call, in the probed process).

The rate controller: once per period the cost of the period is compared with the budget
(default 1% of one core for the whole agent); over it, the CPU sampling rate is lowered in
proportion (never below ``min_hz``); under half of it, raised back towards the configured
rate. The rate is only changed between periods, and each profile records the rate it was
taken at, so values stay comparable.
"""

from __future__ import annotations

import ctypes
import os
import platform
import resource
from collections.abc import Iterable
from dataclasses import dataclass

_BPF_ENABLE_STATS = 32  # enum bpf_cmd
_BPF_STATS_RUN_TIME = 0
_SYSCALL_BPF = {"x86_64": 321, "aarch64": 280}


def enable_bpf_stats() -> int | None:
    """A descriptor that keeps the kernel's BPF run-time statistics on while it is open;
    None when the kernel refuses (no CAP_SYS_ADMIN, or too old: Linux 5.8+)."""
    nr = _SYSCALL_BPF.get(platform.machine())
    if nr is None:
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    attr = ctypes.create_string_buffer(8)  # union bpf_attr { struct { __u32 type; } enable_stats; }
    ctypes.c_uint32.from_buffer(attr).value = _BPF_STATS_RUN_TIME
    fd = libc.syscall(nr, _BPF_ENABLE_STATS, attr, 4)
    return fd if fd >= 0 else None


def stats_already_on() -> bool:
    try:
        with open("/proc/sys/kernel/bpf_stats_enabled", encoding="ascii") as f:
            return f.read().strip() == "1"
    except OSError:
        return False


def programs_run_time_ns(fds: Iterable[int]) -> int:
    """Sum of ``run_time_ns`` of these BPF program descriptors (0 where unknown)."""
    total = 0
    for fd in fds:
        try:
            with open(f"/proc/self/fdinfo/{fd}", encoding="ascii") as f:
                for line in f:
                    if line.startswith("run_time_ns:"):
                        total += int(line.split()[1])
                        break
        except (OSError, ValueError):
            continue
    return total


def agent_cpu_seconds() -> float:
    """User + system CPU time of this process, every thread."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


@dataclass
class PeriodCost:
    wall_s: float
    agent_cpu_s: float
    bpf_cpu_s: float

    @property
    def total_s(self) -> float:
        return self.agent_cpu_s + self.bpf_cpu_s

    @property
    def share(self) -> float:
        """Of one core."""
        return self.total_s / self.wall_s if self.wall_s > 0 else 0.0


class CpuBudget:
    """Measures each period's cost and picks the next period's sampling rate."""

    def __init__(self, budget: float = 0.01, max_hz: int = 19, min_hz: int = 1) -> None:
        self.budget = budget
        self.max_hz = max_hz
        self.min_hz = max(1, min(min_hz, max_hz))
        self.rate_hz = max_hz
        self.stats_fd = None if stats_already_on() else enable_bpf_stats()
        self.bpf_measured = self.stats_fd is not None or stats_already_on()
        self._last_cpu = agent_cpu_seconds()
        self._last_bpf_ns = 0
        self.total_agent_cpu_s = 0.0
        self.total_bpf_cpu_s = 0.0
        self.last: PeriodCost | None = None

    def measure(self, wall_s: float, program_fds: Iterable[int]) -> PeriodCost:
        cpu = agent_cpu_seconds()
        bpf_ns = programs_run_time_ns(program_fds)
        # a program reloaded (or replaced) restarts its counter: count from its new value
        delta_ns = bpf_ns - self._last_bpf_ns if bpf_ns >= self._last_bpf_ns else bpf_ns
        cost = PeriodCost(wall_s, max(cpu - self._last_cpu, 0.0), delta_ns / 1e9)
        self._last_cpu, self._last_bpf_ns = cpu, bpf_ns
        self.total_agent_cpu_s += cost.agent_cpu_s
        self.total_bpf_cpu_s += cost.bpf_cpu_s
        self.last = cost
        return cost

    def next_rate(self, cost: PeriodCost) -> int:
        """The sampling rate for the next period."""
        if self.budget <= 0 or cost.wall_s <= 0:
            return self.rate_hz
        share = cost.share
        if share > self.budget:
            wanted = int(self.rate_hz * self.budget / share)
            self.rate_hz = max(self.min_hz, min(self.rate_hz - 1, wanted))
        elif share < self.budget / 2 and self.rate_hz < self.max_hz:
            self.rate_hz = min(self.max_hz, max(self.rate_hz + 1, int(self.rate_hz * 1.5)))
        return self.rate_hz

    def close(self) -> None:
        if self.stats_fd is not None:
            os.close(self.stats_fd)
            self.stats_fd = None
