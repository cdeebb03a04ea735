"""Insight rules: each finds one cause of lost GPU time, says what fixing it can win, and how.

A rule is a small function ``rule(c: Context) -> Draft | None`` listed in ``RULES`` (in
:mod:`rules_host`, :mod:`rules_copies`, :mod:`rules_gpu`, which import what rules share from
:mod:`rule_context`, not this module); the :class:`Context` holds the
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

from aiflame.analysis import rules_copies, rules_gpu, rules_host
from aiflame.analysis.rule_context import PARTS, Context, Draft, Rule, us, worth
from aiflame.analysis.schema import Finding, Stack
from aiflame.analysis.stacks import TOP_STACKS
from aiflame.model.trace import TraceData

# Severity from the estimated cost as a share of the GPU timeline.
HIGH, MEDIUM = 0.10, 0.03


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


def rules() -> list[Rule]:
    return [*rules_host.RULES, *rules_copies.RULES, *rules_gpu.RULES]


def find(c: Context | TraceData) -> list[Finding]:
    """All findings of all rules, the costliest first."""
    ctx = c if isinstance(c, Context) else Context(c)
    if ctx.t.gpu_ts.size == 0:
        return []
    drafts = [d for rule in rules() if (d := rule(ctx)) is not None]
    return reconcile(ctx, drafts)


__all__ = ["Context", "Draft", "find", "rules"]
