"""What an insight rule reads and what it writes (:mod:`insights` runs the rules).

The :class:`Context` holds one trace and the analyses computed from it on first use, shared
by the rules; a rule returns a :class:`Draft`, a finding before :func:`insights.reconcile`
scales the costs of all findings to the timeline. The rules (:mod:`rules_host`,
:mod:`rules_copies`, :mod:`rules_gpu`) import this module, never :mod:`insights`, which
imports them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from aiflame.analysis import categories, causes, idle, launch, memcpy, sync
from aiflame.analysis.devices import DeviceSpec
from aiflame.analysis.efficiency import efficiency
from aiflame.analysis.schema import (
    Efficiency,
    Figure,
    FlameView,
    Item,
    Launch,
    MemoryTraffic,
    Stack,
    Sync,
    Workload,
)
from aiflame.analysis.stacks import TOP_STACKS
from aiflame.analysis.timeline import TimeBreakdown, time_breakdown
from aiflame.analysis.workload import detect
from aiflame.model.trace import TraceData

REPORT_FROM = 0.01  # costs below this share of the GPU timeline are not reported
# The parts of the GPU timeline a cost can come from (they add up to its total).
PARTS = ("idle", "exposed_communication", "exposed_memcpy", "computation")
# The fix that rules_host (freeing the workers' batches) and rules_copies (uploads from
# pageable memory) share: the DataLoader's pin-memory thread. Drafts with one fix_key are
# one finding.
PIN_MEMORY_FIX_KEY = "pin_memory"


class Context:
    """One trace and its analyses, computed on first use and shared by the rules."""

    def __init__(self, t: TraceData, spec: DeviceSpec | None = None) -> None:
        self.t = t
        self.spec = spec

    @cached_property
    def breakdown(self) -> TimeBreakdown:
        return time_breakdown(self.t.gpu_ts, self.t.gpu_dur, self.t.gpu_kind)

    @property
    def total_ns(self) -> int:
        return self.breakdown.total

    @cached_property
    def gaps(self) -> idle.Gaps:
        return idle.gap_table(self.t)

    @cached_property
    def explained(self) -> causes.Explained:
        return causes.explain(self.t, self.gaps)

    def idle_of(self, *keys: str) -> float:
        """Idle ns the causes ``keys`` explain."""
        e = self.explained
        return float(e.ns[e.of(*keys)].sum())

    def idle_stacks(self, *keys: str, where: np.ndarray | None = None) -> list[Stack]:
        """The costliest stacks of the idle the causes ``keys`` explain (``where``: of the
        parts so marked only)."""
        m = self.explained.of(*keys)
        return self.stacks_of(m if where is None else m & where)

    def stacks_of(self, parts: np.ndarray) -> list[Stack]:
        """The costliest stacks of these parts of :attr:`explained` (a mask), as the
        ``gpu-idle`` flame graph has them: idle no slice explains is its ``[GPU idle:
        unexplained]`` stack."""
        from aiflame.analysis.stacks import top_stacks
        from aiflame.sources.gpu_idle_samples import NO_SLICE, UNEXPLAINED

        e = self.explained
        found = top_stacks(self.t, e.slice[parts], e.ns[parts])
        loose = parts & (e.slice < 0) & (e.cause == causes.INDEX["untraced"])
        if np.any(loose):
            ns = float(e.ns[loose].sum())
            n = int(np.unique(e.gap[loose]).size)
            found.append(Stack(stack=[UNEXPLAINED, NO_SLICE], cost_us=ns / 1e3, count=n))
            found = sorted(found, key=lambda st: -st.cost_us)[:TOP_STACKS]
        return found

    @cached_property
    def in_launch_bound_phases(self) -> np.ndarray:
        """Per part of :attr:`explained`: did its gap start in a launch-bound phase?"""
        e = self.explained
        out = np.zeros(e.gap.size, dtype=bool)
        if self.launch is None or not self.launch.launch_bound.phases:
            return out
        phases = launch.launch_bound_phases(self.t, launch.per_launch(self.t), self.gaps, e)
        g0 = int(self.t.gpu_ts.min())
        start = self.gaps.start[e.gap]
        for p in phases:
            a, b = g0 + round(p.start_us * 1e3), g0 + round(p.end_us * 1e3)
            out |= (start >= a) & (start < b)
        return out

    @cached_property
    def launch(self) -> Launch | None:
        return launch.launch_overhead(self.t, self.gaps, self.explained)

    @cached_property
    def sync(self) -> Sync | None:
        return sync.sync_stalls(self.t, self.gaps, self.explained)

    @cached_property
    def memory(self) -> MemoryTraffic | None:
        return memcpy.memory_traffic(self.t)

    @cached_property
    def efficiency(self) -> Efficiency:
        b = self.breakdown
        return efficiency(self.t, self.spec, b.total, b.busy, 10_000, self.t.op_launch())

    @cached_property
    def trusted_efficiency(self) -> Efficiency:
        """:attr:`efficiency` without the graph replays whose capture match is not certain
        (several captured graphs fit them): what findings about rates may rest on."""
        t = self.t
        if not t.replays_ambiguous or t.gpu_origin is None:
            return self.efficiency
        b = self.breakdown
        launch = np.where(t.gpu_origin >= 0, -1, t.gpu_launch)
        return efficiency(t, self.spec, b.total, b.busy, 10_000, launch)

    @cached_property
    def category(self) -> np.ndarray:
        """The op category of each GPU activity (:mod:`categories`)."""
        return categories.classify(self.t, self.t.op_launch())

    @cached_property
    def workload(self) -> Workload:
        return detect(self.t)


@dataclass
class Draft:
    """A finding before the costs of all findings are reconciled with the timeline."""

    rule: str
    title: str
    parts: dict[str, float]  # ns of the timeline's parts (PARTS) a fix can win
    summary: str
    assumption: str
    fix: str
    figures: list[Figure]
    items: list[Item] = field(default_factory=list)
    top_stacks: list[Stack] = field(default_factory=list)
    flame: FlameView = field(default_factory=FlameView)
    # drafts whose fix is the same are one finding (default: the same fix text)
    fix_key: str | None = None
    merged: list[str] = field(default_factory=list)

    @property
    def cost_ns(self) -> float:
        return float(sum(self.parts.values()))


def us(label: str, ns: float) -> Figure:
    return Figure(label=label, value=ns / 1e3, unit="us")


def share(label: str, value: float | None) -> Figure:
    return Figure(label=label, value=value, unit="share")


def count(label: str, value: int) -> Figure:
    return Figure(label=label, value=int(value), unit="count")


def worth(c: Context, cost_ns: float) -> bool:
    return c.total_ns > 0 and cost_ns >= REPORT_FROM * c.total_ns


Rule = Callable[[Context], Draft | None]
