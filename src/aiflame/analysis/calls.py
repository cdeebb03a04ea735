"""Which CPU calls block on the GPU, by name (CUDA runtime/driver, HIP, MTIA, aten ops)."""

from __future__ import annotations

import numpy as np

from aiflame.model.trace import TraceData
from aiflame.transforms.gpu_idle import blocking_copy_calls, is_sync_call, name_mask, sync_calls

__all__ = [
    "COPY_OPS",
    "SYNC_OPS",
    "blocking_copy_calls",
    "is_sync_call",
    "name_mask",
    "op_calls",
    "sync_calls",
]

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
