"""The job across its ranks: where the GPU time of all ranks went, and who holds it back.

In a data- or model-parallel job every rank waits for the slowest at each collective, so the
job's step is set by its straggler: the rank whose GPUs compute the longest (others then show
the difference as exposed communication or idle time). The summary adds the ranks' time
breakdowns, finds the straggler and the spread of busy time, and counts each finding across
ranks with its total estimated cost.
"""

from __future__ import annotations

from statistics import median

from aiflame.analysis.schema import Job, JobFinding, MinMedMax, RankReport, Straggler

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


def job_summary(ranks: list[RankReport]) -> Job:
    with_gpu = [r for r in ranks if r.time_breakdown.total > 0]
    # Ranks of one job: each trace names its rank (distributedInfo), no rank twice. Traces
    # of separate runs are summed alike, but none waits for another: no straggler then.
    named = [r.rank for r in ranks]
    same_job = None not in named and len(set(named)) == len(named)
    job = Job(ranks=len(ranks), ranks_with_gpu_activity=len(with_gpu), same_job=same_job)
    if not with_gpu:
        job.unavailable = "no trace has GPU activity: no job-level GPU time"
        return job
    sums = {k: sum(float(getattr(r.time_breakdown, k)) for r in with_gpu) for k in BREAKDOWN_KEYS}
    job.time_breakdown_sum = sums
    job.fractions = {k: (sums[k] / sums["total"] if sums["total"] else 0.0) for k in sums}
    compute = [(r.time_breakdown.computation, r.name) for r in with_gpu]
    mid = median(c for c, _ in compute)
    slowest, who = max(compute)
    fastest = min(c for c, _ in compute)
    job.computation_us = MinMedMax(min=fastest, median=mid, max=slowest)
    job.computation_spread = (slowest - fastest) / slowest if slowest else 0.0
    job.stragglers = [
        Straggler(rank=name, computation_us=c, over_median=(c - mid) / mid if mid else 0.0)
        for c, name in sorted(compute, reverse=True)
        if same_job and mid and c > mid * (1 + STRAGGLER_MARGIN)
    ]
    job.slowest_rank = who
    job.findings = _findings_across(ranks)
    return job


def _findings_across(ranks: list[RankReport]) -> list[JobFinding]:
    by_rule: dict[str, JobFinding] = {}
    for r in ranks:
        for f in r.findings:
            row = by_rule.setdefault(
                f.rule, JobFinding(rule=f.rule, title=f.title, ranks=[], cost_us=0.0)
            )
            row.ranks.append(r.name)
            row.cost_us += f.cost_us
    return sorted(by_rule.values(), key=lambda row: -row.cost_us)
