"""Memory traffic: copies by direction and memory kind, small copies, copies in the step loop.

Kineto names copies ``Memcpy HtoD (Pageable -> Device)``: the direction, then the source and
destination memory. Pageable host memory cannot be copied asynchronously (the driver stages
it through a pinned buffer). Bytes come from the copy's ``bytes`` argument where the trace
has it. A copy is *small* under ``SMALL_COPY_BYTES``: each costs a launch and a fixed
latency, so many of them should be one batched copy. A copy is *in the step loop* when the
call that issued it lies inside a ``ProfilerStep#N`` annotation.
"""

from __future__ import annotations

import re

import numpy as np

from aiflame.analysis.calls import name_mask
from aiflame.analysis.schema import CopyKind, MemoryTraffic, SmallCopies, StepLoopCopies
from aiflame.analysis.stacks import top_stacks
from aiflame.analysis.timeline import covered
from aiflame.model.trace import Kind, TraceData
from aiflame.transforms.correlate import nearest_enclosing

SMALL_COPY_BYTES = 64 * 1024
_NAME = re.compile(r"Memcpy\s+(\w+)(?:\s*\((\w+)\s*->\s*(\w+)\))?")


def parse(name: str) -> tuple[str, str | None, str | None]:
    """(direction, source memory, destination memory) of a copy's name."""
    m = _NAME.search(name)
    if m is None:
        return "unknown", None, None
    return m.group(1), m.group(2), m.group(3)


def copies(t: TraceData) -> np.ndarray:
    return np.nonzero(t.gpu_kind == Kind.MEMCPY)[0]


def is_pageable_htod(name: str) -> bool:
    d, src, _ = parse(name)
    return d == "HtoD" and src == "Pageable"


def step_of(t: TraceData, calls: np.ndarray) -> np.ndarray:
    """Per CPU slice in ``calls``: the ProfilerStep annotation enclosing it, or -1."""
    if calls.size == 0 or t.cpu_ts.size == 0:
        return np.full(calls.size, -1, dtype=np.int64)
    # a user annotation since 2022, an ``Operator`` in the 2021 layout: by name
    steps = name_mask(t, lambda n: n.startswith("ProfilerStep#"))[t.cpu_name]
    return nearest_enclosing(t.cpu_parent, steps, calls)


def exposed(t: TraceData, idx: np.ndarray) -> np.ndarray:
    """Per activity in ``idx``: its ns that no kernel (compute or collective) overlaps."""
    kernels = (t.gpu_kind == Kind.COMPUTE) | (t.gpu_kind == Kind.COMM)
    return t.gpu_dur[idx] - covered(
        t.gpu_ts[idx], t.gpu_dur[idx], t.gpu_ts[kernels], t.gpu_dur[kernels]
    )


def memory_traffic(t: TraceData) -> MemoryTraffic | None:
    """Copy table by kind, small copies and copies inside steps; None without copies."""
    idx = copies(t)
    if idx.size == 0:
        return None
    names = np.array(t.names, dtype=object)[t.gpu_name[idx]]
    launch = t.gpu_launch[idx]
    cpu_ns = np.where(launch >= 0, t.cpu_dur[np.maximum(launch, 0)], 0) if t.cpu_ts.size else 0
    cpu_ns = np.broadcast_to(cpu_ns, idx.shape)
    nbytes = t.gpu_bytes[idx] if t.gpu_bytes is not None else np.full(idx.size, -1)
    bare = exposed(t, idx)
    by_kind = []
    for name in np.unique(names).tolist():
        m = names == name
        direction, src, dst = parse(name)
        b = nbytes[m]
        known = bool(np.all(b >= 0))
        gpu_ns = int(t.gpu_dur[idx[m]].sum())
        by_kind.append(
            CopyKind(
                name=name, direction=direction, src=src, dst=dst, count=int(m.sum()),
                bytes=int(b.sum()) if known else None, gpu_time_us=gpu_ns / 1e3,
                exposed_us=float(bare[m].sum()) / 1e3,
                launch_cpu_time_us=float(cpu_ns[m].sum()) / 1e3,
                gb_per_s=int(b.sum()) / gpu_ns if known and gpu_ns else None,
            )
        )  # fmt: skip
    by_kind.sort(key=lambda r: -r.gpu_time_us)
    small = (nbytes >= 0) & (nbytes < SMALL_COPY_BYTES)
    step = step_of(t, launch)
    in_step = step >= 0
    loop = None
    if np.any(in_step):
        per_step = np.unique(step[in_step], return_counts=True)[1]
        htod = np.array([parse(n)[0] == "HtoD" for n in names.tolist()], dtype=bool)
        loop = StepLoopCopies(
            steps=int(per_step.size),
            copies=int(in_step.sum()),
            copies_per_step_median=float(np.median(per_step)),
            htod_copies=int((in_step & htod).sum()),
            htod_bytes=int(nbytes[in_step & htod & (nbytes >= 0)].sum()),
            gpu_time_us=float(t.gpu_dur[idx[in_step]].sum()) / 1e3,
            top_stacks=top_stacks(t, launch[in_step], cpu_ns[in_step].astype(np.float64)),
        )
    return MemoryTraffic(
        copies=int(idx.size),
        bytes_known=bool(np.all(nbytes >= 0)),
        by_kind=by_kind,
        small_copies=SmallCopies(
            threshold_bytes=SMALL_COPY_BYTES,
            count=int(small.sum()),
            bytes=int(nbytes[small].sum()),
            gpu_time_us=float(t.gpu_dur[idx[small]].sum()) / 1e3,
            exposed_us=float(bare[small].sum()) / 1e3,
            launch_cpu_time_us=float(cpu_ns[small].sum()) / 1e3,
            top_stacks=top_stacks(t, launch[small], cpu_ns[small].astype(np.float64)),
        ),
        in_step_loop=loop,
    )
