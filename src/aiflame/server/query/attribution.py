"""GPU-hour attribution: allocated, busy and useful GPU hours by any label over time, with
shares, top-N and "other", the six topline efficiency metrics of each group, and the
capacity around them: the GPU hours of the hosts, those nobody held (unallocated) and
those held but not busy (idle), per group, per host and over time (:mod:`.capacity`).

The numbers come from the agents' telemetry (docs/fleet-protocol.md), read from the roll-up
that fits the step (hourly, per minute, or the raw periods), so 7 days of a large fleet are
thousands of rows, not hundreds of millions. Each metric says how it was obtained:

- FLOP/s: estimated from the tensor/FP pipes' activity x the device's peaks (GPM), per
  allocated GPU; where analyzed traces of the group exist, the traces' measured FLOP/s too.
- compute-unit utilization: SM active (GPM) over the allocated time.
- device power: the GPUs' power over their allocated time (mean watts per GPU).
- device utilization: busy (a kernel running, NVML) over the allocated time.
- device-hours per input: allocated GPU hours per TB of input the workload reported.
- % of roofline: from analyzed traces only (time-weighted over their modelled operators).
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from typing import Any

from aiflame.server.errors import BadRequest
from aiflame.server.labels import LABEL_NAME, matchers_sql, parse_selector
from aiflame.server.query.capacity import capacity, host_rows
from aiflame.server.store.connection import Store
from aiflame.server.store.schema import WORKLOAD_SUMS

_RAW = {
    "allocated": "allocated_gpu_seconds",
    "busy": "ifNull(busy_gpu_seconds, 0)",
    "busy_basis": "if(busy_gpu_seconds IS NULL, 0, allocated_gpu_seconds)",
    "useful": "ifNull(useful_gpu_seconds, 0)",
    "useful_basis": "if(useful_gpu_seconds IS NULL, 0, allocated_gpu_seconds)",
    "flop": "ifNull(est_flop, 0)",
    "flop_basis": "if(est_flop IS NULL, 0, allocated_gpu_seconds)",
    "energy": "ifNull(energy_joules, 0)",
    "energy_basis": "if(energy_joules IS NULL, 0, allocated_gpu_seconds)",
    "input": "toFloat64(ifNull(input_bytes, 0))",
    "input_basis": "if(input_bytes IS NULL, 0, allocated_gpu_seconds)",
}
MAX_BUCKETS = 20_000
OTHER = "other"
NONE = "(none)"
HOST = "host"
# what the groups are ranked by (top N, and the order of the table)
SORTS = {
    "allocated": lambda t: t["allocated"],
    "busy": lambda t: t["busy"],
    "idle": lambda t: t["busy_basis"] - t["busy"],
}


@dataclass
class Query:
    tenant: str
    start_ms: int
    end_ms: int
    step_s: int
    group_by: str
    selector: str = ""
    top: int = 10
    sort: str = "allocated"

    def check(self) -> None:
        if self.end_ms <= self.start_ms:
            raise BadRequest("the time range is empty")
        if self.step_s <= 0:
            raise BadRequest("step must be positive")
        if (self.end_ms - self.start_ms) / 1000 / self.step_s > MAX_BUCKETS:
            raise BadRequest(f"step too small: more than {MAX_BUCKETS:,} buckets")
        if not LABEL_NAME.match(self.group_by):
            raise BadRequest(f"invalid group_by label {self.group_by[:60]!r}")
        if self.sort not in SORTS:
            raise BadRequest(f"sort must be one of {', '.join(SORTS)}")
        parse_selector(self.selector)

    def source(self) -> tuple[str, str, str]:
        """(table, time column, resolution) for the step."""
        if self.step_s >= 3600 and self.step_s % 3600 == 0:
            return "workload_1h", "bucket", "1h"
        if self.step_s >= 60 and self.step_s % 60 == 0:
            return "workload_1m", "bucket", "1m"
        return "workload_telemetry", "start", "raw"


def buckets(store: Store, q: Query) -> list[tuple[int, str, dict[str, float]]]:
    """(bucket start ms, group value, sums) rows."""
    q.check()
    table, tcol, res = q.source()
    params: dict[str, Any] = {
        "tenant": q.tenant,
        "t0": q.start_ms,
        "t1": q.end_ms,
        "step": q.step_s * 1000,
        "g": q.group_by,
    }
    cond = matchers_sql(parse_selector(q.selector), "labels", params)
    sums = ", ".join(f"sum({c if res != 'raw' else _RAW[c]}) AS {c}" for c in WORKLOAD_SUMS)
    sql = (
        f"SELECT intDiv(toUnixTimestamp64Milli(toDateTime64({tcol}, 3, 'UTC')) - {{t0:Int64}}, "
        f"{{step:Int64}}) AS b, labels[{{g:String}}] AS key, {sums} "
        f"FROM {store.db}.{table} WHERE tenant = {{tenant:String}} "
        f"AND {tcol} >= fromUnixTimestamp64Milli({{t0:Int64}}, 'UTC') "
        f"AND {tcol} < fromUnixTimestamp64Milli({{t1:Int64}}, 'UTC') AND {cond} "
        "GROUP BY b, key ORDER BY b"
    )
    out = []
    for row in store.rows(sql, params):
        b, key, *vals = row
        out.append(
            (
                q.start_ms + int(b) * q.step_s * 1000,
                key or NONE,
                dict(zip(WORKLOAD_SUMS, vals, strict=True)),
            )
        )
    return out


def trace_metrics(store: Store, q: Query) -> dict[str, dict[str, Any]]:
    """Per group: FLOP/s, MFU and % of roofline measured by the analyzed traces."""
    params: dict[str, Any] = {"tenant": q.tenant, "t0": q.start_ms, "t1": q.end_ms, "g": q.group_by}
    cond = matchers_sql(parse_selector(q.selector), "labels", params)
    rows = store.rows(
        f"SELECT labels[{{g:String}}] AS key, count() AS traces, sum(gpu_time_us), "
        "sumIf(achieved_tflops * gpu_time_us, achieved_tflops IS NOT NULL) / "
        "nullIf(sumIf(gpu_time_us, achieved_tflops IS NOT NULL), 0), "
        "sumIf(mfu * gpu_time_us, mfu IS NOT NULL) / "
        "nullIf(sumIf(gpu_time_us, mfu IS NOT NULL), 0), "
        "sumIf(pct_of_roofline * gpu_time_us, pct_of_roofline IS NOT NULL) / "
        "nullIf(sumIf(gpu_time_us, pct_of_roofline IS NOT NULL), 0) "
        f"FROM {store.db}.traces FINAL WHERE tenant = {{tenant:String}} AND status = 'done' "
        "AND received >= fromUnixTimestamp64Milli({t0:Int64}, 'UTC') "
        f"AND received < fromUnixTimestamp64Milli({{t1:Int64}}, 'UTC') AND {cond} GROUP BY key",
        params,
    )
    return {
        (key or NONE): {
            "traces": int(n),
            "trace_gpu_hours": float(gpu_us or 0) / 3.6e9,
            "tflops": tflops,
            "mfu": mfu,
            "pct_of_roofline": roof,
        }
        for key, n, gpu_us, tflops, mfu, roof in rows
    }


def _ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


def metrics(s: dict[str, float], traced: dict[str, Any] | None) -> dict[str, Any]:
    """The six topline metrics of one group, each with how it was obtained."""
    flops_est = _ratio(s["flop"], s["flop_basis"])
    out: dict[str, Any] = {
        "flops": {
            "value": flops_est,
            "basis": "estimated: pipe activity x device peak (GPM), per allocated GPU",
            "coverage": _ratio(s["flop_basis"], s["allocated"]),
        },
        "sm_active": {
            "value": _ratio(s["useful"], s["useful_basis"]),
            "basis": "SM active (GPM) over allocated time",
            "coverage": _ratio(s["useful_basis"], s["allocated"]),
        },
        "power_watts": {
            "value": _ratio(s["energy"], s["energy_basis"]),
            "basis": "NVML power over allocated time, mean per GPU",
            "coverage": _ratio(s["energy_basis"], s["allocated"]),
        },
        "device_utilization": {
            "value": _ratio(s["busy"], s["busy_basis"]),
            "basis": "NVML utilization (a kernel running) over allocated time",
            "coverage": _ratio(s["busy_basis"], s["allocated"]),
        },
        "gpu_hours_per_tb_input": {
            "value": _ratio(s["input_basis"] / 3600, s["input"] / 1e12) if s["input"] else None,
            "basis": "allocated GPU hours per TB of input the workload reported",
            "coverage": _ratio(s["input_basis"], s["allocated"]),
        },
        "pct_of_roofline": {
            "value": None,
            "basis": "from analyzed traces (time-weighted over modelled operators)",
            "coverage": None,
        },
    }
    if traced:
        cover = _ratio(traced["trace_gpu_hours"] * 3600, s["allocated"])
        if traced.get("tflops") is not None:
            out["flops"]["measured"] = traced["tflops"] * 1e12
            out["flops"]["measured_basis"] = f"{traced['traces']} analyzed trace(s)"
        out["pct_of_roofline"].update(value=traced.get("pct_of_roofline"), coverage=cover)
        out["mfu"] = {"value": traced.get("mfu"), "basis": "analyzed traces", "coverage": cover}
    return out


def attribution(store: Store, q: Query) -> dict[str, Any]:
    rows = buckets(store, q)
    totals: dict[str, dict[str, float]] = {}
    for _, key, s in rows:
        t = totals.setdefault(key, dict.fromkeys(WORKLOAD_SUMS, 0.0))
        for c in WORKLOAD_SUMS:
            t[c] += s[c]
    cap = capacity(store, q, _RAW)
    if q.group_by == HOST:  # a host nobody used is a group too: all of it unallocated
        for host in cap.hosts:
            totals.setdefault(host, dict.fromkeys(WORKLOAD_SUMS, 0.0))
    by = SORTS[q.sort]
    ranked = sorted(totals, key=lambda k: (-by(totals[k]), -totals[k]["allocated"], k))
    top = ranked[: max(q.top, 1)] if q.top else ranked
    shown = set(top)
    fleet = dict.fromkeys(WORKLOAD_SUMS, 0.0)
    for t in totals.values():
        for c in WORKLOAD_SUMS:
            fleet[c] += t[c]
    groups_out: dict[str, dict[str, float]] = {k: totals[k] for k in top}
    rest = [k for k in ranked if k not in shown]
    if rest:
        groups_out[OTHER] = {c: sum(totals[k][c] for k in rest) for c in WORKLOAD_SUMS}
    traced = trace_metrics(store, q)
    timestamps = sorted({t for t, _, _ in rows} | cap.capacity.keys())
    index = {t: i for i, t in enumerate(timestamps)}
    series = {
        k: {c: [0.0] * len(timestamps) for c in ("allocated", "busy", "useful", "flop")}
        for k in groups_out
    }
    for when, key, sums in rows:
        k = key if key in shown else OTHER
        for c in ("allocated", "busy", "useful", "flop"):
            series[k][c][index[when]] += sums[c] / 3600.0 if c != "flop" else sums[c]
    resolution = q.source()[2]
    fleet_out = {**_group("fleet", fleet, fleet, None), **cap.fleet()}
    groups = [
        _group(k, v, fleet, traced.get(k) if k != OTHER else None) for k, v in groups_out.items()
    ]
    if q.group_by == HOST:  # each host's capacity and unallocated hours beside its use
        for g in groups:
            members = rest if g["key"] == OTHER else [g["key"]]
            held = [cap.hosts[h] for h in members if h in cap.hosts]
            g["capacity_gpu_hours"] = sum(h.capacity_s for h in held) / 3600
            g["unallocated_gpu_hours"] = sum(h.unallocated_s for h in held) / 3600
    return {
        "from": q.start_ms,
        "to": q.end_ms,
        "step_s": q.step_s,
        "group_by": q.group_by,
        "sort": q.sort,
        "resolution": resolution,
        "fleet": fleet_out,
        "groups": groups,
        "hosts": host_rows(cap),  # the 500 most unallocated
        "hosts_total": len(cap.hosts),
        "timestamps": timestamps,
        # per bucket: the hosts' GPU hours, and those nobody held
        "capacity_series": {
            "capacity": [cap.capacity.get(t, 0.0) / 3600 for t in timestamps],
            "unallocated": [cap.unallocated.get(t, 0.0) / 3600 for t in timestamps],
        },
        "series": series,
        "groups_total": len(ranked),
    }


def _group(key: str, s: dict[str, float], fleet: dict[str, float], traced: dict | None) -> dict:
    return {
        "key": key,
        "allocated_gpu_hours": s["allocated"] / 3600,
        "busy_gpu_hours": s["busy"] / 3600,
        "useful_gpu_hours": s["useful"] / 3600,
        "busy_measured_gpu_hours": s["busy_basis"] / 3600,
        "useful_measured_gpu_hours": s["useful_basis"] / 3600,
        # allocated but not busy, over the time busy was measured (null: never measured)
        "idle_gpu_hours": (s["busy_basis"] - s["busy"]) / 3600 if s["busy_basis"] else None,
        "share": _ratio(s["allocated"], fleet["allocated"]),
        "metrics": metrics(s, traced),
    }


CSV_COLUMNS = (
    "time",
    "group",
    "allocated_gpu_hours",
    "busy_gpu_hours",
    "useful_gpu_hours",
    "busy_measured_gpu_hours",
    "useful_measured_gpu_hours",
    "est_flop",
    "energy_kwh",
    "input_bytes",
)


def _cell(text: str) -> str:
    """A label value safe in a spreadsheet (no formula from a crafted label)."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def attribution_csv(store: Store, q: Query) -> str:
    """Every (bucket, group) row, for spreadsheets and billing."""
    import datetime as dt

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([*CSV_COLUMNS[:1], q.group_by, *CSV_COLUMNS[2:]])
    for t, key, s in buckets(store, q):
        w.writerow(
            [
                dt.datetime.fromtimestamp(t / 1000, dt.UTC).isoformat().replace("+00:00", "Z"),
                _cell(key),
                f"{s['allocated'] / 3600:.6f}",
                f"{s['busy'] / 3600:.6f}",
                f"{s['useful'] / 3600:.6f}",
                f"{s['busy_basis'] / 3600:.6f}",
                f"{s['useful_basis'] / 3600:.6f}",
                f"{s['flop']:.6g}",
                f"{s['energy'] / 3.6e6:.6f}",
                f"{s['input']:.0f}",
            ]
        )
    return buf.getvalue()
