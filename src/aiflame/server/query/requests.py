"""Fleet-wide on-demand trace requests, handed to agents with their heartbeats."""

from __future__ import annotations

import time
from typing import Any

import pyarrow as pa

_MS = pa.timestamp("ms", tz="UTC")
_RECENT_S = 900  # a host ran a workload if its telemetry said so in the last 15 minutes


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


def deliveries_for(
    state: Any, tenant: str, host: str, now_ms: int
) -> tuple[list[dict], dict | None]:
    """Requests for this host not yet handed to it, and the delivery rows to record."""
    store = state.store
    if not _any_active(store, tenant):
        return [], None
    rows = store.rows(
        f"SELECT request_id, selector, duration_ms, iterations, start_time "
        f"FROM {store.db}.trace_requests FINAL WHERE tenant = {{t:String}} "
        "AND expires > now64(3) AND request_id NOT IN (SELECT request_id FROM "
        f"{store.db}.trace_deliveries WHERE tenant = {{t:String}} AND host = {{h:String}})",
        {"t": tenant, "h": host},
    )
    if not rows:
        return [], None
    recent = [
        dict(r[0])
        for r in store.rows(
            f"SELECT DISTINCT labels FROM {store.db}.workload_telemetry "
            "WHERE tenant = {t:String} AND host = {h:String} "
            "AND start > now64(3) - toIntervalSecond({s:UInt32})",
            {"t": tenant, "h": host, "s": _RECENT_S},
        )
    ]
    out = []
    for request_id, selector, duration_ms, iterations, start_time in rows:
        sel = dict(selector)
        if "host" in sel and sel["host"] != host:
            continue
        rest = {k: v for k, v in sel.items() if k != "host"}
        if rest and not any(all(w.get(k) == v for k, v in rest.items()) for w in recent):
            continue
        out.append(
            {
                "request_id": request_id,
                "selector": sel,
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
