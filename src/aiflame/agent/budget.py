"""The agent's CPU budget: its own CPU time plus what its BPF programs cost the kernel.

The BPF programs run in the context of the sampled or probed process, so that cost is
not in the agent's CPU time: the kernel measures it itself when BPF statistics are on
(``BPF_ENABLE_STATS``, held as a file descriptor: they are switched off again when the
agent exits, and ``kernel.bpf_stats_enabled`` set by someone else is left alone), as
``run_time_ns`` in ``/proc/self/fdinfo/<program fd>``. What neither shows is the trap of
a uprobe (a few microseconds per probed call, in the probed process).

The rate controller: the rate is met by being cheap, not by sampling less, so it only
steps in when the agent is over its budget (default 1% of one core for the whole agent) for
long enough to be more than a burst: it compares the mean cost of the last periods at
the current rate (three to six, the costliest of them left out; the first three periods
after the start, which read the symbols of every program already running, are not
counted) with the budget. Over it, the rate goes down the ladder of
rates (the configured one, then the primes below it down to ``min_hz``: 19, 17, 13, 11, 7,
5, 3, 2) in proportion to the excess; under 80% of it, or when the next rate up would fit
in 95% of it (its cost estimated as if all of the cost grew with the rate), it tries the
next rate up, and a rate
that proved too dear is tried again only after a pause that doubles each time (1, 2, 4...
periods, at most an hour): a host whose cost is mostly per new process, which the rate
does not change, gets its rate back as soon as the churn is over.

The budget holds on average, not in every period: what the agent spends under it is saved
(at most a minute of the budget, 0.6 ms of CPU a second at 1%), and a cost up to 10% over
the budget is paid from the savings while they last. A rate left when they ran out is not
"too dear": it is tried again once they are half back. So a host where 19 Hz costs 1.03%
and 17 Hz 0.93% samples at 19 Hz most of the time and at 17 Hz the rest, at 1% on average,
instead of at 17 Hz for ever longer stretches. A cost more than 10% over the budget lowers
the rate as before. Where the costs seen at two rates or more (in the last 20 minutes, fit
as a fixed part and a part per Hz) say that even the lowest rate would be over the budget,
and the cost is at most 25% over it, the rate goes back to the configured one: the cost is
per new process and per period, and sampling less would only lose samples. The rate only changes
between periods, and each profile records the rate it was taken at and why it is lowered
(:attr:`CpuBudget.note`), so values stay comparable.
"""

from __future__ import annotations

import ctypes
import os
import platform
import resource
import statistics
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


def rate_ladder(max_hz: int, min_hz: int) -> list[int]:
    """``max_hz``, then the primes below it down to ``min_hz`` (2 at least): rates that no
    periodic work of a round period shares a divisor with."""
    primes = [n for n in range(max(2, min_hz), max_hz) if all(n % d for d in range(2, n))]
    return [max_hz, *sorted(primes, reverse=True)]


SETTLE_PERIODS = 3  # periods at a rate before its mean cost is trusted
WINDOW_PERIODS = 6  # the mean is of the last ones at the rate (90 s at 15 s)
WARMUP_PERIODS = 3  # the first after the start read every running program's symbols
RAISE_BELOW = 0.8  # of the budget: room to try the next rate up
RAISE_SCALED_BELOW = 0.95  # of the budget: the next rate up's cost, rate-scaled, fits
MAX_BACKOFF_PERIODS = 240  # an hour at 15 s
SPEND_OVER = 1.1  # of the budget: a cost the savings may pay for
SAVED_MAX_S = 60.0  # seconds of the budget that may be saved
REFILLED = 0.5  # of the most savings: a rate the savings paid for is tried again
SEEN_FOR_PERIODS = 80  # a rate's cost is trusted for 20 min at 15 s (the host changes)
RATE_NO_LEVER_UP_TO = 1.25  # of the budget: a cost no rate cures is borne up to this


class CpuBudget:
    """Measures each period's cost and picks the next period's sampling rate."""

    def __init__(self, budget: float = 0.01, max_hz: int = 19, min_hz: int = 2) -> None:
        self.budget = budget
        self.max_hz = max_hz
        self.ladder = rate_ladder(max_hz, min(min_hz, max_hz))
        self.min_hz = self.ladder[-1]
        self.rate_hz = max_hz
        self.stats_fd = None if stats_already_on() else enable_bpf_stats()
        self.bpf_measured = self.stats_fd is not None or stats_already_on()
        self._last_cpu = agent_cpu_seconds()
        self._last_bpf_ns = 0
        self.total_agent_cpu_s = 0.0
        self.total_bpf_cpu_s = 0.0
        self.lowered_s = 0.0  # wall time spent below the configured rate
        self.last: PeriodCost | None = None
        self._at_rate: list[PeriodCost] = []  # the periods since the rate last changed
        self._warmup = WARMUP_PERIODS
        self._backoff: dict[int, tuple[int, int]] = {}  # rate -> (periods to wait, next wait)
        self.note = ""  # why the rate is lowered ("" at the configured rate)
        self.saved_s = 0.0  # CPU seconds spent under the budget so far (at most a minute's)
        self._periods = 0
        self._seen: dict[int, tuple[float, int]] = {}  # rate -> (its window's cost, period)
        self.over_at_any_rate = False  # the cost does not follow the rate: no rate fits

    def measure(self, wall_s: float, program_fds: Iterable[int]) -> PeriodCost:
        cpu = agent_cpu_seconds()
        bpf_ns = programs_run_time_ns(program_fds)
        # a program reloaded (or replaced) restarts its counter: count from its new value
        delta_ns = bpf_ns - self._last_bpf_ns if bpf_ns >= self._last_bpf_ns else bpf_ns
        cost = PeriodCost(wall_s, max(cpu - self._last_cpu, 0.0), delta_ns / 1e9)
        self._last_cpu, self._last_bpf_ns = cpu, bpf_ns
        self.total_agent_cpu_s += cost.agent_cpu_s
        self.total_bpf_cpu_s += cost.bpf_cpu_s
        if self.rate_hz < self.max_hz:
            self.lowered_s += wall_s
        self.last = cost
        return cost

    def next_rate(self, cost: PeriodCost) -> int:
        """The sampling rate for the next period."""
        if self.budget <= 0 or cost.wall_s <= 0:
            return self.rate_hz
        if self._warmup > 0:  # a start's one-time cost says nothing of the next periods
            self._warmup -= 1
            return self.rate_hz
        self._periods += 1
        for rate, (wait, later) in list(self._backoff.items()):
            self._backoff[rate] = (max(wait - 1, 0), later)
        most_saved = self.budget * SAVED_MAX_S
        self.saved_s = min(self.saved_s + self.budget * cost.wall_s - cost.total_s, most_saved)
        self._at_rate = [*self._at_rate[-(WINDOW_PERIODS - 1) :], cost]
        if len(self._at_rate) < SETTLE_PERIODS:
            return self.rate_hz
        # the costliest period left out: a one-off (a large program's symbols read for the
        # first time) is not a reason to sample less for minutes
        kept = sorted(self._at_rate, key=lambda c: c.share)[:-1]
        share = sum(c.total_s for c in kept) / sum(c.wall_s for c in kept)
        self._seen[self.rate_hz] = (share, self._periods)
        if self._no_rate_fits(share):
            # sampling less would lose samples and save nothing: the configured rate
            self.over_at_any_rate = True
            if self.rate_hz != self.max_hz:
                self._change(self.max_hz, share)
            self.note = (
                f"over the CPU budget at any rate: the agent cost {share * 100:.2f}% of a "
                f"core, its budget is {self.budget * 100:g}%; its cost is per process and "
                "per period, not per sample, so the rate is not lowered"
            )
            return self.rate_hz
        if self.over_at_any_rate and self.rate_hz == self.max_hz:
            self.note = ""
        self.over_at_any_rate = False
        affordable = share <= SPEND_OVER * self.budget  # by the savings, while they last
        over = share > self.budget and not (affordable and self.saved_s > 0)
        i = self.ladder.index(self.rate_hz)
        if over and i < len(self.ladder) - 1:
            wanted = self.rate_hz * self.budget / share
            lower = [r for r in self.ladder[i + 1 :] if r <= wanted] or self.ladder[-1:]
            if not affordable:  # (one the savings paid for comes back when they do)
                self._penalize(self.rate_hz)
            self._change(lower[0], share)
        elif i > 0:
            up = self.ladder[i - 1]
            # under 80% of the budget; or the next rate up would fit in 95% of it were all of
            # the cost the rate's (some is per new process, which it does not change: an
            # estimate on the safe side, which lets 17 Hz at 0.85% try 19 Hz); or the
            # savings, half back, would pay for it
            scaled = share * up / self.rate_hz
            fits = share < RAISE_BELOW * self.budget or scaled < RAISE_SCALED_BELOW * self.budget
            paid = scaled <= SPEND_OVER * self.budget and self.saved_s >= REFILLED * most_saved
            if (fits or paid) and self._backoff.get(up, (0, 0))[0] == 0:
                self._change(up, share)
        return self.rate_hz

    def _no_rate_fits(self, share: float) -> bool:
        """Whether the costs seen at two rates or more (in the last 20 minutes) say that
        even the lowest rate would be over the budget, for a cost over it by a little: most
        of it is then per new process and per period, which the rate does not change (a
        churning host). A cost far over the budget is cut by the rate all the same."""
        if share <= self.budget or share > RATE_NO_LEVER_UP_TO * self.budget:
            return False
        fresh = [
            (rate, cost)
            for rate, (cost, period) in self._seen.items()
            if self._periods - period <= SEEN_FOR_PERIODS
        ]
        if len(fresh) < 2:
            return False
        rates, costs = zip(*fresh, strict=True)
        per_hz, fixed = statistics.linear_regression(rates, costs)  # least squares
        if per_hz < 0:  # (noise: a cost cannot fall as the rate rises)
            per_hz, fixed = 0.0, statistics.fmean(costs)
        return fixed + per_hz * self.min_hz > self.budget

    def _penalize(self, rate: int) -> None:
        """``rate`` was too dear: try it again only after a while (longer each time)."""
        _, later = self._backoff.get(rate, (0, 1))
        self._backoff[rate] = (later, min(2 * later, MAX_BACKOFF_PERIODS))

    def _change(self, rate: int, share: float) -> None:
        """Sample at ``rate`` from the next period; ``share``: the cost at the rate left
        (raised on the way back up: the note keeps the cost that lowered it)."""
        lowered = rate < self.rate_hz
        self.rate_hz = rate
        self._at_rate = []
        if rate >= self.max_hz:
            self.note = ""
        elif lowered or not self.note:
            self.note = (
                f"lowered from {self.max_hz} Hz by the CPU budget: the agent cost "
                f"{share * 100:.2f}% of a core, its budget is {self.budget * 100:g}%"
            )

    def close(self) -> None:
        if self.stats_fd is not None:
            os.close(self.stats_fd)
            self.stats_fd = None
