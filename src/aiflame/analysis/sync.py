"""Synchronisation stalls: where the CPU blocks waiting for the GPU, and what it costs.

The blocking calls are the runtime's synchronizing calls and the copy calls that block by
what they copy (downloads into pageable memory, even with ``cudaMemcpyAsync``: :mod:`calls`);
``by_copy`` says which copies they wait on (``download``, ``upload``, ``device copy``, ``no
copy``). Each is charged to
its cause: the outermost enclosing operator of the ``.item()``/``.cpu()`` family
(``aten::item``, ``aten::_local_scalar_dense``, ``aten::nonzero``..., or a copy op such as
``aten::to``/``aten::copy_``: ``.cpu()``, or a copy from pageable host memory, which blocks
too), else the nearest enclosing operator,
else ``explicit synchronize`` (``torch.cuda.synchronize()`` called from Python).

``gpu_idle_after_us`` is the ``sync_wait`` idle of :mod:`idle`: the gaps that began while the
call blocked. Not all of it is the call's doing: what the CPU did after the call returned
kept the GPU idle too. ``gpu_idle_caused_us`` is the call's share (:mod:`causes`): at most
the time it blocked before the GPU ran dry, which the CPU could have spent preparing the
next work. ``gpu_idle_inside_us`` is the GPU idle *while* the calls blocked: a call that
blocks with no GPU work in flight waits on something the trace does not show (work of
another process or stream on the device, or submitted before the trace began).
"""

from __future__ import annotations

import numpy as np

from aiflame.analysis.calls import (
    COPY_OPS,
    SYNC_OPS,
    blocking_copy_calls,
    is_sync_call,
    name_mask,
    sync_calls,
)
from aiflame.analysis.causes import INDEX, Explained
from aiflame.analysis.idle import SYNC, Gaps
from aiflame.analysis.schema import Sync, SyncStat
from aiflame.analysis.stacks import top_stacks
from aiflame.analysis.timeline import covered
from aiflame.model.trace import Kind, TraceData
from aiflame.transforms.correlate import nearest_marked, outermost_marked

EXPLICIT = "explicit synchronize"
# What a blocking call waits on, by the copy it issued or its operator issued.
DIRECTIONS = {"DtoH": "download", "HtoD": "upload", "DtoD": "device copy", "PtoP": "device copy"}
NO_COPY = "no copy"
TO_PAGEABLE = " (to pageable memory)"  # a copy call that blocks by its target, not its name


def copy_directions(t: TraceData, calls: np.ndarray) -> list[str]:
    """Per blocking call: ``download``, ``upload``, ``device copy`` (the copy it issued,
    else one its nearest enclosing operator issued: the ``cudaStreamSynchronize`` after
    ``torch.tensor(..., device=...)``'s upload), or ``no copy``."""
    copies = np.nonzero(t.gpu_kind == Kind.MEMCPY)[0]
    own: dict[int, str] = {}
    by_op: dict[int, str] = {}
    for j in copies.tolist():
        name = t.names[int(t.gpu_name[j])]
        word = next((w for k, w in DIRECTIONS.items() if f"Memcpy {k}" in name), None)
        if word is None:
            continue
        if t.gpu_launch[j] >= 0:
            own.setdefault(int(t.gpu_launch[j]), word)
        if t.gpu_op[j] >= 0:
            by_op.setdefault(int(t.gpu_op[j]), word)
    out = []
    for c in calls.tolist():
        found = own.get(c)
        i = int(t.cpu_parent[c])
        while found is None and i >= 0:
            if t.cpu_is_op[i]:
                found = by_op.get(i)
                break
            i = int(t.cpu_parent[i])
        out.append(found or NO_COPY)
    return out


def _causes(t: TraceData, calls: np.ndarray, blocking: np.ndarray) -> list[str]:
    """The operator to blame for each blocking call (see the module docstring); found for
    every slice at once, so deep nesting costs no walk per call."""
    op = t.cpu_is_op.astype(bool)
    outer = outermost_marked(t.cpu_parent, op & blocking[t.cpu_name])
    nearest = nearest_marked(t.cpu_parent, op)
    up = t.cpu_parent[calls]
    has = up >= 0
    found = np.where(has, outer[np.maximum(up, 0)], -1)
    near = np.where(has, nearest[np.maximum(up, 0)], -1)
    pick = np.where(found >= 0, found, near)
    return [EXPLICIT if k < 0 else t.names[int(t.cpu_name[k])] for k in pick.tolist()]


def sync_stalls(t: TraceData, g: Gaps, e: Explained) -> Sync | None:
    """CPU time blocked on the GPU, by call and by cause, the GPU idle after and caused."""
    calls = sync_calls(t)
    if calls.size == 0:
        return None
    after = np.zeros(t.cpu_ts.size, dtype=np.float64)
    sync_gap = g.category == SYNC
    np.add.at(after, g.sync_call[sync_gap], g.length[sync_gap])
    caused = np.zeros(t.cpu_ts.size, dtype=np.float64)
    mine = (e.cause == INDEX["sync"]) & (e.slice >= 0)
    np.add.at(caused, e.slice[mine], e.ns[mine])
    blocking = name_mask(t, lambda n: n in SYNC_OPS or n in COPY_OPS)
    by_call: dict[str, list[float]] = {}
    by_cause: dict[str, list[float]] = {}
    by_copy: dict[str, list[float]] = {}
    by_name = set(blocking_copy_calls(t).tolist())
    directions = copy_directions(t, calls)
    causes = _causes(t, calls, blocking)
    for c, direction, cause in zip(calls.tolist(), directions, causes, strict=True):
        row = (1, float(t.cpu_dur[c]), float(after[c]), float(caused[c]))
        name = t.names[int(t.cpu_name[c])]
        if c in by_name and not is_sync_call(name):
            name += TO_PAGEABLE
        keys = ((by_call, name), (by_cause, cause), (by_copy, direction))
        for table, key in keys:
            acc = table.setdefault(key, [0, 0.0, 0.0, 0.0])
            for k, v in enumerate(row):
                acc[k] += v
    blocked_ns = t.cpu_dur[calls].astype(np.float64)
    inside = covered(t.cpu_ts[calls], t.cpu_dur[calls], g.start, g.length)
    return Sync(
        calls=int(calls.size),
        blocked_us=float(blocked_ns.sum()) / 1e3,
        gpu_idle_after_us=float(g.length[sync_gap].sum()) / 1e3,
        gpu_idle_caused_us=float(caused[calls].sum()) / 1e3,
        gpu_idle_inside_us=float(inside.sum()) / 1e3,
        by_call={k: _stat(v) for k, v in by_call.items()},
        by_cause={k: _stat(v) for k, v in sorted(by_cause.items(), key=lambda kv: -kv[1][1])},
        by_copy={k: _stat(v) for k, v in sorted(by_copy.items(), key=lambda kv: -kv[1][1])},
        top_stacks=top_stacks(t, calls, blocked_ns),
    )


def _stat(acc: list[float]) -> SyncStat:
    return SyncStat(
        count=int(acc[0]),
        blocked_us=acc[1] / 1e3,
        gpu_idle_after_us=acc[2] / 1e3,
        gpu_idle_caused_us=acc[3] / 1e3,
    )
