"""Fleet-wide on-demand requests (Kineto traces, GPU memory snapshots), handed to agents
with their heartbeats."""

from __future__ import annotations

import time
from typing import Any

import pyarrow as pa

_MS = pa.timestamp("ms", tz="UTC")
_RECENT_S = 900  # a host ran a workload if its telemetry said so in the last 15 minutes
MAX_PIDS = 256  # the agent's bound on the PIDs of one trace request
REQUEST_KINDS = ("trace", "memory-snapshot")


_ACTIVE_CHECK_S = 5.0
_active: dict[str, tuple[float, bool]] = {}  # tenant -> (checked at, any request active)


def _any_active(store: Any, tenant: str) -> bool:
    """Whether the tenant has unexpired requests (asked at most every few seconds: a
    thousand agents' heartbeats should not each query the store for nothing)."""
    now = time.monotonic()
    hit = _active.get(tenant)
    if hit and now - hit[0] < _ACTIVE_CHECK_S:
        return hit[1]
    rows = store.rows(
        f"SELECT count() FROM {store.db}.trace_requests WHERE tenant = {{t:String}} "
        "AND expires > now64(3)",
        {"t": tenant},
    )
    active = bool(rows and rows[0][0])
    _active[tenant] = (now, active)
    return active


def request_created(tenant: str) -> None:
    _active.pop(tenant, None)


def agent_selector(
    labels: dict[str, str], recent: list[tuple[dict[str, str], list[int]]]
) -> dict[str, Any] | None:
    """The processes of this host a request names, as the agent's trace API takes them
    (exactly one of ``job_id``, ``pids`` or ``all``), or None when it names none here.

    A job id goes as it is (the agent also knows a job's processes that its telemetry has
    not shown yet); any other labels become the PIDs of the host's workloads that carry
    them, from their latest telemetry; no labels at all is every process of the host."""
    if not labels:
        return {"all": True}
    matching = [pids for w, pids in recent if all(w.get(k) == v for k, v in labels.items())]
    if not matching:
        return None
    if set(labels) == {"job_id"}:
        return {"job_id": labels["job_id"]}
    pids = sorted({p for ps in matching for p in ps if p > 0})[:MAX_PIDS]
    return {"pids": pids} if pids else None


def deliveries_for(
    state: Any, tenant: str, host: str, now_ms: int
) -> tuple[list[dict], dict | None]:
    """Requests for this host not yet handed to it, and the delivery rows to record."""
    store = state.store
    if not _any_active(store, tenant):
        return [], None
    rows = store.rows(
        f"SELECT request_id, selector, kind, duration_ms, iterations, start_time "
        f"FROM {store.db}.trace_requests FINAL WHERE tenant = {{t:String}} "
        "AND expires > now64(3) AND request_id NOT IN (SELECT request_id FROM "
        f"{store.db}.trace_deliveries WHERE tenant = {{t:String}} AND host = {{h:String}})",
        {"t": tenant, "h": host},
    )
    if not rows:
        return [], None
    # Each workload the host ran lately, with the PIDs of its latest period.
    recent = [
        (dict(labels), [int(p) for p in pids])
        for labels, pids in store.rows(
            f"SELECT labels, argMax(pids, start) FROM {store.db}.workload_telemetry "
            "WHERE tenant = {t:String} AND host = {h:String} "
            "AND start > now64(3) - toIntervalSecond({s:UInt32}) GROUP BY labels",
            {"t": tenant, "h": host, "s": _RECENT_S},
        )
    ]
    out = []
    for request_id, selector, kind, duration_ms, iterations, start_time in rows:
        sel = dict(selector)
        if "host" in sel and sel["host"] != host:
            continue
        target = agent_selector({k: v for k, v in sel.items() if k != "host"}, recent)
        if target is None:
            continue
        out.append(
            {
                "request_id": request_id,
                "kind": kind,
                "selector": target,
                "labels": sel,
                "duration_ms": duration_ms,
                "iterations": iterations,
                "start_time": start_time,
            }
        )
    if not out:
        return [], None
    n = len(out)
    delivery = {
        "tenant": [tenant] * n,
        "request_id": [r["request_id"] for r in out],
        "host": [host] * n,
        "delivered": pa.array([now_ms] * n, _MS),
    }
    return out, delivery
