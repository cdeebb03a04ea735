"""Profile types, label names and values, and series of a time range (the series index)."""

from __future__ import annotations

from aiflame.server import validate
from aiflame.server.labels import ProfileType, matchers_sql, parse_selector
from aiflame.server.store.connection import Store

_RANGE = (
    "tenant = {tenant:String} "
    "AND hour >= toStartOfHour(fromUnixTimestamp64Milli({t0:Int64}, 'UTC')) "
    "AND hour < fromUnixTimestamp64Milli({t1:Int64}, 'UTC')"
)


def _range_params(tenant: str, start_ms: int, end_ms: int) -> dict[str, object]:
    if end_ms <= 0:
        end_ms = 2**62
    return {"tenant": tenant, "t0": max(0, start_ms), "t1": max(end_ms, start_ms + 1)}


def _matchers(selectors: list[str], params: dict[str, object]) -> str:
    """Series match if any of the selectors matches (as in Prometheus' match[])."""
    validate.check_selector_count(len(selectors))
    conds = [matchers_sql(parse_selector(s), "labels", params) for s in selectors if s.strip()]
    return "(" + " OR ".join(f"({c})" for c in conds) + ")" if conds else "1"


def profile_types(store: Store, tenant: str, start_ms: int, end_ms: int) -> list[ProfileType]:
    params = _range_params(tenant, start_ms, end_ms)
    rows = store.rows(
        f"SELECT DISTINCT profile_type FROM {store.db}.series WHERE {_RANGE} ORDER BY profile_type",
        params,
    )
    return [ProfileType.parse(r[0]) for r in rows]


def label_names(
    store: Store, tenant: str, selectors: list[str], start_ms: int, end_ms: int
) -> list[str]:
    params = _range_params(tenant, start_ms, end_ms)
    cond = _matchers(selectors, params)
    rows = store.rows(
        f"SELECT DISTINCT arrayJoin(mapKeys(labels)) AS k FROM {store.db}.series "
        f"WHERE {_RANGE} AND {cond} ORDER BY k",
        params,
    )
    return [r[0] for r in rows]


def label_values(
    store: Store, tenant: str, name: str, selectors: list[str], start_ms: int, end_ms: int
) -> list[str]:
    params = _range_params(tenant, start_ms, end_ms)
    params["name"] = name
    cond = _matchers(selectors, params)
    rows = store.rows(
        f"SELECT DISTINCT labels[{{name:String}}] AS v FROM {store.db}.series "
        f"WHERE {_RANGE} AND mapContains(labels, {{name:String}}) AND {cond} ORDER BY v",
        params,
    )
    return [r[0] for r in rows]


def series_labels(
    store: Store, tenant: str, selectors: list[str], names: list[str], start_ms: int, end_ms: int
) -> list[dict[str, str]]:
    params = _range_params(tenant, start_ms, end_ms)
    cond = _matchers(selectors, params)
    rows = store.rows(
        f"SELECT DISTINCT labels FROM {store.db}.series WHERE {_RANGE} AND {cond} LIMIT 100000",
        params,
    )
    out, seen = [], set()
    for (labels,) in rows:
        d = {k: v for k, v in dict(labels).items() if not names or k in names}
        key = tuple(sorted(d.items()))
        if key not in seen:
            seen.add(key)
            out.append(d)
    return out


def profile_stats(store: Store, tenant: str) -> tuple[bool, int, int]:
    rows = store.rows(
        f"SELECT count(), toUnixTimestamp64Milli(min(time)), toUnixTimestamp64Milli(max(time)) "
        f"FROM {store.db}.profiles WHERE tenant = {{tenant:String}}",
        {"tenant": tenant},
    )
    n, lo, hi = rows[0] if rows else (0, 0, 0)
    return bool(n), int(lo or 0) if n else 0, int(hi or 0) if n else 0
