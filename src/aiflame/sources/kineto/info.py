"""The ``info:`` lines and meta of a Kineto profile (what ``aiflame info`` prints)."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import numpy as np

from aiflame.model import devices
from aiflame.sources.kineto.events import Cls, Columns
from aiflame.sources.kineto.samples import GPU_TIME, UNLINKED_ROOT, WALL_TIME
from aiflame.transforms import correlate


def _int(v: object) -> int:
    if isinstance(v, int):
        return v
    return int(v) if isinstance(v, str) and v.isdigit() else 0


# Words of a device's marketing name that do not tell models apart: vendors, families,
# form factors, memory sizes, virtual functions.
_DEVICE_NOISE = re.compile(
    r"^(?:NVIDIA|AMD|Instinct|Tesla|GeForce|Corporation|\d+\s?GB|SXM\d*|PCIe|HBM\d*e?|NVL|VF)$",
    re.IGNORECASE,
)


def short_device_name(name: str) -> str:
    """``NVIDIA H100 80GB HBM3`` -> ``H100``, ``AMD Instinct MI300X VF`` -> ``MI300X``,
    ``Tesla V100-SXM2-16GB`` -> ``V100``: the model, for titles; the name if nothing is
    left."""
    words = [w for w in re.split(r"[\s-]+", name.strip()) if w and not _DEVICE_NOISE.match(w)]
    return " ".join(words) or name.strip()


def _device_name(props: dict[str, Any]) -> str:
    name = str(props.get("name") or "").strip()
    if name:
        return name
    model = devices.model_by_properties(props)
    if model:
        return f"{model} (unnamed in the trace, by its properties)"
    return f"unnamed GPU ({devices.describe(props)})"


def _device_model(props: dict[str, Any]) -> str | None:
    name = str(props.get("name") or "").strip()
    return short_device_name(name) if name else devices.model_by_properties(props)


def time_range(cols: Columns, trace_meta: dict[str, Any]) -> tuple[int, int]:
    """(first, last) nanoseconds of the trace's events on the wall clock."""
    first = min(int(t.min()) for t in (cols.cpu_ts, cols.gpu_ts) if t.size)
    last = max(
        int((t + d).max())
        for t, d in ((cols.cpu_ts, cols.cpu_dur), (cols.gpu_ts, cols.gpu_dur))
        if t.size
    )
    # Kineto writes microseconds since baseTimeNanoseconds (a wall-clock origin) when set.
    base_ns = int(cols.base_us) * 1000 + _int(trace_meta.get("baseTimeNanoseconds"))
    return base_ns + first, base_ns + last


def time_range_problem(cols: Columns, trace_meta: dict[str, Any]) -> str | None:
    """Why the trace's times cannot be 64-bit nanoseconds on the wall clock, or None."""
    if not (cols.cpu_ts.size or cols.gpu_ts.size):
        return None
    first, last = time_range(cols, trace_meta)
    if first >= -(2**63) and last < 2**63:
        return None
    base = _int(trace_meta.get("baseTimeNanoseconds"))
    return (
        f"baseTimeNanoseconds is {base}: counted from it, the trace's events end beyond "
        "64-bit nanoseconds (after the year 2262)"
    )


def _ns(v: float) -> str:
    for scale, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "us")):
        if abs(v) >= scale:
            return f"{v / scale:.3f} {unit}"
    return f"{v:.0f} ns"


def describe(
    cols: Columns,
    unlinked: np.ndarray,
    warnings: Counter[str],
    rank: str | None,
    trace_meta: dict[str, Any],
    used_call_stacks: bool,
) -> dict[str, object]:
    """Profile meta: default metric, time range and the ``info:`` lines of ``aiflame info``."""
    n_gpu = int(cols.gpu_ts.size)
    meta: dict[str, object] = {"default_type": GPU_TIME if n_gpu else WALL_TIME}
    meta["time_range_ns"] = time_range(cols, trace_meta)
    if rank is not None:
        meta["rank"] = rank
        meta["info:rank"] = rank
    devices = trace_meta.get("deviceProperties")
    if isinstance(devices, list) and devices:
        # vLLM's traces of ROCm devices leave the name empty: the model their properties
        # identify, else what they are ("unnamed GPU (304 CUs, 206 GB, gfx94x)")
        known = [d for d in devices if isinstance(d, dict)]
        names = Counter(_device_name(d) for d in known)
        meta["info:devices"] = ", ".join(f"{n} x {name}" for name, n in names.items())
        models = [m for m in (_device_model(d) for d in known) if m]
        if models:  # for titles: only what names a model
            meta["device"] = "+".join(dict.fromkeys(models))
    counts = np.bincount(cols.cpu_cls, minlength=8)
    meta["info:cpu slices"] = (
        f"{counts[Cls.PYTHON]:,} Python functions, {counts[Cls.OP]:,} operators, "
        f"{counts[Cls.ANNOTATION]:,} annotations, {counts[Cls.RUNTIME]:,} runtime calls"
        + (" (Python stacks from 'Call stack')" if used_call_stacks else "")
    )
    if n_gpu:
        g = np.bincount(cols.gpu_cls, minlength=8)
        total = int(cols.gpu_dur.sum())
        meta["info:gpu activity"] = (
            f"{g[Cls.KERNEL]:,} kernels, {g[Cls.MEMCPY]:,} memcpy, {g[Cls.MEMSET]:,} memset "
            f"on {len(set(cols.gpu_device.tolist()))} device(s), "
            f"{len(set(zip(cols.gpu_device.tolist(), cols.gpu_stream.tolist(), strict=True)))} "
            f"stream(s); {_ns(total)} in all"
        )
        busy = correlate.busy_time(cols.gpu_ts, cols.gpu_dur)
        meta["info:gpu busy time"] = _ns(busy) + " (union of all GPU activity intervals)"
        lost = int(cols.gpu_dur[unlinked].sum())
        meta["info:unlinked gpu time"] = (
            f"{_ns(lost)} ({100 * lost / total if total else 0:.1f}%) in "
            f"{int(unlinked.sum()):,} activities under '{UNLINKED_ROOT}'"
        )
        meta["gpu_time_ns"], meta["gpu_busy_ns"], meta["unlinked_gpu_ns"] = total, busy, lost
    if warnings:
        meta["info:warnings"] = "; ".join(f"{n:,} {what}" for what, n in warnings.most_common())
    if cols.ignored:
        meta["info:not used"] = ", ".join(f"{c} {n:,}" for c, n in cols.ignored.most_common())
    return meta
