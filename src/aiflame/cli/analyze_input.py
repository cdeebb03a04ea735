"""Read a Kineto trace into :class:`aiflame.analysis.trace.TraceData` (the analysis input).

Uses the Kineto importer's column reader (no second parser) and the same launch links as
the flame graphs: a GPU activity belongs to the runtime call with its correlation id.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from aiflame.analysis.timeline import is_communication
from aiflame.analysis.trace import Kind, TraceData
from aiflame.errors import InputError
from aiflame.sources import kineto
from aiflame.sources.inputs import Input
from aiflame.sources.kineto_events import Cls, Columns
from aiflame.transforms import correlate

_RANK = np.array([0, 0, 2, 1, 3, 0, 0, 0])  # enclosing order, as in sources/kineto.py


def read_trace(path: str) -> TraceData:
    if path != "-" and not Path(path).is_file():
        raise InputError(path, "no such file")
    cols, meta = kineto.read_columns(Input(path), shapes=True)
    return from_columns(cols, meta, path)


def _kinds(cols: Columns) -> np.ndarray:
    comm_names = np.zeros(len(cols.names), dtype=bool)
    for i in np.unique(cols.gpu_name).tolist():
        comm_names[i] = is_communication(cols.names[i])
    kind = np.full(cols.gpu_cls.shape[0], Kind.COMPUTE, dtype=np.int8)
    kind[cols.gpu_cls == Cls.MEMSET] = Kind.MEMSET
    kind[(cols.gpu_cls == Cls.KERNEL) & comm_names[cols.gpu_name]] = Kind.COMM
    kind[cols.gpu_cls == Cls.MEMCPY] = Kind.MEMCPY
    return kind


def _launches(cols: Columns) -> np.ndarray:
    cpu_corr, gpu_corr = kineto._fill_correlation_from_flows(cols)
    is_rt = cols.cpu_cls == Cls.RUNTIME
    first = correlate.link(gpu_corr, np.where(is_rt, cpu_corr, -1), cols.cpu_ts).launch
    rest = correlate.link(gpu_corr, np.where(is_rt, -1, cpu_corr), cols.cpu_ts).launch
    return np.where(first >= 0, first, rest)


def _nearest_op(parent: np.ndarray, is_op: np.ndarray, start: np.ndarray) -> np.ndarray:
    """For each slice in ``start``: itself if an operator, else its nearest enclosing one."""
    out = np.full(start.shape[0], -1, dtype=np.int64)
    cur = start.copy()
    todo = cur >= 0
    while np.any(todo):
        hit = todo & is_op[np.maximum(cur, 0)]
        out[hit] = cur[hit]
        todo &= ~hit
        cur = np.where(todo, parent[np.maximum(cur, 0)], -1)
        todo &= cur >= 0
    return out


def from_columns(cols: Columns, meta: dict, path: str) -> TraceData:
    nesting = correlate.nest(cols.cpu_thread, cols.cpu_ts, cols.cpu_dur, _RANK[cols.cpu_cls])
    launch = _launches(cols)
    is_op = cols.cpu_cls == Cls.OP
    devices = meta.get("deviceProperties")
    if not isinstance(devices, list):
        devices = []
    shapes, concrete = {}, {}
    if cols.cpu_shape is not None:
        for i in np.nonzero(cols.cpu_shape >= 0)[0].tolist():
            dims, types, given = cols.shapes[int(cols.cpu_shape[i])]
            shapes[i] = (dims, types)
            if given is not None:
                concrete[i] = given
    return TraceData(
        path=path,
        rank=kineto._rank_of(meta),
        gpu_ts=cols.gpu_ts,
        gpu_dur=cols.gpu_dur,
        gpu_kind=_kinds(cols),
        gpu_name=cols.gpu_name,
        gpu_device=cols.gpu_device,
        gpu_launch=launch,
        gpu_op=_nearest_op(nesting.parent, is_op, launch),
        cpu_ts=cols.cpu_ts,
        cpu_dur=cols.cpu_dur,
        cpu_name=cols.cpu_name,
        cpu_is_op=is_op,
        cpu_parent=nesting.parent,
        names=cols.names,
        op_shapes=shapes,
        device_info=[d for d in devices or [] if isinstance(d, dict)],
        cpu_is_runtime=cols.cpu_cls == Cls.RUNTIME,
        cpu_thread=cols.cpu_thread,
        cpu_is_annotation=cols.cpu_cls == Cls.ANNOTATION,
        gpu_stream=cols.gpu_stream,
        gpu_bytes=cols.gpu_bytes,
        op_concrete=concrete,
    )
