"""Fleet-wide findings: which anti-pattern costs the most GPU hours, in which workloads.

A finding of an analyzed trace says what share of that trace's GPU timeline the pattern
costs. Each trace is of one workload, named by the most specific identity its labels give
(:mod:`.identity`: the job, else the pod, else the service, else the process's workload
on its host). A finding is charged only to the workloads whose traces show it: the
workload's mean share over its analyzed traces in the range (a trace without the finding
counts as zero, a trace of several ranks is the mean of its ranks) times the GPU hours
that workload was allocated in the range (telemetry of exactly that job, pod, service or
process workload): the extrapolation Meta's fleet tooling makes from sampled traces. A
workload without telemetry is charged only the time measured in its traces, and says so.

``workload_label`` groups the charged workloads by another label (team, model...): the
charge of each workload, summed per value of that label in its traces.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from aiflame.analysis import words
from aiflame.server.errors import BadRequest
from aiflame.server.labels import LABEL_NAME, format_selector, matchers_sql, parse_selector
from aiflame.server.query import attribution
from aiflame.server.query.identity import BASIS_TEXT, Identity, identity
from aiflame.server.store.connection import Store

STACK_FRAMES = 4  # innermost frames shown per stack, as in the terminal report
WORKLOAD = "workload"  # group by each workload's own identity (the default)
HOUR_MS, MINUTE_MS = 3_600_000, 60_000

_SEVERITY = {"high": 3, "medium": 2, "low": 1}


@dataclass
class _Charge:
    """One rule in one workload."""

    share_sum: float = 0.0  # per trace: the mean share over its ranks
    cost_us: float = 0.0
    traces: int = 0
    worst: tuple[float, str, str] = (-1.0, "", "")  # (cost, trace id, evidence)
    severities: set[str] = field(default_factory=set)


def fleet_findings(
    store: Store, tenant: str, start_ms: int, end_ms: int, key: str = WORKLOAD, selector: str = ""
) -> dict[str, Any]:
    key = key or WORKLOAD
    if key != WORKLOAD and not LABEL_NAME.match(key):
        raise BadRequest(f"invalid label {key[:60]!r}")
    params: dict[str, Any] = {"tenant": tenant, "t0": start_ms, "t1": end_ms}
    cond = matchers_sql(parse_selector(selector), "labels", params)
    in_range = (
        "tenant = {tenant:String} AND received >= fromUnixTimestamp64Milli({t0:Int64}, 'UTC') "
        f"AND received < fromUnixTimestamp64Milli({{t1:Int64}}, 'UTC') AND {cond}"
    )
    # the analyzed traces of the range: each workload's count, and each trace's ranks
    traces = store.rows(
        f"SELECT trace_id, labels, ranks FROM {store.db}.traces FINAL WHERE {in_range} "
        "AND status = 'done' AND ranks > 0",
        params,
    )
    of_trace: dict[str, tuple[Identity, dict[str, str], int]] = {}
    traced: dict[Identity, int] = {}
    for trace_id, labels, ranks in traces:
        lb = dict(labels)
        who = identity(lb)
        of_trace[trace_id] = (who, lb, max(1, int(ranks)))
        traced[who] = traced.get(who, 0) + 1
    rows = store.rows(
        "SELECT trace_id, rule, any(title), any(fix), sum(share), sum(cost_us), "
        "argMax(evidence, cost_us), groupUniqArray(severity) "
        f"FROM {store.db}.findings FINAL WHERE {in_range} GROUP BY trace_id, rule",
        params,
    )
    rules: dict[str, dict[str, Any]] = {}
    charges: dict[tuple[str, Identity], _Charge] = {}
    for trace_id, rule, title, fix, share, cost_us, evidence, severities in rows:
        if trace_id not in of_trace:
            continue  # a finding of a trace not (or no longer) analyzed in the range
        who, _labels, ranks = of_trace[trace_id]
        rules.setdefault(rule, {"rule": rule, "title": title, "fix": fix})
        c = charges.setdefault((rule, who), _Charge())
        c.share_sum += float(share) / ranks
        c.cost_us += float(cost_us)
        c.traces += 1
        c.severities.update(severities)
        if float(cost_us) > c.worst[0]:
            c.worst = (float(cost_us), trace_id, evidence)
    allocated = workload_hours(store, tenant, start_ms, end_ms, {who for _, who in charges})
    label_of = {who: lb for who, lb, _ in of_trace.values()}
    out: dict[str, dict[str, Any]] = {}
    for (rule, who), c in charges.items():
        entry = _charged(who, c, traced[who], allocated.get(who))
        r = out.setdefault(
            rule,
            {**rules[rule], "gpu_hours": 0.0, "severity": "low", "workloads": {}},
        )
        r["gpu_hours"] += entry["gpu_hours"]
        worst = max(c.severities, key=lambda s: _SEVERITY.get(s, 0)) if c.severities else "low"
        if _SEVERITY.get(worst, 0) > _SEVERITY.get(r["severity"], 0):
            r["severity"] = worst
        group = who.key if key == WORKLOAD else (label_of[who].get(key) or attribution.NONE)
        _add(r["workloads"], group, entry, None if key == WORKLOAD else key)
    ranked = sorted(out.values(), key=lambda r: (-r["gpu_hours"], r["rule"]))
    for r in ranked:
        r["workloads"] = sorted(r["workloads"].values(), key=lambda w: -w["gpu_hours"])
    return {"from": start_ms, "to": end_ms, "workload_label": key, "rules": ranked}


def _charged(who: Identity, c: _Charge, traces: int, allocated: float | None) -> dict[str, Any]:
    share = c.share_sum / max(traces, 1)
    if allocated:
        cost_h = share * allocated
        basis = f"share x {BASIS_TEXT[who.basis]} allocated GPU hours"
    else:
        cost_h = c.cost_us / 3.6e9
        basis = "time measured in the traces (no telemetry)"
    try:
        ev = json.loads(c.worst[2]) if c.worst[2] else {}
    except ValueError:
        ev = {}
    link = who.link
    return {
        "key": who.key,
        "identity": who.basis,
        "selector": format_selector(dict(who.match)),
        "label": link[0] if link else None,
        "value": link[1] if link else None,
        "gpu_hours": cost_h,
        "share": share,
        "allocated_gpu_hours": allocated,
        "basis": basis,
        "traces": c.traces,
        "traces_analyzed": traces,
        "cost_us_in_traces": c.cost_us,
        "trace_id": c.worst[1],
        "top_stacks": [_named(s) for s in ev.get("top_stacks") or []],
        "evidence": {k: v for k, v in ev.items() if k not in ("top_stacks", "flame")},
    }


def _add(
    groups: dict[str, dict[str, Any]], group: str, entry: dict[str, Any], label: str | None
) -> None:
    """The entry of a workload under its group: itself, or (grouped by ``label``) added to
    the others with that label's value."""
    if label is None:
        groups[group] = entry
        return
    g = groups.get(group)
    if g is None:
        named = group != attribution.NONE  # the Workload page of that label's value
        groups[group] = {**entry, "key": group, "workloads": 1, "label": label if named else None,
                         "value": group if named else None}  # fmt: skip
        return
    # several workloads with this label value: their charges add up
    g["workloads"] += 1
    for k in ("gpu_hours", "traces", "traces_analyzed", "cost_us_in_traces"):
        g[k] += entry[k]
    if entry["allocated_gpu_hours"] is not None:
        g["allocated_gpu_hours"] = (g["allocated_gpu_hours"] or 0.0) + entry["allocated_gpu_hours"]
    g["share"] = g["gpu_hours"] / g["allocated_gpu_hours"] if g["allocated_gpu_hours"] else None
    g["basis"] = "the sum over its workloads of share x each one's allocated GPU hours"
    g["identity"], g["selector"] = "label", format_selector({})


def workload_hours(
    store: Store, tenant: str, start_ms: int, end_ms: int, who: set[Identity]
) -> dict[Identity, float]:
    """Allocated GPU hours of each identity's telemetry workloads in the range: whole hours
    from the hourly roll-up, the minutes at either end from the minute one."""
    if not who:
        return {}
    params: dict[str, Any] = {"tenant": tenant}
    for name in ("job_id", "pod", "service_name", "host"):
        params[name] = sorted({v for w in who for k, v in w.match if k == name})
    narrow = " OR ".join(
        f"has({{{name}:Array(String)}}, labels[{name!r}])" for name in params if name != "tenant"
    )
    if any(not any(k in params for k, _ in w.match) for w in who):
        narrow = "1"  # an identity none of those labels name: every workload is read
    t0 = start_ms // MINUTE_MS * MINUTE_MS
    h0, h1 = -(-t0 // HOUR_MS) * HOUR_MS, end_ms // HOUR_MS * HOUR_MS
    pieces = [("workload_1h", h0, h1)] if h0 < h1 else []
    edges = [(t0, h0), (h1, end_ms)] if h0 < h1 else [(t0, end_ms)]
    pieces += [("workload_1m", a, b) for a, b in edges if a < b]
    parts = []
    for i, (table, a, b) in enumerate(pieces):
        params[f"a{i}"], params[f"b{i}"] = a, b
        parts.append(
            f"SELECT workload_id, labels, allocated FROM {store.db}.{table} "
            f"WHERE tenant = {{tenant:String}} AND ({narrow}) "
            f"AND bucket >= fromUnixTimestamp64Milli({{a{i}:Int64}}, 'UTC') "
            f"AND bucket < fromUnixTimestamp64Milli({{b{i}:Int64}}, 'UTC')"
        )
    if not parts:
        return {}
    rows = store.rows(
        "SELECT workload_id, any(labels), sum(allocated) FROM ("
        + " UNION ALL ".join(parts)
        + ") GROUP BY workload_id",
        params,
    )
    out: dict[Identity, float] = {}
    for _, labels, seconds in rows:
        lb = dict(labels)
        for w in who:
            if w.matches(lb):
                out[w] = out.get(w, 0.0) + float(seconds) / 3600
    return out


def _named(stack: dict[str, Any]) -> dict[str, Any]:
    """A finding's stack with the short text the terminal report gives it (its innermost
    frames as a person names them: ``embedding (functional.py:2437) > aten::embedding``)."""
    frames = stack.get("stack")
    if isinstance(frames, list) and all(isinstance(f, str) for f in frames):
        return {**stack, "text": words.frames(frames, STACK_FRAMES)}
    return stack
