"""Which CPU calls block on the GPU, by name (CUDA runtime/driver, HIP, MTIA, aten ops)."""

from __future__ import annotations

import re

import numpy as np

from aiflame.analysis.trace import TraceData

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


def name_mask(t: TraceData, pred) -> np.ndarray:  # type: ignore[no-untyped-def]
    """Per name index: ``pred(name)``."""
    return np.fromiter((bool(pred(n)) for n in t.names), dtype=bool, count=len(t.names))


def sync_calls(t: TraceData) -> np.ndarray:
    """Ids of the runtime calls that block the host on the GPU."""
    if t.cpu_is_runtime is None or t.cpu_ts.size == 0:
        return np.zeros(0, dtype=np.int64)
    return np.nonzero(t.cpu_is_runtime & name_mask(t, is_sync_call)[t.cpu_name])[0]
