"""The job across its ranks: where the GPU time of all ranks went, and who holds it back.

In a data- or model-parallel job every rank waits for the slowest at each collective, so the
job's step is set by its straggler: the rank whose GPUs compute the longest (others then show
the difference as exposed communication or idle time). The summary adds the ranks' time
breakdowns, finds the straggler and the spread of busy time, and counts each finding across
ranks with its total estimated cost.
"""

from __future__ import annotations

from statistics import median
from typing import Any

BREAKDOWN_KEYS = (
    "total",
    "busy",
    "idle",
    "computation",
    "communication",
    "memcpy",
    "exposed_communication",
    "exposed_memcpy",
)
# A rank computing this much longer than the median one holds the others back.
STRAGGLER_MARGIN = 0.10


def job_summary(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    with_gpu = [r for r in ranks if r.get("time_breakdown")]
    # Ranks of one job: each trace names its rank (distributedInfo), no rank twice. Traces
    # of separate runs are summed alike, but none waits for another: no straggler then.
    named = [r.get("rank") for r in ranks]
    same_job = None not in named and len(set(named)) == len(named)
    out: dict[str, Any] = {
        "ranks": len(ranks),
        "ranks_with_gpu_activity": len(with_gpu),
        "same_job": same_job,
    }
    if not with_gpu:
        out["unavailable"] = "no trace has GPU activity: no job-level GPU time"
        return out
    sums = {
        k: sum(float(r["time_breakdown"].get(k, 0.0)) for r in with_gpu) for k in BREAKDOWN_KEYS
    }
    out["time_breakdown_sum"] = sums
    out["fractions"] = {k: (sums[k] / sums["total"] if sums["total"] else 0.0) for k in sums}
    compute = [
        (float(r["time_breakdown"]["computation"]), _name(r, i)) for i, r in enumerate(with_gpu)
    ]
    mid = median(c for c, _ in compute)
    slowest, who = max(compute)
    fastest = min(c for c, _ in compute)
    out["computation_us"] = {"min": fastest, "median": mid, "max": slowest}
    out["computation_spread"] = (slowest - fastest) / slowest if slowest else 0.0
    out["stragglers"] = [
        {"rank": name, "computation_us": c, "over_median": (c - mid) / mid if mid else 0.0}
        for c, name in sorted(compute, reverse=True)
        if same_job and mid and c > mid * (1 + STRAGGLER_MARGIN)
    ]
    out["slowest_rank"] = who
    out["findings"] = _findings_across(ranks)
    return out


def _name(r: dict[str, Any], i: int) -> str:
    rank = r.get("rank")
    return str(rank) if rank is not None else f"trace {i}"


def _findings_across(ranks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_rule: dict[str, dict[str, Any]] = {}
    for i, r in enumerate(ranks):
        for f in r.get("findings") or []:
            row = by_rule.setdefault(
                f["rule"],
                {"rule": f["rule"], "title": f.get("title", ""), "ranks": [], "cost_us": 0.0},
            )
            row["ranks"].append(_name(r, i))
            row["cost_us"] += float(f.get("cost_us") or 0.0)
    return sorted(by_rule.values(), key=lambda row: -row["cost_us"])
