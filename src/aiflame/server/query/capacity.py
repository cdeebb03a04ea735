"""GPU capacity and idle capacity: the GPU hours the hosts had, and how much of it nobody held.

Every telemetry document lists all of its host's GPUs, held or not; their seconds per host
are rolled up per minute and per hour (``gpu_capacity_1m``/``_1h``, materialized views of
``gpu_telemetry``). A host's unallocated GPU hours are its capacity minus what the
workloads on it were allocated, per bucket (never below zero: a period whose document
listed no GPUs is counted as fully held). Idle capacity comes in two kinds, which the
Fleet page shows side by side: GPUs nobody held (unallocated), and GPUs held but not busy
(idle: allocated minus busy, over the time busy was measured).

Which hosts: those the selector names when it names only ``host`` and ``gpu_model`` (or
nothing: the whole fleet); for any other selector, the hosts its workloads ran on in the
range, so "team X's hosts" have their capacity beside team X's hours.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aiflame.server.labels import Matcher, matchers_sql, parse_selector
from aiflame.server.store.connection import Store

HOST_LABELS = ("host", "gpu_model")
_TABLES = {  # capacity table, its time column, and (seconds, gpus) of a (bucket, host)
    "1h": ("gpu_capacity_1h", "bucket", "sum(gpu_seconds) AS seconds, max(gpus) AS gpus"),
    "1m": ("gpu_capacity_1m", "bucket", "sum(gpu_seconds) AS seconds, max(gpus) AS gpus"),
    "raw": (
        "gpu_telemetry",
        "start",
        "sum(dateDiff('millisecond', start, end) / 1000) AS seconds, "
        "toUInt32(max(gpu_index) + 1) AS gpus",
    ),
}


@dataclass
class HostUse:
    host: str
    gpu_model: str = ""
    gpus: int = 0  # the most GPUs it listed
    capacity_s: float = 0.0
    allocated_s: float = 0.0
    unallocated_s: float = 0.0
    busy_s: float = 0.0
    busy_basis_s: float = 0.0


@dataclass
class Capacity:
    hosts: dict[str, HostUse] = field(default_factory=dict)
    capacity: dict[int, float] = field(default_factory=dict)  # bucket ms -> GPU-seconds
    unallocated: dict[int, float] = field(default_factory=dict)

    def fleet(self) -> dict[str, float]:
        cap = sum(h.capacity_s for h in self.hosts.values())
        free = sum(h.unallocated_s for h in self.hosts.values())
        return {"capacity_gpu_hours": cap / 3600, "unallocated_gpu_hours": free / 3600}


def host_matchers(selector: str) -> tuple[list[Matcher], bool]:
    """The selector's matchers of host labels, and whether it has others."""
    matchers = parse_selector(selector)
    own = [m for m in matchers if m.name in HOST_LABELS]
    return own, len(own) < len(matchers)


def capacity(store: Store, q: Any, raw: dict[str, str]) -> Capacity:
    """Capacity and unallocated GPU-seconds per host and per bucket, for an attribution
    query ``q`` (``raw``: the workload sums over raw telemetry rows, attribution's). One
    statement: per (bucket, host) what the GPUs had and what every workload there held,
    summed per host and per bucket (GROUPING SETS), so a week of 1,000 hosts is a thousand
    rows and not the 168,000 (bucket, host) pairs."""
    own, others = host_matchers(q.selector)
    wtable, wcol, res = q.source()
    ctable, ccol, cexpr = _TABLES[res]
    params: dict[str, Any] = {
        "tenant": q.tenant,
        "t0": q.start_ms,
        "t1": q.end_ms,
        "step": q.step_s * 1000,
    }
    model = "name" if ctable == "gpu_telemetry" else "gpu_model"
    cap_cond = matchers_sql(own, f"map('host', host, 'gpu_model', {model})", params)
    held_cond = matchers_sql(own, "labels", params)
    if others:  # the hosts the selected workloads ran on
        chosen = matchers_sql(parse_selector(q.selector), "labels", params)
        hosts = (
            f"SELECT DISTINCT labels['host'] FROM {store.db}.{wtable} "
            f"WHERE tenant = {{tenant:String}} AND {_between(wcol)} AND {chosen}"
        )
        cap_cond += f" AND host IN ({hosts})"
        held_cond += f" AND labels['host'] IN ({hosts})"
    held_sums = ", ".join(
        f"sum({c if res != 'raw' else raw[c]}) AS {c}" for c in ("allocated", "busy", "busy_basis")
    )
    sql = (
        f"WITH cap AS (SELECT {_bucket(ccol)} AS b, host, {cexpr}, "
        f"arrayStringConcat(groupUniqArray({model}), ',') AS models FROM {store.db}.{ctable} "
        f"WHERE tenant = {{tenant:String}} AND {_between(ccol)} AND {cap_cond} GROUP BY b, host), "
        f"held AS (SELECT {_bucket(wcol)} AS b, labels['host'] AS host, {held_sums} "
        f"FROM {store.db}.{wtable} WHERE tenant = {{tenant:String}} AND {_between(wcol)} "
        f"AND {held_cond} GROUP BY b, host) "
        # a period whose document listed no GPUs: what was held there is its capacity
        "SELECT grouping(host), b, host, sum(greatest(seconds, allocated)), "
        "sum(greatest(seconds, allocated) - allocated), sum(allocated), sum(busy), "
        "sum(busy_basis), max(gpus), any(models) "
        "FROM cap FULL OUTER JOIN held USING (b, host) "
        "GROUP BY GROUPING SETS ((b), (host))"
    )
    out = Capacity()
    for grouping, b, host, total, free, allocated, busy, basis, gpus, models in store.rows(
        sql, params
    ):
        if grouping == 0:  # a host's row (grouped by host; 1: a bucket's)
            out.hosts[host] = HostUse(
                host, models, int(gpus), float(total), float(allocated), float(free),
                float(busy), float(basis),
            )  # fmt: skip
        else:
            when = q.start_ms + int(b) * q.step_s * 1000
            out.capacity[when] = float(total)
            out.unallocated[when] = float(free)
    return out


def _bucket(col: str) -> str:
    return (
        f"intDiv(toUnixTimestamp64Milli(toDateTime64({col}, 3, 'UTC')) - {{t0:Int64}}, "
        "{step:Int64})"
    )


def _between(col: str) -> str:
    return (
        f"{col} >= fromUnixTimestamp64Milli({{t0:Int64}}, 'UTC') "
        f"AND {col} < fromUnixTimestamp64Milli({{t1:Int64}}, 'UTC')"
    )


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def host_rows(c: Capacity) -> list[dict[str, Any]]:
    """The hosts, most unallocated first: capacity, allocated, unallocated, busy, idle."""
    out = []
    for h in sorted(c.hosts.values(), key=lambda h: (-h.unallocated_s, h.host)):
        idle = max(0.0, h.busy_basis_s - h.busy_s)
        out.append(
            {
                "host": h.host,
                "gpu_model": h.gpu_model,
                "gpus": h.gpus,
                "capacity_gpu_hours": h.capacity_s / 3600,
                "allocated_gpu_hours": h.allocated_s / 3600,
                "unallocated_gpu_hours": h.unallocated_s / 3600,
                "busy_gpu_hours": h.busy_s / 3600,
                "idle_gpu_hours": idle / 3600 if h.busy_basis_s else None,
            }
        )
    return out
