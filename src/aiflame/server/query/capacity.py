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

from dataclasses import dataclass, field, replace
from typing import Any

from aiflame.server.labels import Matcher, matchers_sql, parse_selector
from aiflame.server.store.connection import Store

HOST_LABELS = ("host", "gpu_model")
_TABLES = {
    "1h": ("gpu_capacity_1h", "bucket", "sum(gpu_seconds), max(gpus)"),
    "1m": ("gpu_capacity_1m", "bucket", "sum(gpu_seconds), max(gpus)"),
    "raw": (
        "gpu_telemetry",
        "start",
        "sum(dateDiff('millisecond', start, end) / 1000), max(gpu_index) + 1",
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


def capacity(store: Store, q: Any, buckets: Any) -> Capacity:
    """Capacity and unallocated GPU-seconds per host and per bucket, for an attribution
    query ``q`` (``buckets`` is :func:`attribution.buckets`, passed to avoid a cycle)."""
    own, others = host_matchers(q.selector)
    hosts_only = "{" + ", ".join(f'{m.name}{m.op}"{_esc(m.value)}"' for m in own) + "}"
    # every workload on those hosts, whoever it is: what is held there
    held = buckets(store, replace(q, group_by="host", selector=hosts_only, top=0))
    wanted: set[str] | None = None
    if others:  # the hosts the selected workloads ran on
        chosen = buckets(store, replace(q, group_by="host", top=0))
        wanted = {host for _, host, _ in chosen}
    table, col, expr = _TABLES[q.source()[2]]
    params: dict[str, Any] = {
        "tenant": q.tenant,
        "t0": q.start_ms,
        "t1": q.end_ms,
        "step": q.step_s * 1000,
    }
    model = "name" if table == "gpu_telemetry" else "gpu_model"
    cond = matchers_sql(own, f"map('host', host, 'gpu_model', {model})", params)
    rows = store.rows(
        f"SELECT intDiv(toUnixTimestamp64Milli(toDateTime64({col}, 3, 'UTC')) - {{t0:Int64}}, "
        f"{{step:Int64}}) AS b, host, arrayStringConcat(groupUniqArray({model}), ','), {expr} "
        f"FROM {store.db}.{table} WHERE tenant = {{tenant:String}} "
        f"AND {col} >= fromUnixTimestamp64Milli({{t0:Int64}}, 'UTC') "
        f"AND {col} < fromUnixTimestamp64Milli({{t1:Int64}}, 'UTC') AND {cond} "
        "GROUP BY b, host",
        params,
    )
    out = Capacity()
    cap: dict[tuple[int, str], float] = {}
    for b, host, models, seconds, gpus in rows:
        if wanted is not None and host not in wanted:
            continue
        when = q.start_ms + int(b) * q.step_s * 1000
        cap[(when, host)] = float(seconds)
        h = out.hosts.setdefault(host, HostUse(host))
        h.gpu_model = h.gpu_model or models
        h.gpus = max(h.gpus, int(gpus))
    used: dict[tuple[int, str], float] = {}
    for when, host, s in held:
        if wanted is not None and host not in wanted:
            continue
        used[(when, host)] = s["allocated"]
        h = out.hosts.setdefault(host, HostUse(host))
        h.allocated_s += s["allocated"]
        h.busy_s += s["busy"]
        h.busy_basis_s += s["busy_basis"]
    for key in cap.keys() | used.keys():
        when, host = key
        total = max(cap.get(key, 0.0), used.get(key, 0.0))  # no GPU list: fully held
        free = total - used.get(key, 0.0)
        h = out.hosts[host]
        h.capacity_s += total
        h.unallocated_s += free
        out.capacity[when] = out.capacity.get(when, 0.0) + total
        out.unallocated[when] = out.unallocated.get(when, 0.0) + free
    return out


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
