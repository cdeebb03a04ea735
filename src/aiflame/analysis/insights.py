"""Insight rules: each finds one cause of lost GPU time, says what fixing it can win, and how.

A rule is a small function ``rule(c: Context) -> Draft | None`` listed in ``RULES`` (in
:mod:`rules_host`, :mod:`rules_copies`, :mod:`rules_gpu`); the :class:`Context` holds the
trace and the analyses already computed from it, so rules only read numbers. Its docstring
is its documentation: pattern, evidence, cost estimate, fix.

One currency: a finding's cost is the GPU-timeline time a fix can win, bounded by what the
trace shows: idle time the cause explains (:mod:`causes` splits every idle gap among causes,
so these never overlap) plus GPU time of work the fix removes or shortens (exposed
communication, exposed copies, kernels a fusion removes). Each draft says which part of the
timeline its cost comes from (``parts``); where drafts together claim more of a part than
the timeline has, they are scaled down, so the findings never sum past the timeline.
Severity is the cost's share of the timeline; findings are ranked by cost.
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
    Finding,
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

# Severity from the estimated cost as a share of the GPU timeline.
HIGH, MEDIUM = 0.10, 0.03
REPORT_FROM = 0.01  # smaller costs are not reported
# The parts of the GPU timeline a cost can come from (they add up to its total).
PARTS = ("idle", "exposed_communication", "exposed_memcpy", "computation")


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


def severity(cost_ns: float, total_ns: float) -> str:
    part = cost_ns / total_ns if total_ns else 0.0
    return "high" if part >= HIGH else "medium" if part >= MEDIUM else "low"


def merge_same_fix(drafts: list[Draft]) -> list[Draft]:
    """Drafts with the same fix (``fix_key``, else the fix's text) as one: the costliest
    one's title, summary first and fix, with the others' costs, evidence, items and stacks
    added (a user applies one fix once, and wins what all of them claim)."""
    groups: dict[str, list[Draft]] = {}
    for d in drafts:
        groups.setdefault(d.fix_key or d.fix, []).append(d)
    out = []
    for group in groups.values():
        if len(group) == 1:
            out.append(group[0])
            continue
        group.sort(key=lambda d: -d.cost_ns)
        head, rest = group[0], group[1:]
        parts: dict[str, float] = {}
        for d in group:
            for k, v in d.parts.items():
                parts[k] = parts.get(k, 0.0) + v
        stacks: dict[tuple[str, ...], list[float]] = {}
        for d in group:
            for st in d.top_stacks:
                acc = stacks.setdefault(tuple(st.stack), [0.0, 0])
                acc[0] += st.cost_us
                acc[1] += st.count
        ranked = sorted(stacks.items(), key=lambda kv: -kv[1][0])[:TOP_STACKS]
        # the others' shares second, where a report shows only the first few figures
        also = [us(f"plus: {d.title}", d.cost_ns) for d in rest]
        figures = [*head.figures[:1], *also, *head.figures[1:]]
        out.append(
            Draft(
                rule=head.rule,
                title=head.title,
                parts=parts,
                summary=" ".join(d.summary for d in group),
                assumption=head.assumption,
                fix=head.fix,
                figures=figures,
                items=[i for d in group for i in d.items],
                top_stacks=[Stack(stack=list(k), cost_us=v[0], count=int(v[1])) for k, v in ranked],
                flame=head.flame,
                fix_key=head.fix_key,
                merged=[d.rule for d in rest],
            )
        )
    return out


def reconcile(c: Context, drafts: list[Draft]) -> list[Finding]:
    """Findings from the drafts, those with the same fix merged (:func:`merge_same_fix`):
    where they claim more of a part of the timeline than it has, their claims on it are
    scaled down; then ranked by cost."""
    drafts = merge_same_fix(drafts)
    b = c.breakdown
    have = {
        "idle": b.idle,
        "exposed_communication": b.exposed_communication,
        "exposed_memcpy": b.exposed_memcpy,
        "computation": b.computation,
    }
    for part in PARTS:
        claimed = sum(d.parts.get(part, 0.0) for d in drafts)
        if claimed > have[part] > 0:
            for d in drafts:
                if part in d.parts:
                    d.parts[part] *= have[part] / claimed
        elif have[part] <= 0:
            for d in drafts:
                d.parts.pop(part, None)
    total = c.total_ns
    out = [
        Finding(
            rule=d.rule,
            severity=severity(d.cost_ns, total),  # type: ignore[arg-type]
            title=d.title,
            cost_us=d.cost_ns / 1e3,
            share_of_gpu_time=d.cost_ns / total if total else 0.0,
            summary=d.summary,
            assumption=d.assumption,
            fix=d.fix,
            figures=d.figures,
            items=d.items,
            top_stacks=d.top_stacks,
            flame=d.flame,
            merged=d.merged,
        )
        for d in drafts
        if worth(c, d.cost_ns)
    ]
    return sorted(out, key=lambda f: -f.cost_us)


Rule = Callable[[Context], Draft | None]


def rules() -> list[Rule]:
    from aiflame.analysis import rules_copies, rules_gpu, rules_host

    return [*rules_host.RULES, *rules_copies.RULES, *rules_gpu.RULES]


def find(c: Context | TraceData) -> list[Finding]:
    """All findings of all rules, the costliest first."""
    ctx = c if isinstance(c, Context) else Context(c)
    if ctx.t.gpu_ts.size == 0:
        return []
    drafts = [d for rule in rules() if (d := rule(ctx)) is not None]
    return reconcile(ctx, drafts)


__all__ = ["Context", "Draft", "find", "rules"]
