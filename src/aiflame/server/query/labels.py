"""Profile types, label names and values, and series of a time range (the series index)."""

from __future__ import annotations

from aiflame.server import validate
from aiflame.server.labels import NAME_LABEL, Matcher, ProfileType, parse_selector
from aiflame.server.query.type_labels import TYPE_LABELS, any_selector_sql, type_labels
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
    """Series match if any of the selectors does (as in Prometheus' match[])."""
    validate.check_selector_count(len(selectors))
    return any_selector_sql(selectors, params)


def format_matchers(matchers: list[Matcher]) -> str:
    """Matchers back as a selector (values quoted as the selector parser reads them)."""

    def q(v: str) -> str:
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'

    return "{" + ", ".join(f"{q(m.name)}{m.op}{q(m.value)}" for m in matchers) + "}"


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
    names = {r[0] for r in rows}
    if names:  # every series has the labels of its profile type (as in Pyroscope)
        names |= set(TYPE_LABELS)
    return sorted(names)


def label_values(
    store: Store, tenant: str, name: str, selectors: list[str], start_ms: int, end_ms: int
) -> list[str]:
    params = _range_params(tenant, start_ms, end_ms)
    params["name"] = name
    cond = _matchers(selectors, params)
    if name in TYPE_LABELS:
        types = store.rows(
            f"SELECT DISTINCT profile_type FROM {store.db}.series WHERE {_RANGE} AND {cond}",
            params,
        )
        return sorted({type_labels(r[0])[name] for r in types})
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
    stored = "labels"
    if names:  # only the labels asked for leave the store
        params["names"] = [n for n in names if n not in TYPE_LABELS]
        stored = "mapFilter((k, v) -> has({names:Array(String)}, k), labels)"
    rows = store.rows(
        f"SELECT DISTINCT {stored}, profile_type FROM {store.db}.series "
        f"WHERE {_RANGE} AND {cond} LIMIT 100000",
        params,
    )
    out, seen = [], set()
    for labels, profile_type in rows:
        d = {**dict(labels), **type_labels(profile_type)}
        d = {k: v for k, v in d.items() if not names or k in names}
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


def query_scope(
    store: Store, tenant: str, query: str, start_ms: int, end_ms: int
) -> dict[str, int]:
    """What a query (``profile_type{selector}``) reads in the range: its series, profiles,
    their samples and pushed bytes (Pyroscope's AnalyzeQuery)."""
    matchers = parse_selector(query)
    # a profile type given as the metric name (``process_cpu:cpu:...{...}``)
    types = [m.value for m in matchers if m.name == NAME_LABEL and m.op == "=" and ":" in m.value]
    rest = [m for m in matchers if not (m.name == NAME_LABEL and m.value in types)]
    params = _range_params(tenant, start_ms, end_ms)
    cond = _matchers([format_matchers(rest)], params)
    if types:
        params["pt"] = types[0]
        cond += " AND profile_type = {pt:String}"
    series = f"SELECT DISTINCT series_id FROM {store.db}.series WHERE {_RANGE} AND {cond}"
    rows = store.rows(
        f"SELECT (SELECT count() FROM ({series})), count(), sum(samples), sum(pprof_bytes) "
        f"FROM {store.db}.profiles WHERE tenant = {{tenant:String}} "
        "AND time >= fromUnixTimestamp64Milli({t0:Int64}, 'UTC') "
        "AND time < fromUnixTimestamp64Milli({t1:Int64}, 'UTC') "
        f"AND hasAny(series_ids, (SELECT groupArray(series_id) FROM ({series})))",
        params,
    )
    n_series, n_profiles, n_samples, n_bytes = rows[0] if rows else (0, 0, 0, 0)
    return {
        "block_count": 0,
        "series_count": int(n_series or 0),
        "profile_count": int(n_profiles or 0),
        "sample_count": int(n_samples or 0),
        "index_bytes": 0,
        "profile_bytes": int(n_bytes or 0),
        "symbol_bytes": 0,
    }
