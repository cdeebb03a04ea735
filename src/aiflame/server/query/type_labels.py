"""The labels Pyroscope gives every series from its profile type, and selectors over them.

Pyroscope stores a series' profile type as labels too: ``__profile_type__`` (the whole id,
``process_cpu:cpu:nanoseconds:cpu:nanoseconds``), ``__type__``, ``__unit__``,
``__period_type__`` and ``__period_unit__``. Grafana's Profiles Drilldown app lists services
with ``Series(label_names=["service_name", "__profile_type__"])`` and asks for label names
and values with ``{__profile_type__="...", service_name="..."}``. Here they are derived from
the ``profile_type`` column of the series index (stored once per series and hour), so a
matcher on them is a condition on that column.
"""

from __future__ import annotations

from aiflame.server.labels import Matcher, matchers_sql, parse_selector

PROFILE_TYPE_LABEL = "__profile_type__"
# label -> position in the profile type id (None: the whole id)
TYPE_LABELS: dict[str, int | None] = {
    PROFILE_TYPE_LABEL: None,
    "__type__": 1,
    "__unit__": 2,
    "__period_type__": 3,
    "__period_unit__": 4,
}


def type_labels(profile_type: str) -> dict[str, str]:
    """The labels of a profile type id (``name:type:unit:period_type:period_unit``)."""
    parts = profile_type.split(":")
    out = {}
    for label, pos in TYPE_LABELS.items():
        out[label] = profile_type if pos is None else (parts[pos] if pos < len(parts) else "")
    return out


def _expr(label: str, column: str) -> str:
    pos = TYPE_LABELS[label]
    return column if pos is None else f"splitByChar(':', {column})[{pos + 1}]"


def _condition(m: Matcher, column: str, params: dict[str, object]) -> str:
    key = f"pt{len(params)}"
    expr = _expr(m.name, column)
    if m.op in ("=", "!="):
        params[key] = m.value
        return f"{expr} {m.op} {{{key}:String}}"
    params[key] = f"^(?:{m.value})$"  # RE2, anchored as Prometheus anchors it
    return f"{'NOT ' if m.op == '!~' else ''}match({expr}, {{{key}:String}})"


def selector_sql(
    selector: str, params: dict[str, object], labels: str = "labels", column: str = "profile_type"
) -> str:
    """A SQL condition on the series index: matchers of stored labels on the ``labels``
    map, matchers of the profile type's labels on the ``column`` of the profile type."""
    matchers = parse_selector(selector)
    stored = [m for m in matchers if m.name not in TYPE_LABELS]
    derived = [_condition(m, column, params) for m in matchers if m.name in TYPE_LABELS]
    return " AND ".join([matchers_sql(stored, labels, params), *derived])


def any_selector_sql(selectors: list[str], params: dict[str, object]) -> str:
    """Series that match any of the selectors (as Prometheus' ``match[]``); all without."""
    conds = [selector_sql(s, params) for s in selectors if s.strip()]
    return "(" + " OR ".join(f"({c})" for c in conds) + ")" if conds else "1"
