"""Why the GPU is idle: every gap of the GPU timeline classified, and explained by what the
CPU did during it.

A gap runs from the moment all earlier GPU activity has finished to the start of the next
activity; the gaps sum to the time breakdown's ``idle``. Each gap is put in one category by
looking at the launch call of the activity that ends it (HTA's test, on the whole GPU
rather than per stream) and at what the launching thread was doing when the GPU ran dry:

- ``host_wait``: the launch call began only after the GPU ran dry: the CPU was too slow to
  queue work (Python overhead, data loading, preprocessing, many small launches).
- ``sync_wait``: as ``host_wait``, but the launching thread was blocked in a synchronizing
  call (device/stream/event synchronize, synchronous memcpy: ``.item()``, ``.cpu()``) when
  the GPU ran dry: the CPU waited for the GPU, then the GPU waited for the CPU.
- ``kernel_wait``: the work was queued before the GPU ran dry and started less than
  ``KERNEL_WAIT_US`` later: the GPU's own launch latency between back-to-back kernels.
- ``event_wait``: queued before the GPU ran dry, yet started ``KERNEL_WAIT_US`` or more later:
  it waited on a dependency (an event from another stream or from the host, a peer).
- ``unlinked``: the launch of the next activity is not in the trace.

HTA's categories are host_wait = ``host_wait`` + ``sync_wait``, kernel_wait =
``kernel_wait``, other = ``event_wait`` + ``unlinked`` (HTA classifies gaps per stream;
:mod:`hta_compat` does that). What the CPU did during the host and sync waits, time-weighted
over each gap, is :mod:`causes`' account (``Idle.causes``). The gaps themselves are found
by :mod:`aiflame.transforms.gpu_idle`, which the ``gpu-idle`` flame graphs share.
"""

from __future__ import annotations

import numpy as np

from aiflame.analysis.schema import HtaIdle, Idle, IdleCategory, IdleSummary, Stack
from aiflame.analysis.stacks import top_stacks
from aiflame.model.trace import TraceData
from aiflame.transforms.gpu_idle import (
    CATEGORIES,
    EVENT,
    HOST,
    KERNEL,
    SYNC,
    UNLINKED,
    Gaps,
    gap_table,
)

__all__ = ["CATEGORIES", "EVENT", "HOST", "KERNEL", "SYNC", "UNLINKED", "Gaps", "gap_table"]


def classify(
    t: TraceData, g: Gaps, stacks: dict[str, list[Stack]], causes: list, kernel_wait_us: float
) -> Idle:
    """Idle time by category (us), gap counts; ``stacks``: the top stacks of each category
    (host and sync waits: what the CPU ran during them); ``causes``: :mod:`causes`' rows."""
    total = int(g.length.sum())
    cats: dict[str, IdleCategory] = {}
    for k, name in enumerate(CATEGORIES):
        m = g.category == k
        ns = int(g.length[m].sum())
        cats[name] = IdleCategory(
            time_us=ns / 1e3, gaps=int(np.count_nonzero(m)), share=ns / total if total else 0.0
        )
    for k in (KERNEL, EVENT):  # what was waiting: the launch of the next activity
        m = g.category == k
        if np.any(m):
            launch = t.gpu_launch[g.next[m]]
            stacks[CATEGORIES[k]] = top_stacks(t, launch, g.length[m].astype(np.float64))
    us = {k: v.time_us for k, v in cats.items()}
    return Idle(
        total_us=total / 1e3,
        gaps=int(g.length.size),
        kernel_wait_threshold_us=kernel_wait_us,
        categories=cats,
        summary=IdleSummary(
            waiting_on_host_us=us["host_wait"],
            waiting_on_dependency_us=us["sync_wait"] + us["event_wait"],
            other_us=us["kernel_wait"] + us["unlinked"],
        ),
        hta_categories=HtaIdle(
            host_wait_us=us["host_wait"] + us["sync_wait"],
            kernel_wait_us=us["kernel_wait"],
            other_us=us["event_wait"] + us["unlinked"],
        ),
        top_stacks={k: v for k, v in stacks.items() if v},
        causes=causes,
    )
