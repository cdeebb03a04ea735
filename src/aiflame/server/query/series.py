"""Values of a selection over time, grouped by labels (Pyroscope's SelectSeries)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from aiflame.server import validate
from aiflame.server.errors import BadRequest
from aiflame.server.labels import LABEL_NAME
from aiflame.server.query.heatmap import INDIVIDUAL, Point, profile_points
from aiflame.server.query.select import Selection
from aiflame.server.store.connection import Store

MAX_POINTS = 11_000  # as Prometheus: a step that makes more points is refused


@dataclass
class Series:
    labels: dict[str, str]
    timestamps_ms: list[int]
    values: list[float]
    exemplars: dict[int, Point] = field(default_factory=dict)  # point time -> its profile


def step_ms_of(sel: Selection, step_s: float) -> int:
    if step_s <= 0:
        step_s = max(15.0, (sel.end_ms - sel.start_ms) / 1000 / 1000)
    return max(1, int(step_s * 1000))


def select_series(
    store: Store,
    sel: Selection,
    step_s: float,
    group_by: list[str],
    average: bool = False,
    limit: int | None = None,
) -> list[Series]:
    step_s = validate.number(step_s, "step", -1e18, 1e18)
    validate.check_group_by(len(group_by))
    step_ms = step_ms_of(sel, step_s)
    if (sel.end_ms - sel.start_ms) / step_ms > MAX_POINTS:
        raise BadRequest(f"the step is too small: more than {MAX_POINTS:,} points per series")
    for g in group_by:
        if not LABEL_NAME.match(g):
            raise BadRequest(f"invalid group_by label {g[:60]!r}")
    params: dict[str, object] = {**sel.params(), "step": step_ms}
    series = sel.series_sql(store.db, params)
    group_cols = ", ".join(f"any(labels[{{g{i}:String}}]) AS g{i}" for i in range(len(group_by)))
    for i, g in enumerate(group_by):
        params[f"g{i}"] = g
    keys = "".join(f", g{i}" for i in range(len(group_by)))
    labels_sql = (
        f"SELECT series_id{', ' + group_cols if group_cols else ''} FROM {store.db}.series "
        "WHERE tenant = {tenant:String} AND profile_type = {pt:String} AND series_id IN ("
        + series
        + ") GROUP BY series_id"
    )
    # A point per step: the sum over the step (or the mean per profile).
    value = "sum(value) / uniqExact(series_id, time)" if average else "sum(value)"
    sql = (
        f"SELECT intDiv(toUnixTimestamp64Milli(time) - {{t0:Int64}}, {{step:Int64}}) AS b{keys}, "
        f"{value} AS v FROM {store.db}.samples AS s "
        f"INNER JOIN ({labels_sql}) AS l ON s.series_id = l.series_id "
        "WHERE s.tenant = {tenant:String} AND s.profile_type = {pt:String} "
        "AND s.time >= fromUnixTimestamp64Milli({t0:Int64}, 'UTC') "
        "AND s.time < fromUnixTimestamp64Milli({t1:Int64}, 'UTC') "
        f"GROUP BY b{keys} ORDER BY b"
    )
    rows = store.rows(sql, params)
    groups: dict[tuple, Series] = {}
    for row in rows:
        b, key, v = row[0], tuple(row[1:-1]), row[-1]
        s = groups.get(key)
        if s is None:
            labels = {g: x for g, x in zip(group_by, key, strict=True) if x != ""}
            s = groups[key] = Series(labels, [], [])
        s.timestamps_ms.append(sel.start_ms + int(b) * step_ms)
        s.values.append(float(v))
    out = list(groups.values())
    if limit is not None and limit > 0 and len(out) > limit:
        totals = np.array([sum(s.values) for s in out])
        keep = np.argsort(-totals, kind="stable")[:limit]
        out = [out[i] for i in sorted(keep.tolist())]
    return out


def add_exemplars(
    store: Store, sel: Selection, step_s: float, group_by: list[str], result: list[Series]
) -> None:
    """Each point's exemplar: the profile of the highest value in its step (Pyroscope keeps
    one per point), with the labels of its series other than those grouped by. A range of
    more profiles than a heatmap takes has its series without exemplars."""
    step_ms = step_ms_of(sel, step_s)
    by_key = {tuple(s.labels.get(g, "") for g in group_by): s for s in result}
    try:
        points = profile_points(store, sel, sel.start_ms, INDIVIDUAL)
    except BadRequest:
        return
    for p in points:
        s = by_key.get(tuple(p.labels.get(g, "") for g in group_by))
        if s is None:
            continue
        ts = sel.start_ms + (p.time_ms - sel.start_ms) // step_ms * step_ms
        best = s.exemplars.get(ts)
        if best is None or p.value > best.value:
            shown = {k: v for k, v in p.labels.items() if k not in group_by}
            s.exemplars[ts] = Point(p.time_ms, p.value, p.profile_id, 0, shown)
