"""Synchronisation stalls: where the CPU blocks waiting for the GPU, and what it costs.

The blocking calls are the runtime's synchronizing calls (:mod:`calls`). Each is charged to
its cause: the outermost enclosing operator of the ``.item()``/``.cpu()`` family
(``aten::item``, ``aten::_local_scalar_dense``, ``aten::nonzero``..., or a copy op such as
``aten::to``/``aten::copy_``: ``.cpu()``, or a copy from pageable host memory, which blocks
too), else the nearest enclosing operator,
else ``explicit synchronize`` (``torch.cuda.synchronize()`` called from Python). The GPU idle
a stall causes is the ``sync_wait`` idle of :mod:`idle`: the GPU ran dry while the CPU was
blocked, and stayed idle until the CPU launched again.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from aiflame.analysis.calls import COPY_OPS, SYNC_OPS, name_mask, sync_calls
from aiflame.analysis.idle import CATEGORIES, gap_table
from aiflame.analysis.stacks import top_stacks
from aiflame.analysis.trace import TraceData

EXPLICIT = "explicit synchronize"


def _cause(t: TraceData, call: int, blocking: np.ndarray) -> str:
    """The operator to blame for a blocking call (see the module docstring)."""
    found, nearest = None, None
    i = int(t.cpu_parent[call])
    while i >= 0:
        if t.cpu_is_op[i]:
            if nearest is None:
                nearest = i
            if blocking[t.cpu_name[i]]:
                found = i  # keep walking: the outermost one is what the user called
        i = int(t.cpu_parent[i])
    pick = found if found is not None else nearest
    return EXPLICIT if pick is None else t.names[int(t.cpu_name[pick])]


def sync_stalls(t: TraceData, gaps: dict[str, np.ndarray] | None = None) -> dict[str, Any] | None:
    """CPU time blocked on the GPU, by call and by cause, the GPU idle it caused, stacks."""
    calls = sync_calls(t)
    if calls.size == 0:
        return None
    g = gap_table(t) if gaps is None else gaps
    sync_gap = g["category"] == CATEGORIES.index("sync_wait")
    idle_after = dict.fromkeys(calls.tolist(), 0)
    for c, n in zip(g["culprit"][sync_gap].tolist(), g["length"][sync_gap].tolist(), strict=True):
        idle_after[c] = idle_after.get(c, 0) + n
    blocking = name_mask(t, lambda n: n in SYNC_OPS or n in COPY_OPS)
    by_call: dict[str, dict[str, Any]] = {}
    by_cause: dict[str, dict[str, Any]] = {}
    for c in calls.tolist():
        blocked = int(t.cpu_dur[c])
        name = t.names[int(t.cpu_name[c])]
        for table, key in ((by_call, name), (by_cause, _cause(t, c, blocking))):
            e = table.setdefault(key, {"count": 0, "blocked_us": 0.0, "gpu_idle_after_us": 0.0})
            e["count"] += 1
            e["blocked_us"] += blocked / 1e3
            e["gpu_idle_after_us"] += idle_after[c] / 1e3
    blocked_ns = t.cpu_dur[calls].astype(np.float64)
    return {
        "calls": int(calls.size),
        "blocked_us": float(blocked_ns.sum()) / 1e3,
        "gpu_idle_after_us": float(g["length"][sync_gap].sum()) / 1e3,
        "by_call": by_call,
        "by_cause": dict(sorted(by_cause.items(), key=lambda kv: -kv[1]["blocked_us"])),
        "top_stacks": top_stacks(t, calls, blocked_ns, key="blocked_us"),
    }
