"""Which CPU calls block on the GPU, by name (CUDA runtime/driver, HIP, MTIA, aten ops)."""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

from aiflame.model.trace import Kind, TraceData

# Runtime/driver calls that return only when the GPU has done the work they wait for.
# cudaMemcpy (no Async) and its driver/HIP kin are synchronous with respect to the host.
_SYNC_CALL = re.compile(
    r"^(cuda|hip)(DeviceSynchronize|StreamSynchronize|EventSynchronize|ThreadSynchronize"
    r"|Memcpy|Memcpy2D|Memcpy3D|MemcpyDtoH|MemcpyHtoD|MemcpyWithStream"
    r"|MemcpyFromSymbol|MemcpyToSymbol)$"
    r"|^cu(CtxSynchronize|StreamSynchronize|EventSynchronize|Memcpy|MemcpyDtoH(_v2)?"
    r"|MemcpyHtoD(_v2)?)$"
    r"|^synchronize(Stream)?$"  # MTIA
)

# Operators that make the host wait for a GPU value (the ``.item()``/``.cpu()`` family), and
# the copy ops, which block when they copy to the host or from pageable host memory; they are
# the cause named for a blocking call found inside them.
SYNC_OPS = frozenset(
    {
        "aten::item",
        "aten::_local_scalar_dense",
        "aten::is_nonzero",
        "aten::nonzero",
        "aten::masked_select",
        "aten::unique",
        "aten::_unique2",
        "aten::equal",
    }
)
COPY_OPS = frozenset({"aten::to", "aten::_to_copy", "aten::copy_", "aten::cpu", "aten::clone"})


def is_sync_call(name: str) -> bool:
    return _SYNC_CALL.match(name) is not None


def name_mask(
    t: TraceData, pred: Callable[[str], object], used: np.ndarray | None = None
) -> np.ndarray:
    """Per name index: ``pred(name)``; with ``used`` (name ids), asked of those names only
    (the others are False)."""
    if used is None:
        return np.fromiter((bool(pred(n)) for n in t.names), dtype=bool, count=len(t.names))
    out = np.zeros(len(t.names), dtype=bool)
    ids = np.unique(used)
    names = t.names
    out[ids] = np.fromiter((bool(pred(names[i])) for i in ids.tolist()), bool, ids.size)
    return out


# A copy from the device into pageable host memory: the driver copies through a pinned
# buffer and returns only when the copy is done, whatever the call (cudaMemcpyAsync too).
_TO_PAGEABLE = re.compile(r"Memcpy\s+DtoH\s*\(\s*\w+\s*->\s*Pageable\s*\)")


def blocking_copy_calls(t: TraceData) -> np.ndarray:
    """Launch calls of copies that block the host whatever their name: downloads into
    pageable memory (``cudaMemcpyAsync`` of ``.tolist()``, ``.cpu()``: it returns when the
    copy, and all the work queued before it, is done)."""
    if t.cpu_ts.size == 0 or t.gpu_ts.size == 0:
        return np.zeros(0, dtype=np.int64)
    copies = t.gpu_kind == Kind.MEMCPY
    pageable = copies & name_mask(t, _TO_PAGEABLE.search, t.gpu_name[copies])[t.gpu_name]
    launch = t.gpu_launch[pageable]
    return np.unique(launch[launch >= 0])


def sync_calls(t: TraceData) -> np.ndarray:
    """Ids of the runtime calls that block the host on the GPU (on this trace's timeline:
    not those of an attached capture): synchronizing calls by name, and the launch calls
    of downloads into pageable memory."""
    if t.cpu_is_runtime is None or t.cpu_ts.size == 0:
        return np.zeros(0, dtype=np.int64)
    runtime = t.cpu_name[t.cpu_is_runtime]
    calls = np.nonzero(t.cpu_is_runtime & name_mask(t, is_sync_call, runtime)[t.cpu_name])[0]
    calls = np.union1d(calls, blocking_copy_calls(t))
    return calls[calls < t.own_slices()]


def op_calls(t: TraceData, op: np.ndarray) -> np.ndarray:
    """Per GPU activity, an id of the operator *call* it belongs to (``op``: its operator
    slice, -1: none, which stays -1).

    An operator slice is one call. A captured operator that graph replays run (its
    activities' ``gpu_origin`` points into the capture) is one call per replay: N launches
    of the graph run it N times, each with its FLOPs, so the activity is keyed by (operator,
    the replay's graph launch)."""
    ids = op.astype(np.int64).copy()
    if t.gpu_origin is None:
        return ids
    replayed = (t.gpu_origin >= 0) & (op >= 0) & (t.gpu_launch >= 0)
    base = np.int64(t.cpu_ts.size + 1)
    ids[replayed] = base + op[replayed] * base + t.gpu_launch[replayed]
    return ids
