"""Heatmaps of individual profiles or spans (Pyroscope's ``SelectHeatmap``), and the
profiles behind the points of a time series (its exemplars).

A point is one profile (``HEATMAP_QUERY_TYPE_INDIVIDUAL``: the profile's total of the
profile type) or one span of one profile (``HEATMAP_QUERY_TYPE_SPAN``: the values of the
samples that carry that span id). Points are bucketed as Pyroscope does
(``pkg/model/heatmap/range.go``): 20 value buckets evenly spaced between the smallest and
the largest point of every series, time slots ``(start + k*step - step, start + k*step]``,
and per cell the count of points and, as its exemplar, the point of the highest value.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from aiflame.server.errors import BadRequest
from aiflame.server.labels import LABEL_NAME
from aiflame.server.query.select import Selection
from aiflame.server.query.type_labels import type_labels
from aiflame.server.store.connection import Store

VALUE_BUCKETS = 20  # Pyroscope's DefaultYAxisBuckets
MAX_POINTS = 2_000_000  # profiles (or spans) of one heatmap; beyond, narrow the range
INDIVIDUAL, SPAN = "individual", "span"


@dataclass
class Point:
    time_ms: int
    value: int
    profile_id: str
    span_id: int
    labels: dict[str, str]


@dataclass
class Slot:
    time_ms: int  # the slot's right edge
    y_min: list[float]
    counts: list[int]
    exemplars: list[Point] = field(default_factory=list)


@dataclass
class HeatmapSeries:
    labels: dict[str, str]
    slots: list[Slot]


def series_labels(store: Store, sel: Selection) -> dict[int, dict[str, str]]:
    """The labels of the selection's series (with those of its profile type)."""
    params: dict[str, object] = dict(sel.params())
    rows = store.rows(
        f"SELECT series_id, any(labels) FROM {store.db}.series WHERE tenant = {{tenant:String}} "
        "AND profile_type = {pt:String} AND series_id IN ("
        + sel.series_sql(store.db, params)
        + ") "
        "GROUP BY series_id",
        params,
    )
    derived = type_labels(sel.profile_type)
    return {int(sid): {**dict(labels), **derived} for sid, labels in rows}


def profile_points(store: Store, sel: Selection, start_ms: int, kind: str) -> list[Point]:
    """Each profile's (or each span's) total in ``[start_ms, sel.end_ms)``, with its id."""
    params: dict[str, object] = {**sel.params(), "t0": start_ms, "n": MAX_POINTS + 1}
    series = sel.series_sql(store.db, params)
    table, span = ("span_samples", "span_id") if kind == SPAN else ("samples", "toUInt64(0)")
    rows = store.rows(
        f"SELECT series_id, toUnixTimestamp64Milli(time) AS t, {span} AS span, sum(value) AS v "
        f"FROM {store.db}.{table} WHERE tenant = {{tenant:String}} "
        "AND profile_type = {pt:String} AND series_id IN (" + series + ") "
        "AND time >= fromUnixTimestamp64Milli({t0:Int64}, 'UTC') "
        "AND time < fromUnixTimestamp64Milli({t1:Int64}, 'UTC') "
        "GROUP BY series_id, t, span HAVING v != 0 LIMIT {n:UInt64}",
        params,
    )
    if len(rows) > MAX_POINTS:
        raise BadRequest(
            f"more than {MAX_POINTS:,} profiles in the range: narrow the range or the selector"
        )
    labels = series_labels(store, sel)
    ids = profile_ids(store, sel, start_ms) if kind == INDIVIDUAL else {}
    out = []
    for sid, t, span_id, v in rows:
        pid = ids.get((int(sid), int(t)), "")
        if kind == INDIVIDUAL and not pid:
            continue  # Pyroscope keeps no point without an id
        out.append(Point(int(t), int(v), pid, int(span_id), labels.get(int(sid), {})))
    return out


def profile_ids(store: Store, sel: Selection, start_ms: int) -> dict[tuple[int, int], str]:
    """(series id, time ms) -> the id of the profile pushed for that series at that time,
    for the selection's series from ``start_ms``."""
    params: dict[str, object] = {**sel.params(), "t0": start_ms}
    series = sel.series_sql(store.db, params)
    rows = store.rows(
        f"SELECT arrayJoin(series_ids) AS sid, toUnixTimestamp64Milli(time), any(profile_id) "
        f"FROM {store.db}.profiles WHERE tenant = {{tenant:String}} "
        "AND time >= fromUnixTimestamp64Milli({t0:Int64}, 'UTC') "
        "AND time < fromUnixTimestamp64Milli({t1:Int64}, 'UTC') "
        f"AND hasAny(series_ids, (SELECT groupArray(series_id) FROM ({series}))) "
        "GROUP BY sid, time",
        params,
    )
    return {(int(s), int(t)): p for s, t, p in rows}


def _value_buckets(lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Pyroscope's createYAxisBuckets: bucket i is [lo + int(i*size), lo + int((i+1)*size))."""
    size = (hi - lo) / VALUE_BUCKETS
    i = np.arange(VALUE_BUCKETS, dtype=np.float64)
    mins = lo + np.trunc(i * size).astype(np.int64)
    maxs = lo + np.trunc((i + 1) * size).astype(np.int64)
    maxs[-1] = hi
    return mins, maxs


def _bucket_of(values: np.ndarray, mins: np.ndarray, maxs: np.ndarray) -> np.ndarray:
    """The first bucket with min <= v < max; at or past the last bucket's min, the last."""
    inside = (values[:, None] >= mins[None, :]) & (values[:, None] < maxs[None, :])
    first = np.where(inside.any(axis=1), inside.argmax(axis=1), -1)
    return np.where((first < 0) & (values >= mins[-1]), VALUE_BUCKETS - 1, first)


def _round_up(t: np.ndarray, start: int, step: int) -> np.ndarray:
    """The right edge of the slot of each time: the grid is start + k*step."""
    off = start % step
    shifted = t - off
    return np.where(shifted % step != 0, (shifted // step + 1) * step, shifted) + off


def slot_times(times: np.ndarray, start: int, end: int, step: int) -> np.ndarray:
    """Pyroscope's normalizeTimestamp: slots ``(start-step, start], (start, start+step], ...``
    up to the one holding ``end``."""
    last = int(_round_up(np.array([end]), start, step)[0])
    return np.clip(_round_up(times, start, step), start, last)


def heatmap(
    points: list[Point],
    start_ms: int,
    end_ms: int,
    step_ms: int,
    group_by: list[str],
    exemplars: bool,
    limit: int = 0,
) -> list[HeatmapSeries]:
    if not points:
        return []
    groups: dict[tuple[str, ...], dict[tuple[int, int, str], Point]] = {}
    for p in points:  # points of one group with the same time, span and profile are one
        key = tuple(p.labels.get(g, "") for g in group_by)
        merged = groups.setdefault(key, {})
        pk = (p.time_ms, p.span_id, p.profile_id)
        if pk in merged:
            q = merged[pk]
            merged[pk] = Point(q.time_ms, q.value + p.value, q.profile_id, q.span_id, q.labels)
        else:
            merged[pk] = p
    values = np.array([p.value for g in groups.values() for p in g.values()], dtype=np.int64)
    lo, hi = int(values.min()), int(values.max())
    if lo == hi:
        hi = lo + 1
    mins, maxs = _value_buckets(lo, hi)
    out = []
    for key, merged in groups.items():
        pts = list(merged.values())
        v = np.array([p.value for p in pts], dtype=np.int64)
        ts = slot_times(
            np.array([p.time_ms for p in pts], dtype=np.int64), start_ms, end_ms, step_ms
        )
        yb = _bucket_of(v, mins, maxs)
        cells: dict[tuple[int, int], list[int]] = {}
        for i in np.flatnonzero(yb >= 0).tolist():
            cells.setdefault((int(ts[i]), int(yb[i])), []).append(i)
        slots: dict[int, Slot] = {}
        for (t, y), members in sorted(cells.items()):
            slot = slots.get(t)
            if slot is None:
                slot = slots[t] = Slot(t, mins.astype(float).tolist(), [0] * VALUE_BUCKETS)
            slot.counts[y] = len(members)
            if exemplars:
                best = pts[max(members, key=lambda i: v[i])]
                shown = {k: x for k, x in best.labels.items() if k not in group_by}
                slot.exemplars.append(
                    Point(best.time_ms, best.value, best.profile_id, best.span_id, shown)
                )
        labels = {g: x for g, x in zip(group_by, key, strict=True) if x}
        out.append(HeatmapSeries(labels, [slots[t] for t in sorted(slots)]))
    if limit > 0 and len(out) > limit:  # Pyroscope's TopSeries: by the sum of the counts
        out.sort(key=lambda s: (-sum(sum(x.counts) for x in s.slots), sorted(s.labels.items())))
        out = out[:limit]
    return out


def select_heatmap(
    store: Store,
    sel: Selection,
    step_s: float,
    group_by: list[str],
    kind: str,
    exemplars: bool,
    limit: int = 0,
) -> list[HeatmapSeries]:
    if step_s < 0.001:
        raise BadRequest(f"step must be >= 1ms, got {step_s:g}")
    for g in group_by:
        if not LABEL_NAME.match(g):
            raise BadRequest(f"invalid group_by label {g[:60]!r}")
    step_ms = max(1, int(step_s * 1000))
    if (sel.end_ms - sel.start_ms) / step_ms > 11_000:
        raise BadRequest("the step is too small: more than 11,000 time slots")
    # Points just before the start fall into its first slot, (start - step, start].
    points = profile_points(store, sel, sel.start_ms - step_ms, kind)
    return heatmap(points, sel.start_ms, sel.end_ms, step_ms, group_by, exemplars, limit)
