"""GPU capacity and idle capacity: the GPU hours the hosts had, and how much of it nobody held.

Every telemetry document lists all of its host's GPUs, held or not; their seconds per host
are rolled up per minute and per hour (``gpu_capacity_1m``/``_1h``, materialized views of
``gpu_telemetry``). A host's unallocated GPU hours are its capacity minus what the
workloads on it were allocated (never below zero: GPUs its documents did not list but its
workloads held count as fully held). Idle capacity comes in two kinds, which the
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
_TABLES = {  # capacity table, its time column, and (seconds, GPUs) summed over its rows
    "1h": ("gpu_capacity_1h", "bucket", "sum(gpu_seconds), max(gpus)"),
    "1m": ("gpu_capacity_1m", "bucket", "sum(gpu_seconds), max(gpus)"),
    "raw": (
        "gpu_telemetry",
        "start",
        "sum(dateDiff('millisecond', start, end) / 1000), toUInt32(max(gpu_index) + 1)",
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
    query ``q`` (``raw``: the workload sums over raw telemetry rows, attribution's). Two
    statements, each summing its roll-up per bucket and per host at once (GROUPING SETS):
    a week of 10,000 hosts is ten thousand rows, not the 1.7 million (bucket, host) pairs."""
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
    sums = ", ".join(
        f"sum({c if res != 'raw' else raw[c]})" for c in ("allocated", "busy", "busy_basis")
    )
    held = store.rows(
        f"SELECT grouping(host), {_bucket(wcol)} AS b, labels['host'] AS host, {sums} "
        f"FROM {store.db}.{wtable} WHERE tenant = {{tenant:String}} AND {_between(wcol)} "
        f"AND {held_cond} GROUP BY GROUPING SETS ((b), (host))",
        params,
    )
    gpus = store.rows(
        f"SELECT grouping(host), {_bucket(ccol)} AS b, host, {cexpr}, "
        f"arrayStringConcat(groupUniqArray({model}), ',') FROM {store.db}.{ctable} "
        f"WHERE tenant = {{tenant:String}} AND {_between(ccol)} AND {cap_cond} "
        "GROUP BY GROUPING SETS ((b), (host))",
        params,
    )
    out = Capacity()
    allocated: dict[int, float] = {}
    for by_bucket, b, host, alloc, busy, basis in held:  # grouping(host): 1 per bucket
        if by_bucket:
            allocated[q.start_ms + int(b) * q.step_s * 1000] = float(alloc)
        else:
            out.hosts[host] = HostUse(host, allocated_s=float(alloc), busy_s=float(busy),
                                      busy_basis_s=float(basis))  # fmt: skip
    for by_bucket, b, host, seconds, n, models in gpus:
        if by_bucket:
            out.capacity[q.start_ms + int(b) * q.step_s * 1000] = float(seconds)
        else:
            h = out.hosts.setdefault(host, HostUse(host))
            h.capacity_s, h.gpus, h.gpu_model = float(seconds), int(n), models
    # GPUs that documents did not list but their workloads held: counted as fully held
    for h in out.hosts.values():
        h.capacity_s = max(h.capacity_s, h.allocated_s)
        h.unallocated_s = h.capacity_s - h.allocated_s
    for when in out.capacity.keys() | allocated.keys():
        used = allocated.get(when, 0.0)
        out.capacity[when] = max(out.capacity.get(when, 0.0), used)
        out.unallocated[when] = out.capacity[when] - used
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


MAX_HOSTS = 500  # hosts listed (the most unallocated); the fleet's sums count them all


def host_rows(c: Capacity) -> list[dict[str, Any]]:
    """The hosts, most unallocated first: capacity, allocated, unallocated, busy, idle."""
    out = []
    ranked = sorted(c.hosts.values(), key=lambda h: (-h.unallocated_s, h.host))
    for h in ranked[:MAX_HOSTS]:
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
