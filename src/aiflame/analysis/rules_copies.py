"""Rules for memory copies: uploads from pageable memory, and many small copies.

A copy costs the GPU timeline its exposed time (when no kernel runs beside it) and the idle
time while the CPU sat in the copy call (:mod:`causes`' ``copy``). Each copy is one rule's:
pageable uploads first, then small copies (not downloads); the idle of downloads and other
synchronous copies (``.cpu()``, ``.item()``) is ``sync_stalls``'.
"""

from __future__ import annotations

import re

import numpy as np

from aiflame.analysis import memcpy
from aiflame.analysis.calls import name_mask
from aiflame.analysis.causes import INDEX
from aiflame.analysis.rule_context import PIN_MEMORY_FIX_KEY, Context, Draft, count, us, worth
from aiflame.analysis.schema import Figure, FlameView
from aiflame.analysis.stacks import top_stacks
from aiflame.analysis.words import duration
from aiflame.analysis.workload import pick

SMALL_COPIES_MIN = 20  # many_small_copies: at least this many
# Copy kinds, the larger first when one call issued several.
_PAGEABLE, _SYNCHRONOUS, _SMALL, _OTHER = 3, 2, 1, 0
# Copy calls that return only when the copy is done (no Async in the name).
_SYNC_COPY_CALL = re.compile(r"^(cuda|hip)Memcpy(2D|3D)?(WithStream)?$|^cuMemcpy(?!.*Async)")


def _copy_kinds(c: Context) -> tuple[np.ndarray, np.ndarray]:
    """(copy activities, their kind: pageable upload / synchronous / small / other)."""
    t = c.t
    idx = memcpy.copies(t)
    used = t.gpu_name[idx]
    pageable = name_mask(t, memcpy.is_pageable_htod, used)
    kind = np.full(idx.size, _OTHER, dtype=np.int8)
    nbytes = t.gpu_bytes[idx] if t.gpu_bytes is not None else np.full(idx.size, -1)
    kind[(nbytes >= 0) & (nbytes < memcpy.SMALL_COPY_BYTES)] = _SMALL
    # Downloads synchronize the host (.cpu(), .item()), as do copy calls without Async:
    # they are sync_stalls', any size.
    download = name_mask(t, lambda n: memcpy.parse(n)[0] == "DtoH", used)[used]
    launch = t.gpu_launch[idx]
    if t.cpu_ts.size:
        call = t.cpu_name[np.maximum(launch, 0)]
        blocking = name_mask(t, _SYNC_COPY_CALL.search, call)[call] & (launch >= 0)
        download |= blocking
    kind[download] = _SYNCHRONOUS
    kind[pageable[used]] = _PAGEABLE
    return idx, kind


def _split(c: Context) -> dict[str, float]:
    idx, kind = _copy_kinds(c)
    t, e = c.t, c.explained
    of_call = np.full(t.cpu_ts.size, _OTHER, dtype=np.int8)
    launch = t.gpu_launch[idx]
    ok = launch >= 0
    np.maximum.at(of_call, launch[ok], kind[ok])
    m = (e.cause == INDEX["copy"]) & (e.slice >= 0)
    k = of_call[e.slice[m]]
    ns = e.ns[m]
    untied = float(e.ns[(e.cause == INDEX["copy"]) & (e.slice < 0)].sum())
    return {
        "pageable": float(ns[k == _PAGEABLE].sum()),
        "synchronous": float(ns[k == _SYNCHRONOUS].sum()),
        "small": float(ns[k == _SMALL].sum()),
        "other": float(ns[k == _OTHER].sum()) + untied,
    }


def copy_parts(c: Context, kind: str) -> np.ndarray:
    """Mask of the parts of ``c.explained`` charged to copy calls of this kind
    (``pageable``, ``synchronous``, ``small``, ``other``)."""
    idx, kinds = _copy_kinds(c)
    t, e = c.t, c.explained
    of_call = np.full(t.cpu_ts.size, _OTHER, dtype=np.int8)
    launch = t.gpu_launch[idx]
    ok = launch >= 0
    np.maximum.at(of_call, launch[ok], kinds[ok])
    want = {"pageable": _PAGEABLE, "synchronous": _SYNCHRONOUS, "small": _SMALL}.get(kind, _OTHER)
    m = (e.cause == INDEX["copy"]) & (e.slice >= 0)
    out = np.zeros(e.gap.size, dtype=bool)
    out[m] = of_call[e.slice[m]] == want
    return out


def copy_idle(c: Context) -> dict[str, float]:
    """Idle ns of copy calls by what they copied: ``pageable`` uploads, ``synchronous``
    copies (downloads, calls without Async), ``small`` ones and ``other`` (asynchronous)."""
    found: dict[str, float] | None = c.__dict__.get("_copy_idle")
    if found is None:
        found = c.__dict__["_copy_idle"] = _split(c)
    return found


def synchronous_directions(c: Context) -> dict[str, float]:
    """GPU time of the synchronous copies (downloads, copy calls without Async) by
    direction: ``download``, ``upload``, ``device copy``."""
    idx, kind = _copy_kinds(c)
    mine = idx[kind == _SYNCHRONOUS]
    out: dict[str, float] = {}
    words = {"DtoH": "download", "HtoD": "upload", "DtoD": "device copy"}
    for j in mine.tolist():
        word = words.get(memcpy.parse(c.t.names[int(c.t.gpu_name[j])])[0])
        if word is not None:
            out[word] = out.get(word, 0.0) + float(c.t.gpu_dur[j])
    return out


def _copy_draft(c: Context, which: int) -> tuple[np.ndarray, float, float] | None:
    idx, kind = _copy_kinds(c)
    mine = idx[kind == which]
    if mine.size == 0:
        return None
    exposed = float(memcpy.exposed(c.t, mine).sum())
    key = "pageable" if which == _PAGEABLE else "small"
    return mine, exposed, copy_idle(c)[key]


_PAGEABLE_FIXES = {
    "default": "pin the host memory (DataLoader(pin_memory=True) or tensor.pin_memory()) and "
    "copy with .to(device, non_blocking=True) ahead of use (prefetch the next batch)",
    "app": "allocate the host buffers with cudaMallocHost/hipHostMalloc (or register them "
    "with cudaHostRegister) and copy with cudaMemcpyAsync on a stream, so copies overlap "
    "kernels",
}


def pageable_copies(c: Context) -> Draft | None:
    """Host-to-device copies from pageable (not pinned) memory.

    Pattern: ``Memcpy HtoD (Pageable -> Device)``: the driver stages the data through a
    pinned buffer, the copy cannot overlap with the CPU and ``non_blocking=True`` has no
    effect. Cost: the copies' exposed time (pinned, asynchronous copies issued early overlap
    with kernels) plus the idle while the CPU sat in their copy calls.
    """
    found = _copy_draft(c, _PAGEABLE)
    if found is None:
        return None
    mine, exposed, idle_ns = found
    cost = exposed + idle_ns
    if not worth(c, cost):
        return None
    t = c.t
    nbytes = t.gpu_bytes[mine] if t.gpu_bytes is not None else np.full(mine.size, -1)
    launched = t.gpu_launch[mine]
    launched = launched[launched >= 0]
    gpu_ns = float(t.gpu_dur[mine].sum())
    return Draft(
        rule="pageable_copies",
        title="host-to-device copies from pageable memory",
        parts={"exposed_memcpy": exposed, "idle": idle_ns},
        summary=(
            f"{mine.size:,} uploads from pageable memory take {duration(gpu_ns)} on the GPU, "
            f"{duration(exposed)} of it with no kernel beside them, and leave the GPU idle "
            f"{duration(idle_ns)} while the CPU stages them."
        ),
        assumption="assumes pinned, asynchronous copies issued ahead of use overlap with "
        "kernels: wins their exposed time and the idle while the CPU staged them",
        fix=pick(_PAGEABLE_FIXES, c.workload),
        # with a DataLoader, pin_memory=True: also host_memory's fix (one finding)
        fix_key=PIN_MEMORY_FIX_KEY if c.workload.kind not in ("cuda-app", "hip-app") else None,
        figures=[
            us("exposed copy time", exposed),
            us("GPU idle in the copy calls", idle_ns),
            count("copies", mine.size),
            Figure(
                label="bytes",
                value=int(nbytes.sum()) if np.all(nbytes >= 0) else None,
                unit="bytes",
            ),
            us("copy time on the GPU", gpu_ns),
        ],
        # the idle while the CPU staged them, as the gpu-idle flame graph has it; else the
        # copy calls by their CPU time
        top_stacks=c.stacks_of(copy_parts(c, "pageable"))
        or top_stacks(t, launched, t.cpu_dur[launched].astype(np.float64)),
        flame=FlameView(metric="gpu-time", search=r"Pageable|^\[memcpy HtoD\]$"),
    )


_SMALL_FIXES = {
    "default": "build the data once and copy it in one tensor (torch.stack/torch.cat on the "
    "host, one pinned non_blocking copy); keep scalars on the GPU; create constant tensors "
    "outside the step loop",
    "app": "batch the small transfers into one cudaMemcpyAsync from a pinned staging buffer",
}


def many_small_copies(c: Context) -> Draft | None:
    """Many small copies (under 64 KiB each), each paying a launch and a fixed latency.

    Pattern: at least ``SMALL_COPIES_MIN`` copies smaller than
    :data:`memcpy.SMALL_COPY_BYTES` (bytes recorded), not from pageable memory. Cost: their
    exposed GPU time plus the idle while the CPU sat in their copy calls (what one batched
    copy gives back at most); not the CPU time of the calls, which the GPU may not see.
    """
    found = _copy_draft(c, _SMALL)
    if found is None:
        return None
    mine, exposed, idle_ns = found
    cost = exposed + idle_ns
    if mine.size < SMALL_COPIES_MIN or not worth(c, cost):
        return None
    t = c.t
    launched = t.gpu_launch[mine]
    launched = launched[launched >= 0]
    loop = memcpy.step_of(t, launched)
    return Draft(
        rule="many_small_copies",
        title=f"{mine.size:,} small copies (< {memcpy.SMALL_COPY_BYTES // 1024} KiB each)",
        parts={"exposed_memcpy": exposed, "idle": idle_ns},
        summary=(
            f"{mine.size:,} small copies cost the GPU {duration(exposed)} of exposed copy "
            f"time and {duration(idle_ns)} of idle while the CPU issued them."
        ),
        assumption="assumes one batched copy replaces them: wins their exposed GPU time and "
        "the idle while the CPU issued them",
        fix=pick(_SMALL_FIXES, c.workload),
        figures=[
            us("exposed copy time", exposed),
            us("GPU idle in the copy calls", idle_ns),
            count("copies", mine.size),
            count("inside the step loop", int((loop >= 0).sum())),
            us("CPU time of the copy calls", float(t.cpu_dur[launched].sum())),
        ],
        top_stacks=top_stacks(t, launched, t.cpu_dur[launched].astype(np.float64)),
        flame=FlameView(metric="gpu-time", search=r"^Memcpy|^\[memcpy "),
    )


RULES = [pageable_copies, many_small_copies]
