"""Fleet-wide findings: which anti-pattern costs the most GPU hours, in which workloads.

A finding of an analyzed trace says what share of that trace's GPU timeline the pattern
costs. A workload's cost is that share (the mean over its traces in the range) times the
workload's allocated GPU hours in the range (from telemetry, matched on the label that
names workloads, ``job_id`` by default): the extrapolation Meta's fleet tooling makes from
sampled traces. A workload without telemetry is charged only the time measured in its
traces, and says so.
"""

from __future__ import annotations

import json
from typing import Any

from aiflame.analysis import words
from aiflame.server.errors import BadRequest
from aiflame.server.labels import LABEL_NAME, matchers_sql, parse_selector
from aiflame.server.query import attribution
from aiflame.server.store.connection import Store

STACK_FRAMES = 4  # innermost frames shown per stack, as in the terminal report

_SEVERITY = {"high": 3, "medium": 2, "low": 1}


def fleet_findings(
    store: Store, tenant: str, start_ms: int, end_ms: int, key: str, selector: str = ""
) -> dict[str, Any]:
    if not LABEL_NAME.match(key):
        raise BadRequest(f"invalid label {key[:60]!r}")
    params: dict[str, Any] = {"tenant": tenant, "t0": start_ms, "t1": end_ms, "k": key}
    cond = matchers_sql(parse_selector(selector), "labels", params)
    rows = store.rows(
        "SELECT rule, any(title), any(fix), labels[{k:String}] AS w, avg(share), "
        "uniqExact(trace_id), sum(cost_us), argMax(evidence, cost_us), argMax(trace_id, cost_us), "
        "groupUniqArray(severity) "
        f"FROM {store.db}.findings FINAL WHERE tenant = {{tenant:String}} "
        "AND received >= fromUnixTimestamp64Milli({t0:Int64}, 'UTC') "
        f"AND received < fromUnixTimestamp64Milli({{t1:Int64}}, 'UTC') AND {cond} "
        "GROUP BY rule, w",
        params,
    )
    hours = _workload_hours(store, tenant, start_ms, end_ms, key, selector)
    rules: dict[str, dict[str, Any]] = {}
    for rule, title, fix, w, share, traces, cost_us, evidence, trace_id, severities in rows:
        w = w or attribution.NONE
        allocated = hours.get(w)
        if allocated:
            cost_h, basis = float(share) * allocated, "share x the workload's allocated GPU hours"
        else:
            cost_h, basis = float(cost_us) / 3.6e9, "time measured in the traces (no telemetry)"
        try:
            ev = json.loads(evidence) if evidence else {}
        except ValueError:
            ev = {}
        r = rules.setdefault(
            rule,
            {"rule": rule, "title": title, "fix": fix, "gpu_hours": 0.0, "severity": "low",
             "workloads": []},
        )  # fmt: skip
        r["gpu_hours"] += cost_h
        worst = max(severities, key=lambda s: _SEVERITY.get(s, 0)) if severities else "low"
        if _SEVERITY.get(worst, 0) > _SEVERITY.get(r["severity"], 0):
            r["severity"] = worst
        r["workloads"].append(
            {
                "key": w,
                "gpu_hours": cost_h,
                "share": float(share),
                "allocated_gpu_hours": allocated,
                "basis": basis,
                "traces": int(traces),
                "cost_us_in_traces": float(cost_us),
                "trace_id": trace_id,
                "top_stacks": [_named(s) for s in ev.get("top_stacks") or []],
                "evidence": {k: v for k, v in ev.items() if k not in ("top_stacks", "flame")},
            }
        )
    out = sorted(rules.values(), key=lambda r: -r["gpu_hours"])
    for r in out:
        r["workloads"].sort(key=lambda w: -w["gpu_hours"])
    return {"from": start_ms, "to": end_ms, "workload_label": key, "rules": out}


def _workload_hours(
    store: Store, tenant: str, start_ms: int, end_ms: int, key: str, selector: str
) -> dict[str, float]:
    """Allocated GPU hours per workload in the range (one bucket of whole hours)."""
    t0 = start_ms // 3_600_000 * 3_600_000
    hours = -(-(end_ms - t0) // 3_600_000)
    q = attribution.Query(tenant, t0, end_ms, hours * 3600, key, selector, top=0)
    out: dict[str, float] = {}
    for _, k, s in attribution.buckets(store, q):
        out[k] = out.get(k, 0.0) + s["allocated"] / 3600
    return out


def _named(stack: dict[str, Any]) -> dict[str, Any]:
    """A finding's stack with the short text the terminal report gives it (its innermost
    frames as a person names them: ``embedding (functional.py:2437) > aten::embedding``)."""
    frames = stack.get("stack")
    if isinstance(frames, list) and all(isinstance(f, str) for f in frames):
        return {**stack, "text": words.frames(frames, STACK_FRAMES)}
    return stack
