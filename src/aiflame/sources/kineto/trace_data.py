"""A Kineto trace's columns as :class:`~aiflame.model.trace.TraceData` (the analysis input).

The same columns and launch links as the flame graphs (``sources/kineto/importer.py``): a GPU
activity belongs to the runtime call with its correlation id (ac2g flow arrows where an id
is missing), its op is the nearest operator enclosing that call.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from aiflame.model.trace import Kind, TraceData, is_communication
from aiflame.sources.kineto.events import Cls, Columns
from aiflame.transforms import correlate

_RANK = np.array([0, 0, 2, 1, 3, 0, 0, 0])  # enclosing order, as in sources/kineto/importer.py


def _kinds(cols: Columns) -> np.ndarray:
    comm_names = np.zeros(len(cols.names), dtype=bool)
    for i in np.unique(cols.gpu_name).tolist():
        comm_names[i] = is_communication(cols.names[i])
    kind = np.full(cols.gpu_cls.shape[0], Kind.COMPUTE, dtype=np.int8)
    kind[cols.gpu_cls == Cls.MEMSET] = Kind.MEMSET
    kind[(cols.gpu_cls == Cls.KERNEL) & comm_names[cols.gpu_name]] = Kind.COMM
    kind[cols.gpu_cls == Cls.MEMCPY] = Kind.MEMCPY
    return kind


def launches(cols: Columns, cpu_corr: np.ndarray, gpu_corr: np.ndarray) -> np.ndarray:
    """The launching CPU slice of each GPU activity: runtime calls first, then any other
    slice with the correlation id (MTIA, old layouts), -1 where none."""
    is_rt = cols.cpu_cls == Cls.RUNTIME
    first = correlate.link(gpu_corr, np.where(is_rt, cpu_corr, -1), cols.cpu_ts).launch
    rest = correlate.link(gpu_corr, np.where(is_rt, -1, cpu_corr), cols.cpu_ts).launch
    return np.where(first >= 0, first, rest)


def rank_of(meta: dict[str, Any]) -> str | None:
    """The rank of ``distributedInfo``, when the trace has one."""
    info = meta.get("distributedInfo")
    rank = info.get("rank") if isinstance(info, dict) else None
    if isinstance(rank, bool):
        return None
    if isinstance(rank, int) or (isinstance(rank, str) and rank.isdigit()):
        return str(rank)
    return None


def from_columns(
    cols: Columns,
    meta: dict[str, Any],
    path: str,
    correlation: tuple[np.ndarray, np.ndarray],
    nesting: correlate.Nesting | None = None,
    launch: np.ndarray | None = None,
) -> TraceData:
    """``correlation``: the (CPU, GPU) correlation id columns, flow arrows filled in;
    ``nesting``, ``launch``: the slices' nesting and the activities' launches where the
    caller has them (the flame graph's, computed the same way)."""
    if nesting is None:
        nesting = correlate.nest(cols.cpu_thread, cols.cpu_ts, cols.cpu_dur, _RANK[cols.cpu_cls])
    if launch is None:
        launch = launches(cols, *correlation)
    is_op = cols.cpu_cls == Cls.OP
    devices = meta.get("deviceProperties")
    if not isinstance(devices, list):
        devices = []
    shapes: dict[int, tuple[Any, Any]] = {}
    concrete: dict[int, Any] = {}
    if cols.cpu_shape is not None:
        for i in np.nonzero(cols.cpu_shape >= 0)[0].tolist():
            dims, types, given = cols.shapes[int(cols.cpu_shape[i])]
            shapes[i] = (dims, types)
            if given is not None:
                concrete[i] = given
    frees = _host_frees(cols)
    return TraceData(
        path=path,
        rank=rank_of(meta),
        gpu_ts=cols.gpu_ts,
        gpu_dur=cols.gpu_dur,
        gpu_kind=_kinds(cols),
        gpu_name=cols.gpu_name,
        gpu_device=cols.gpu_device,
        gpu_launch=launch,
        gpu_op=correlate.nearest_enclosing(nesting.parent, is_op, launch),
        cpu_ts=cols.cpu_ts,
        cpu_dur=cols.cpu_dur,
        cpu_name=cols.cpu_name,
        cpu_is_op=is_op,
        cpu_parent=nesting.parent,
        names=cols.names,
        format="kineto",
        op_shapes=shapes,
        device_info=[d for d in devices if isinstance(d, dict)],
        cpu_is_runtime=cols.cpu_cls == Cls.RUNTIME,
        cpu_thread=cols.cpu_thread,
        cpu_is_annotation=cols.cpu_cls == Cls.ANNOTATION,
        gpu_stream=cols.gpu_stream,
        gpu_bytes=cols.gpu_bytes,
        op_concrete=concrete,
        cpu_kernel=cols.cpu_kernel,
        host_free_ts=frees[0],
        host_free_thread=frees[1],
        host_free_bytes=frees[2],
    )


def _host_frees(cols: Columns) -> tuple[np.ndarray | None, ...]:
    """(time, thread, bytes) of the ``[memory]`` frees of host memory, when read."""
    m = cols.memory
    if m is None:
        return None, None, None
    cpu = np.array([n.startswith("cpu") for n in cols.names], dtype=bool)
    free = (m.nbytes < 0) & cpu[m.device] if m.device.size else np.zeros(0, dtype=bool)
    return m.ts[free], m.thread[free], -m.nbytes[free]
