"""The ``gpu-idle`` metric of GPU trace sources: what keeps the GPU waiting, as a flame graph.

Every nanosecond the GPU idles between its first and last activity (the time breakdown's
``idle``: the span less the union of all activity, over the trace's devices together) is
charged to the CPU stack responsible, as :func:`aiflame.transforms.gpu_idle.charge` splits
the gaps and ``aiflame analyze`` explains them: the launching thread's stack at the time
(a synchronizing call, a copy, data loading, Python, a launch, initialization), so the widest
towers are what keeps the GPU waiting and the total equals the idle time. Gaps the CPU did
not cause hang under their launch call with a label (``[GPU idle: launch latency]``,
``[GPU idle: waiting on a dependency]``); idle no CPU slice explains is under one root,
``[GPU idle: unexplained]``, with the reason below it.

A source calls :func:`add_gpu_idle` with its builder, the trace's columns and the stack id
of each CPU slice in its own flame graph (so the idle hangs on the very frames of the
``wall-time`` and ``gpu-time`` views); :func:`slice_stacks` builds those from the slices'
names for sources whose stacks are not per slice.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

from aiflame.model import FrameKind, ProfileBuilder, SampleType
from aiflame.model.stacks import EMPTY_STACK
from aiflame.model.trace import TraceData
from aiflame.transforms.gpu_idle import (
    P_DEPENDENCY,
    P_LATENCY,
    P_UNTRACED,
    charge,
    gap_table,
)

GPU_IDLE = SampleType("gpu-idle", "nanoseconds")
_VERSION = re.compile(r"_v\d+$")
UNEXPLAINED = "[GPU idle: unexplained]"
NO_SLICE = "[no CPU slice open on the launching thread]"
OUTSIDE = "[launch of the next work not in the trace]"
LATENCY = "[GPU idle: launch latency]"
DEPENDENCY = "[GPU idle: waiting on a dependency]"


def add_gpu_idle(
    builder: ProfileBuilder,
    column: int,
    t: TraceData,
    slice_stack: np.ndarray,
    labels_of: Callable[[np.ndarray], np.ndarray],
    timestamps: bool = False,
) -> float:
    """Add the ``gpu-idle`` samples of ``t`` into ``column`` of ``builder``'s sample types;
    returns the idle ns added (the timeline's idle time).

    ``slice_stack``: the stack id of each CPU slice of ``t``; ``labels_of(threads)``: label
    set ids for CPU thread ids of ``t`` (-1: no thread); ``timestamps``: for a profile with
    sample times, one sample per charged part at its gap's start (else one per stack)."""
    if t.gpu_ts.size < 2:
        return 0.0
    g = gap_table(t)
    c = charge(t, g)
    if c.ns.size == 0:
        return 0.0
    sl = c.slice
    has = sl >= 0
    base = np.where(has, slice_stack[np.maximum(sl, 0)] if slice_stack.size else EMPTY_STACK, -1)
    child = builder.stacks.child
    for part, name in ((P_LATENCY, LATENCY), (P_DEPENDENCY, DEPENDENCY)):
        m = (c.part == part) & has
        if np.any(m):
            label = builder.frame(name, FrameKind.LABEL)
            base[m] = [child(int(s), label) for s in base[m].tolist()]
    untraced = (c.part == P_UNTRACED) & (base < 0)
    outside = (base < 0) & ~untraced  # unlinked gaps: the next work's launch is not traced
    if np.any(base < 0):
        root = child(EMPTY_STACK, builder.frame(UNEXPLAINED, FrameKind.LABEL))
        for m, name in ((untraced, NO_SLICE), (outside, OUTSIDE)):
            if np.any(m):
                base[m] = child(root, builder.frame(name, FrameKind.LABEL))
    thread = np.where(has, t.threads()[np.maximum(sl, 0)] if t.cpu_ts.size else -1, -1)
    thread = np.where(c.part == P_UNTRACED, g.thread[c.gap], thread)
    lab = labels_of(thread)
    if timestamps:  # one sample per part, at its gap's start
        values = np.zeros((c.ns.size, len(builder.sample_types)))
        values[:, column] = c.ns
        builder.add_many(base, values, lab, g.start[c.gap])
        return float(c.ns.sum())
    key = np.stack([base, lab], axis=1)
    uniq, inverse = np.unique(key, axis=0, return_inverse=True)
    ns = np.bincount(inverse.reshape(-1), weights=c.ns, minlength=uniq.shape[0])
    values = np.zeros((uniq.shape[0], len(builder.sample_types)))
    values[:, column] = ns
    builder.add_many(uniq[:, 0], values, uniq[:, 1])
    return float(c.ns.sum())


def slice_stacks(
    builder: ProfileBuilder, t: TraceData, frame_of: Callable[[int], int] | None = None
) -> np.ndarray:
    """A stack id for each CPU slice of ``t``: its enclosing slices' frames, then its own.

    ``frame_of(i)``: the frame of slice ``i`` (default: the frame of the builder with the
    slice's name, where the source's flame graph made one, else a runtime frame for a
    runtime call and a label for the rest)."""
    n = t.cpu_ts.size
    out = np.full(n, EMPTY_STACK, dtype=np.int64)
    if n == 0:
        return out
    if frame_of is None:
        frame_of = _by_name(builder, t)
    from aiflame.transforms.gpu_idle import slice_depths

    order = np.argsort(slice_depths(t), kind="stable")  # parents before their children
    child = builder.stacks.child
    parent = t.cpu_parent
    for i in order.tolist():
        p = int(parent[i])
        out[i] = child(int(out[p]) if p >= 0 else EMPTY_STACK, frame_of(i))
    return out


def _by_name(builder: ProfileBuilder, t: TraceData) -> Callable[[int], int]:
    existing: dict[str, int] = {}
    frames = builder.frames
    for fid in range(len(frames)):
        existing.setdefault(frames.name_of(fid), fid)
    for fid in range(len(frames)):  # an API call as nsys names it: cudaLaunchKernel_v7000
        existing.setdefault(_VERSION.sub("", frames.name_of(fid)), fid)
    runtime = t.cpu_is_runtime
    made: dict[tuple[int, bool], int] = {}

    def frame_of(i: int) -> int:
        name_id = int(t.cpu_name[i])
        rt = bool(runtime[i]) if runtime is not None else False
        key = (name_id, rt)
        fid = made.get(key)
        if fid is None:
            name = t.names[name_id]
            fid = existing.get(name)
            if fid is None:
                fid = builder.frame(name, FrameKind.RUNTIME if rt else FrameKind.LABEL)
            made[key] = fid
        return fid

    return frame_of
