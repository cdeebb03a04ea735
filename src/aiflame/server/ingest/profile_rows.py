"""Profiles of one batch -> columns of the samples, series, stacks, frames and profiles tables
(and of span_samples, for the samples that name a span).

Strings that repeat on every row (tenant, profile type) travel dictionary-encoded, so a
batch of a million sample rows is a few numpy concatenations.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from aiflame.server.ingest.profiles import Dictionary, ProfileItem, _ragged_take

_MAP = pa.map_(pa.string(), pa.string())
_MS = pa.timestamp("ms", tz="UTC")
_S = pa.timestamp("s", tz="UTC")


def dictionary_column(indices: np.ndarray, values: list[str]) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(pa.array(indices.astype(np.int32)), pa.array(values))


def profile_tables(
    items: list[ProfileItem], cols: dict[str, dict[str, list]], now: float, writer: Any
) -> None:
    tenants: dict[str, int] = {}
    types: dict[str, int] = {}
    t_idx, p_idx, sid, tms, stack, value = [], [], [], [], [], []
    series_rows: list[tuple[str, str, int, int, dict[str, str]]] = []
    new_stacks: dict[int, ProfileItem] = {}
    new_frames: dict[int, ProfileItem] = {}
    checked: dict[int, Dictionary] = {}  # dictionaries whose frames are all stored after this
    for it in items:
        n = it.row_value.size
        ti = tenants.setdefault(it.tenant, len(tenants))
        type_map = np.asarray(
            [types.setdefault(t, len(types)) for t in it.type_ids], dtype=np.int32
        )
        t_idx.append(np.full(n, ti, dtype=np.int32))
        p_idx.append(type_map[it.row_type] if n else np.zeros(0, dtype=np.int32))
        ids = np.asarray(it.series_ids, dtype=np.uint64)
        sid.append(ids[it.row_series])
        tms.append(np.full(n, it.time_ms, dtype=np.int64))
        stack.append(it.row_stack)
        value.append(it.row_value)
        # The series index: one row per (series, profile type, hour) first seen.
        hour = it.time_ms // 3_600_000 * 3600
        keys = []
        if n:
            pairs = np.unique(it.row_series.astype(np.int64) * 65536 + it.row_type)
            for pair in pairs.tolist():
                s, t = divmod(pair, 65536)
                key = (it.tenant, it.type_ids[t], hour, it.series_ids[s])
                keys.append(key)
                if writer.series_is_new(key, now):
                    series_rows.append((*key, it.series_labels[s]))
        it._series_keys = keys  # type: ignore[attr-defined]
        for s_id in writer.stacks.new(it.stack_ids, now).tolist():
            new_stacks.setdefault(s_id, it)
        d = it.dictionary
        if d is None or now - d.frames_stored_at > writer.frames.stale_s:
            for f_id in writer.frames.new(np.unique(it.frame_ids), now).tolist():
                new_frames.setdefault(f_id, it)
            if d is not None:
                checked[id(d)] = d
    tenant_names = list(tenants)
    type_names = list(types)
    if any(v.size for v in value):
        cols.setdefault("samples", {}).update(
            {
                "tenant": [dictionary_column(np.concatenate(t_idx), tenant_names)],
                "profile_type": [dictionary_column(np.concatenate(p_idx), type_names)],
                "series_id": [pa.array(np.concatenate(sid))],
                "time": [pa.array(np.concatenate(tms), _MS)],
                "stack_id": [pa.array(np.concatenate(stack))],
                "value": [pa.array(np.concatenate(value))],
            }
        )
    spans = [it for it in items if it.spans is not None]
    if spans:
        _span_rows(spans, tenants, types, cols)
    if series_rows:
        cols.setdefault("series", {}).update(
            {
                "tenant": [pa.array([r[0] for r in series_rows])],
                "profile_type": [pa.array([r[1] for r in series_rows])],
                "hour": [pa.array([r[2] for r in series_rows], _S)],
                "series_id": [pa.array([r[3] for r in series_rows], pa.uint64())],
                "labels": [pa.array([list(r[4].items()) for r in series_rows], _MAP)],
            }
        )
    if new_stacks:
        _stack_rows(new_stacks, cols, int(now))
    if new_frames:
        _frame_rows(new_frames, cols, int(now))
    writer._written = (list(new_stacks), list(new_frames), list(checked.values()))
    cols.setdefault("profiles", {}).update(
        {
            "tenant": [pa.array([it.tenant for it in items])],
            "profile_id": [pa.array([it.profile_id for it in items])],
            "series_id": [pa.array([it.series_ids[0] for it in items], pa.uint64())],
            "series_ids": [pa.array([it.series_ids for it in items], pa.list_(pa.uint64()))],
            "name": [pa.array([it.name for it in items])],
            "time": [pa.array([it.time_ms for it in items], _MS)],
            "duration_ns": [pa.array([it.duration_ns for it in items], pa.int64())],
            "period": [pa.array([it.period for it in items], pa.int64())],
            "profile_types": [pa.array([it.type_ids for it in items], pa.list_(pa.string()))],
            "totals": [pa.array([it.totals for it in items], pa.list_(pa.int64()))],
            "samples": [pa.array([it.samples for it in items], pa.uint32())],
            "stacks": [pa.array([it.stack_ids.size for it in items], pa.uint32())],
            "pprof_bytes": [pa.array([it.pprof_bytes for it in items], pa.uint32())],
            "received": [pa.array([int(now * 1000)] * len(items), _MS)],
        }
    )


def _span_rows(
    items: list[ProfileItem], tenants: dict[str, int], types: dict[str, int], cols: dict
) -> None:
    t_idx, p_idx, sid, tms, span, stack, value = [], [], [], [], [], [], []
    for it in items:
        rows = it.spans
        assert rows is not None
        n = rows.row_value.size
        type_map = np.asarray([types[t] for t in it.type_ids], dtype=np.int32)
        t_idx.append(np.full(n, tenants[it.tenant], dtype=np.int32))
        p_idx.append(type_map[rows.row_type])
        sid.append(np.asarray(it.series_ids, dtype=np.uint64)[rows.row_series])
        tms.append(np.full(n, it.time_ms, dtype=np.int64))
        span.append(rows.row_span)
        stack.append(rows.row_stack)
        value.append(rows.row_value)
    cols.setdefault("span_samples", {}).update(
        {
            "tenant": [dictionary_column(np.concatenate(t_idx), list(tenants))],
            "profile_type": [dictionary_column(np.concatenate(p_idx), list(types))],
            "series_id": [pa.array(np.concatenate(sid))],
            "time": [pa.array(np.concatenate(tms), _MS)],
            "span_id": [pa.array(np.concatenate(span))],
            "stack_id": [pa.array(np.concatenate(stack))],
            "value": [pa.array(np.concatenate(value))],
        }
    )


def _stack_rows(new: dict[int, ProfileItem], cols: dict, now: int) -> None:
    by_item: dict[int, tuple[ProfileItem, list[int]]] = {}
    for s_id, it in new.items():
        by_item.setdefault(id(it), (it, []))[1].append(s_id)
    ids, frames, lengths = [], [], []
    for it, wanted in by_item.values():
        w = np.asarray(wanted, dtype=np.uint64)
        pos = np.searchsorted(it.stack_ids, w)  # stack_ids are sorted (np.unique)
        offs = np.cumsum(it.stack_lengths) - it.stack_lengths
        frames.append(_ragged_take(it.stack_frames, offs, it.stack_lengths, pos))
        lengths.append(it.stack_lengths[pos])
        ids.append(w)
    length = np.concatenate(lengths)
    offsets = np.concatenate(([0], np.cumsum(length))).astype(np.int32)
    flat = np.concatenate(frames).astype(np.uint64)
    cols.setdefault("stacks", {}).update(
        {
            "stack_id": [pa.array(np.concatenate(ids))],
            "frames": [pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat))],
            "last_seen": [pa.array(np.full(length.size, now, dtype=np.int64), _S)],
        }
    )


def _frame_rows(new: dict[int, ProfileItem], cols: dict, now: int) -> None:
    by_item: dict[int, tuple[ProfileItem, list[int]]] = {}
    for f_id, it in new.items():
        by_item.setdefault(id(it), (it, []))[1].append(f_id)
    rows = []
    for it, wanted in by_item.values():
        rows.extend(it.frame_rows(np.asarray(wanted, dtype=np.uint64)))
    cols.setdefault("frames", {}).update(
        {
            "frame_id": [pa.array([r[0] for r in rows], pa.uint64())],
            "name": [pa.array([r[1] for r in rows])],
            "kind": [pa.array([r[2] for r in rows], pa.uint8())],
            "file": [pa.array([r[3] for r in rows])],
            "line": [pa.array([max(0, min(r[4], 2**32 - 1)) for r in rows], pa.uint32())],
            "module": [pa.array([r[5] for r in rows])],
            "last_seen": [pa.array([now] * len(rows), _S)],
        }
    )
