"""Memory of a PyTorch profiler trace recorded with ``profile_memory=True``.

Such a trace has one ``[memory]`` instant event per allocation (``Bytes`` > 0) and free
(``Bytes`` < 0) of the caching allocator, with the block's ``Addr``, its device
(``Device Type``/``Device Id``) and, in traces since 2022, the device's ``Total Allocated``
and ``Total Reserved`` after it. Each allocation is charged to the innermost CPU slice of
its thread running at that instant (by time containment: the operator that made it, under
its Python frames and enclosing operators, as the CPU flame graph shows it).

Sample types, one sample per allocation:

* ``peak-bytes``: the bytes live at the peak of the device's ``Total Allocated``, by
  allocating op; what was allocated before the trace started and is still live then is
  ``[allocated before recording started]``, so the total is the peak;
* ``alloc-bytes``, ``alloc-count``: every allocation of the trace.

Frees are matched to allocations by address; traces without ``Addr`` (2021) have no
lifetimes, so they get ``alloc-bytes``/``alloc-count`` and the memory over time, not
``peak-bytes``. ``meta["memory_timeline"]`` holds the series of the device with the highest
peak (a GPU before the CPU) for the page's chart; with several devices each is a root frame.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from aiflame.errors import InputError
from aiflame.model import FrameKind, Profile, ProfileBuilder, SampleType
from aiflame.sources.inputs import Input
from aiflame.sources.kineto.events import GPU_DEVICE_TYPES, Columns, MemoryColumns
from aiflame.sources.kineto.importer import Frames, NoKinetoEvents, cpu_slice_stacks, read_columns
from aiflame.sources.torch_memory.importer import BEFORE_RECORDING, fmt_bytes, timeline_blocks
from aiflame.sources.torch_memory.replay import decimate
from aiflame.transforms import correlate
from aiflame.transforms.group import group_by
from aiflame.transforms.pynames import module_methods

PEAK = SampleType("peak-bytes", "bytes")
ALLOC_BYTES = SampleType("alloc-bytes", "bytes")
ALLOC_COUNT = SampleType("alloc-count", "count")
OUTSIDE = "[outside any operator]"
TIMELINE_POINTS = 4096
LEGEND = (
    "Width is bytes, charged to the operator running when the allocation was made. The"
    " widest leaf is the op holding the most; a wide bar with no self bytes is a path to"
    " such ops. Labels in [brackets] are not code: memory allocated before the trace"
    " started, allocations made outside every recorded operator."
)
NO_MEMORY = (
    "no [memory] events in this trace (record it with "
    "torch.profiler.profile(profile_memory=True), or take a memory snapshot with "
    "torch.cuda.memory._dump_snapshot())"
)


class NoMemoryEvents(InputError):
    """A Kineto trace recorded without ``profile_memory=True``."""


@dataclass
class DeviceReplay:
    """One device's ``[memory]`` events in time order, and its allocations' lifetimes."""

    name: str
    events: np.ndarray  # indices into the memory columns, by time
    live: np.ndarray  # bytes allocated after each event
    reserved: np.ndarray
    peak: int  # event position of the peak (first one)
    allocations: np.ndarray  # event positions of the allocations
    sizes: np.ndarray  # their bytes
    free_point: np.ndarray  # event position of each one's free, -1: live at the end
    absolute: bool  # live is the trace's Total Allocated (else: bytes since the start)

    @property
    def peak_bytes(self) -> float:
        return float(self.live[self.peak])


def load(
    source: Input,
    python_names: str = "short",
    kernel_names: str = "full",
    device: str | None = None,
) -> Profile:
    """The memory profile of a Kineto trace; :class:`NoMemoryEvents` if it has none.
    ``device`` (``cuda:1``, ``cpu``): the device the chart shows (default: the GPU with the
    highest peak)."""
    try:
        cols, _ = read_columns(source, memory=True)
    except NoKinetoEvents:
        cols = None
    mem = cols.memory if cols is not None else None
    if cols is None or mem is None or mem.ts.size == 0:
        raise NoMemoryEvents(source.path, NO_MEMORY)
    try:
        return build_profile(cols, mem, python_names, kernel_names, device)
    except UnknownDevice as e:
        raise InputError(source.path, str(e)) from None


class UnknownDevice(ValueError):
    pass


def build_profile(
    cols: Columns,
    mem: MemoryColumns,
    python_names: str,
    kernel_names: str,
    device: str | None = None,
) -> Profile:
    devices = [replay(cols.names[d], np.nonzero(mem.device == d)[0], mem) for d in _devices(mem)]
    with_lifetimes = all(d.free_point.size == 0 or np.all(mem.addr[d.events] >= 0) for d in devices)
    types = [PEAK, ALLOC_BYTES, ALLOC_COUNT] if with_lifetimes else [ALLOC_BYTES, ALLOC_COUNT]
    builder = ProfileBuilder(types)
    warnings: Counter[str] = Counter(cols.warnings)
    frames = Frames(builder, cols, python_names, kernel_names)
    slices = cpu_slice_stacks(builder, frames, cols, warnings)
    op = correlate.enclosing(
        cols.cpu_thread, cols.cpu_ts, cols.cpu_dur, slices.nesting, mem.thread, mem.ts
    )
    outside = builder.stack([builder.frame(OUTSIDE, FrameKind.LABEL)])
    stack_of = np.append(slices.stack_of, outside)  # index -1: no enclosing slice
    first_sample: dict[str, int] = {}
    for dev in devices:
        first_sample[dev.name] = len(builder)
        _add_allocations(builder, dev, mem, op, stack_of, with_lifetimes, cols)
    if with_lifetimes:
        _add_before_recording(builder, devices)
    main = _main_device(devices, device)
    builder.meta.update(_meta(devices, main, first_sample[main.name], mem, with_lifetimes))
    if warnings:
        builder.meta["info:warnings"] = ", ".join(f"{n} {w}" for w, n in warnings.items())
    profile = builder.build()
    if python_names == "short":
        profile = module_methods(profile)
    return group_by(profile, "device") if len(devices) > 1 else profile


def _devices(mem: MemoryColumns) -> list[int]:
    return [int(d) for d in np.unique(mem.device)]


def replay(name: str, events: np.ndarray, mem: MemoryColumns) -> DeviceReplay:
    """Lifetimes and memory over time of one device's events (``events``: its indices)."""
    events = events[np.argsort(mem.ts[events], kind="stable")]
    nbytes = mem.nbytes[events]
    totals = mem.total_allocated[events]
    absolute = bool(np.all(np.isfinite(totals)))
    live = totals if absolute else np.cumsum(nbytes).astype(np.float64)
    reserved = mem.total_reserved[events]
    if not np.all(np.isfinite(reserved)):
        reserved = np.zeros(len(events))
    allocations = np.nonzero(nbytes > 0)[0]
    free_point = np.full(allocations.size, -1, dtype=np.int64)
    pending: dict[int, int] = {}  # address -> index into allocations, while live
    addr = mem.addr[events].tolist()
    k = 0
    for pos, size in enumerate(nbytes.tolist()):
        if size > 0:
            if addr[pos] >= 0:
                pending[addr[pos]] = k
            k += 1
        else:
            j = pending.pop(addr[pos], -1)
            if j >= 0:
                free_point[j] = pos
    peak = int(np.argmax(live)) if live.size else 0
    sizes = nbytes[allocations].astype(np.float64)
    return DeviceReplay(
        name, events, live, reserved, peak, allocations, sizes, free_point, absolute
    )


def _live_at_peak(dev: DeviceReplay) -> np.ndarray:
    freed_after = (dev.free_point < 0) | (dev.free_point > dev.peak)
    return (dev.allocations <= dev.peak) & freed_after


def _add_allocations(
    builder: ProfileBuilder,
    dev: DeviceReplay,
    mem: MemoryColumns,
    op: np.ndarray,
    stack_of: np.ndarray,
    with_lifetimes: bool,
    cols: Columns,
) -> None:
    rows = dev.events[dev.allocations]
    size = dev.sizes
    columns = [size, np.ones(rows.size)]
    if with_lifetimes:
        columns.insert(0, np.where(_live_at_peak(dev), size, 0.0))
    labels = _labels(builder, dev.name, mem.thread[rows], cols)
    builder.add_many(stack_of[op[rows]], np.stack(columns, axis=1), labels, mem.ts[rows])


def _labels(builder: ProfileBuilder, device: str, thread: np.ndarray, cols: Columns) -> np.ndarray:
    ids = {}
    for t in np.unique(thread).tolist():
        pid, tid = cols.threads[t]
        ids[t] = builder.labels({"device": device, "pid": pid, "tid": tid})
    return np.asarray([ids[t] for t in thread.tolist()], dtype=np.int64)


def _add_before_recording(builder: ProfileBuilder, devices: list[DeviceReplay]) -> None:
    """What was live at each device's peak but allocated before the trace: the rest of
    the peak (known only where the trace writes ``Total Allocated``)."""
    stack = builder.stack([builder.frame(BEFORE_RECORDING, FrameKind.LABEL)])
    for dev in devices:
        if not dev.absolute:
            continue
        rest = dev.peak_bytes - float(dev.sizes[_live_at_peak(dev)].sum())
        if rest > 0:
            lab = builder.labels({"device": dev.name})
            builder.add(stack, [rest, 0.0, 0.0], lab)


def _main_device(devices: list[DeviceReplay], name: str | None = None) -> DeviceReplay:
    """The device the chart shows: ``name``, else the GPU with the highest peak, else the
    device with the highest peak."""
    if name is not None:
        for d in devices:
            if d.name == name:
                return d
        known = ", ".join(sorted(d.name for d in devices))
        raise UnknownDevice(f"no [memory] events of device '{name}' (the trace has: {known})")
    gpus = [d for d in devices if d.name.split(":")[0] in GPU_DEVICE_TYPES]
    return max(gpus or devices, key=lambda d: d.peak_bytes)


def _meta(
    devices: list[DeviceReplay],
    main: DeviceReplay,
    first: int,
    mem: MemoryColumns,
    with_lifetimes: bool,
) -> dict[str, Any]:
    gpu = any(d.name.split(":")[0] in GPU_DEVICE_TYPES for d in devices)
    meta: dict[str, Any] = {
        "default_type": 0,
        "legend": LEGEND,
        "memory_kind": "GPU memory" if gpu else "memory",
        "peak_device": main.name,
        "peak_bytes": main.peak_bytes,
    }
    ts_ns = mem.ts[main.events]
    keep = decimate(len(ts_ns), main.live, main.peak, TIMELINE_POINTS)
    t0 = int(ts_ns[0])
    meta["memory_timeline"] = {
        "device": main.name,
        "scope": main.name,
        "unit": "us",
        "start_us": t0 / 1000,
        "time_us": ((ts_ns[keep] - t0) / 1000).tolist(),
        "live_bytes": main.live[keep].tolist(),
        "reserved_bytes": main.reserved[keep].tolist(),
        "peak_index": int(np.searchsorted(keep, main.peak)),
        "points": len(ts_ns),
        "blocks": timeline_blocks(main.allocations, main.free_point, main.sizes, keep, first),
    }
    peaks = []
    for d in sorted(devices, key=lambda d: -d.peak_bytes):
        when = (mem.ts[d.events[d.peak]] - mem.ts[d.events[0]]) / 1e6
        base = "" if d.absolute else " above the first event"
        peaks.append(f"{d.name} {fmt_bytes(d.peak_bytes)}{base} at +{when:.3f} ms")
    meta["info:peak bytes"] = "; ".join(peaks)
    total = sum(float(d.sizes.sum()) for d in devices)
    count = sum(int(d.allocations.size) for d in devices)
    meta["info:allocated"] = f"{fmt_bytes(total)} in {count:,} allocations"
    if not with_lifetimes:
        meta["info:lifetimes"] = (
            "the [memory] events carry no Addr (traces before 2022): frees cannot be matched"
            " to allocations, so there is no peak-bytes view"
        )
    return meta
