"""PyTorch CUDA memory snapshots (``torch.cuda.memory._snapshot()`` / ``_dump_snapshot()``).

The file is a pickle, and a pickle can run code while it loads. This reader never does: its
unpickler refuses every class and function the pickle asks for (``find_class``), so only
plain data (dicts, lists, tuples, strings, numbers, booleans, None) can be built; anything
else is refused with a clear error before it is created.

The profile has four sample types (see :mod:`.replay` for the replay rules):

* ``peak-bytes``: the bytes live at the peak of the trace, by allocation stack;
* ``alloc-bytes`` / ``alloc-count``: every allocation of the trace, by stack;
* ``reserved-bytes``: the allocator's reserved segments at the snapshot. Allocated bytes are
  shown by the stack of the allocation holding them (as ``_memory_viz memory`` does); the
  rest, one root ``[fragmentation: reserved but unallocated]``, is split by the stack that
  reserved the segment (when recorded) into ``[free block]`` and ``[allocation rounding]``.

One sample per allocation (timestamp: when it was allocated; ``meta["free_time_ns"]``: when
it was freed, -1 if live at the snapshot), then the reserved samples. ``meta`` also holds the
memory-over-time series for a chart (``memory_timeline``), the peak (``peak_time``,
``peak_bytes``) and OOM events.
"""

from __future__ import annotations

import gc
import io
import pickle
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, BinaryIO

import numpy as np

from aiflame.errors import InputError
from aiflame.model import Profile, ProfileBuilder, SampleType
from aiflame.sources.inputs import Input
from aiflame.sources.torch_memory.bounds import PickleLimit, check_opcodes, check_size
from aiflame.sources.torch_memory.frames import FrameNamer
from aiflame.sources.torch_memory.replay import (
    FREED_BEFORE_ALLOC_SEEN,
    FROM_TRACE,
    Replay,
    SnapshotError,
    Trace,
    block_frames_and_size,
    decimate,
    iter_blocks,
    replay,
)
from aiflame.sources.torch_memory.stream import Fallback, Truncated, read_plain_data

FORMAT = "torch-memory"

SAMPLE_TYPES = (
    SampleType("peak-bytes", "bytes"),
    SampleType("alloc-bytes", "bytes"),
    SampleType("alloc-count", "count"),
    SampleType("reserved-bytes", "bytes"),
)
PEAK, ALLOC_BYTES, ALLOC_COUNT, RESERVED = range(4)

BEFORE_RECORDING = "[allocated before recording started]"
FREED_ONLY = "[allocated before recording started; stack of its free]"
NO_STACK = "[no stack recorded]"
FRAGMENTATION = "[fragmentation: reserved but unallocated]"
FREE_BLOCK = "[free block]"
ROUNDING = "[allocation rounding]"

LEGEND = (
    "Width is bytes. The widest leaf is the allocation site holding the most; a wide bar with"
    " no self bytes is a path to such sites. Labels in [brackets] are not code: memory"
    " allocated before recording started, and reserved memory nothing holds (fragmentation)."
)
TIMELINE_POINTS = 4096  # enough for a chart; keeps the page small on long traces
_NOT_READ = object()


# -- reading --------------------------------------------------------------------------------


class PlainDataUnpickler(pickle.Unpickler):
    """Builds only plain data: every global (class, function) the pickle names is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise _Refused(f"{module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise _Refused("a persistent object")


class _Refused(pickle.UnpicklingError):
    pass


def sniff(head: bytes, path: str) -> bool:
    if len(head) < 16 or head[0] != 0x80 or not 2 <= head[1] <= 5:
        return False
    start = head[:96]  # the first key of a snapshot dict comes right after the header
    if b"segments" in start or b"device_traces" in start:
        return True
    return b"total_size" in head and b"blocks" in head  # legacy: a bare list of segments


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Unpickling builds millions of containers, which makes the cyclic collector run over
    and over for nothing (plain data has no cycles to free): 4-5x slower on big snapshots."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            # Move what was just built out of the collector's way too: re-enabled with
            # millions of new containers, its next pass would scan them all (0.5 s on a big
            # snapshot) to find no cycle. Frozen objects are still freed by reference count.
            gc.freeze()
            gc.enable()


def read_snapshot(source: Input, stream: bool = True) -> dict[str, Any]:
    """The snapshot as plain data, never running code from the file.

    Read by the streaming reader (:mod:`.stream`: each device's trace as a
    :class:`Trace` of columns, in memory that does not grow with the trace's events), or,
    for what it does not read exactly as the unpickler would, and when ``stream`` is False,
    by the restricted unpickler (traces as lists of event dicts). Both give the same
    profile.
    """
    data = _NOT_READ
    stats: dict[str, int] = {}
    try:
        if stream:
            with source.open_binary(whole=True) as f, _gc_paused():
                try:
                    data = read_plain_data(f, stats)
                except Truncated:
                    raise PickleLimit("truncated pickle (unexpected end of data)") from None
                except Fallback:
                    pass  # left the except block first: what it read is freed
        if data is _NOT_READ:
            with source.open_binary(whole=True) as f:
                raw = f.read()
            check_opcodes(raw)  # before the unpickler sizes anything from what it says
            stats["bytes"] = len(raw)
            with _gc_paused():
                data = _unpickle(io.BytesIO(raw), source.path)
            del raw
        check_size(data, stats["bytes"])
    except PickleLimit as e:
        raise InputError(source.path, str(e)) from None
    if isinstance(data, list):  # old snapshots: the list of segments alone
        data = {"segments": data, "device_traces": []}
    if not isinstance(data, dict) or not isinstance(data.get("segments"), list):
        raise InputError(source.path, "not a PyTorch memory snapshot (no 'segments' list)")
    traces = data.get("device_traces") or []
    if not isinstance(traces, list) or not all(isinstance(t, list | Trace) for t in traces):
        raise InputError(
            source.path, "not a PyTorch memory snapshot ('device_traces' is not lists)"
        )
    return data


def _unpickle(f: BinaryIO, path: str) -> Any:
    try:
        return PlainDataUnpickler(f).load()
    except _Refused as e:
        raise InputError(
            path,
            f"refused to load: the pickle asks for {e} (code, not data); a memory snapshot"
            " holds only dicts, lists, strings and numbers, so this file is not one or was"
            " tampered with",
        ) from None
    except EOFError:
        raise InputError(path, "truncated pickle (unexpected end of data)") from None
    except AttributeError:
        # APPEND onto a dict, SETITEM onto a list...: pickle's own message is Python's
        raise InputError(
            path, "corrupt pickle (an item added to an object of the wrong kind)"
        ) from None
    except (
        pickle.UnpicklingError,
        ValueError,
        TypeError,
        IndexError,
        KeyError,
        OverflowError,
    ) as e:
        if "truncated" in str(e):
            raise InputError(path, "truncated pickle (unexpected end of data)") from None
        if isinstance(e, UnicodeDecodeError):
            raise InputError(
                path, f"corrupt pickle (a string that is not UTF-8, at its byte {e.start})"
            ) from None
        raise InputError(path, f"corrupt pickle ({e})") from None


# -- building -------------------------------------------------------------------------------


def load(
    source: Input,
    frames: str = "pytorch",
    resolve_classes: bool = True,
    **_: object,
) -> Profile:
    """Options: ``frames`` is ``pytorch`` (the frames PyTorch's viewers keep), ``compact``
    (also without the interpreter's C glue) or ``all``; ``resolve_classes`` reads ``.py``
    sources, when present, to name ``Class > method``.
    """
    data = read_snapshot(source)
    try:
        with _gc_paused():
            return build_profile(data, frames=frames, resolve_classes=resolve_classes, consume=True)
    except SnapshotError as e:
        raise InputError(source.path, f"not a valid PyTorch memory snapshot: {e}") from None
    except KeyError as e:
        raise InputError(
            source.path, f"not a valid PyTorch memory snapshot: an entry lacks its {e} field"
        ) from None
    except (TypeError, ValueError, AttributeError) as e:
        raise InputError(
            source.path,
            f"not a valid PyTorch memory snapshot: a field of an unexpected type or value ({e})",
        ) from None


def build_profile(
    data: dict[str, Any],
    frames: str = "pytorch",
    resolve_classes: bool = True,
    consume: bool = False,
) -> Profile:
    """The profile of a snapshot read by :func:`read_snapshot`. ``consume`` drops each
    device's trace from ``data`` once replayed, so that its memory is free for the rest."""
    builder = ProfileBuilder(SAMPLE_TYPES)
    namer = FrameNamer(builder, frames=frames, resolve_classes=resolve_classes)
    segments: list[dict[str, Any]] = data["segments"]
    traces: list[list[dict[str, Any]]] = data.get("device_traces") or []
    devices = sorted({int(s.get("device", 0)) for s in segments} | set(range(len(traces))))
    free_ns: list[int] = []
    replays: dict[int, Replay] = {}
    first_sample: dict[int, int] = {}  # each device's first allocation sample
    totals = dict.fromkeys(
        ("allocated_bytes", "allocations", "reserved_bytes", "fragmentation_bytes"), 0
    )
    for d in devices:
        segs = [s for s in segments if int(s.get("device", 0)) == d]
        trace = traces[d] if d < len(traces) else []
        if consume and d < len(traces):
            traces[d] = []
        r = replays[d] = replay(trace, segs)
        del trace
        first_sample[d] = len(builder)
        end_ns = _add_allocations(builder, namer, r, d, free_ns)
        reserved, frag = _add_reserved(builder, namer, r, segs, d, end_ns, free_ns)
        traced = r.origin == FROM_TRACE
        totals["allocated_bytes"] += int(r.size[traced].sum())
        totals["allocations"] += int(traced.sum())
        totals["reserved_bytes"] += reserved
        totals["fragmentation_bytes"] += frag
    namer.finish()
    builder.meta.update(_meta(replays, totals, first_sample))
    builder.meta["free_time_ns"] = free_ns
    return builder.build()


def _label(builder: ProfileBuilder, cache: dict[tuple, int], **labels: object) -> int:
    key = tuple(labels.items())
    lid = cache.get(key)
    if lid is None:
        lid = cache[key] = builder.labels(labels)
    return lid


def _add_allocations(
    builder: ProfileBuilder, namer: FrameNamer, r: Replay, device: int, free_ns: list[int]
) -> int:
    """One sample per allocation; returns the snapshot's time (ns) for the reserved rows."""
    n = len(r)
    times = r.time_us * 1000
    start_ns = int(times[0]) if len(times) and r.has_time else 0
    end_ns = int(times[-1]) if len(times) and r.has_time else 0
    origin = r.origin
    stacks = np.fromiter(namer.iter_stacks(r.frames), np.int64, n)  # allocation stacks
    for k in np.nonzero(origin != FROM_TRACE)[0].tolist():  # the few made before the trace
        if origin[k] == FREED_BEFORE_ALLOC_SEEN:
            stacks[k] = namer.stack(r.frames[k], (namer.label_frame(FREED_ONLY),))
        elif not r.frames[k]:
            stacks[k] = namer.stack((), (namer.label_frame(BEFORE_RECORDING),))
    unknown = (origin == FROM_TRACE) & (stacks < 0)
    if unknown.any():
        stacks[unknown] = builder.stack([namer.label_frame(NO_STACK)])
    size = r.size.astype(np.float64)
    values = np.zeros((n, len(SAMPLE_TYPES)))
    values[:, PEAK] = np.where(r.live_at_peak(), size, 0.0)
    traced = origin == FROM_TRACE
    values[:, ALLOC_BYTES] = np.where(traced, size, 0.0)
    values[:, ALLOC_COUNT] = traced
    cache: dict[tuple, int] = {}
    label_of = {s: _label(builder, cache, device=device, stream=s) for s in set(r.stream.tolist())}
    labels = np.array([label_of[s] for s in r.stream.tolist()], dtype=np.int64)
    a, f = r.alloc_point, r.free_point
    if r.has_time and len(times):
        ts = np.where(a >= 0, times[np.maximum(a, 0)], start_ns)
        free_ns.extend(np.where(f >= 0, times[np.maximum(f, 0)], -1).tolist())
    else:
        ts = np.zeros(n, dtype=np.int64)
        free_ns.extend([-1] * n)
    builder.add_many(stacks, values, labels, ts)
    return end_ns


def _add_reserved(
    builder: ProfileBuilder,
    namer: FrameNamer,
    r: Replay,
    segments: Sequence[dict[str, Any]],
    device: int,
    end_ns: int,
    free_ns: list[int],
) -> tuple[int, int]:
    """Reserved bytes at the snapshot: allocated by holder, the rest as fragmentation.

    Returns (reserved, unallocated) bytes.
    """
    before = (namer.label_frame(BEFORE_RECORDING),)
    frag = namer.label_frame(FRAGMENTATION)
    leaf = {"inactive": namer.label_frame(FREE_BLOCK), "rounding": namer.label_frame(ROUNDING)}
    cache: dict[tuple, int] = {}
    n0 = len(builder)
    reserved = unallocated = 0
    for seg in segments:
        reserved += int(seg["total_size"])
        seg_addr = int(seg.get("address", 0))
        seg_frames = seg.get("frames") or r.segment_frames.get(seg_addr) or []
        under = namer.stack(seg_frames, (frag,)) if seg_frames else builder.stack([frag])
        common = {
            "device": device,
            "stream": int(seg.get("stream", 0)),
            "pool": str(seg.get("segment_type", "")),
            "segment": f"0x{seg_addr:x}",
        }
        waste = {"inactive": 0, "rounding": 0}
        for addr, b in iter_blocks(seg):
            state = str(b.get("state", ""))
            if not state.startswith("active"):
                waste["inactive"] += int(b["size"])
                continue
            frames, requested = block_frames_and_size(b)
            k = r.live_at_end.get(addr)  # the trace allocation holding it, if recorded
            if k is not None and r.frames[k]:
                stack = namer.stack(r.frames[k])
            elif frames:
                stack = namer.stack(frames)
            else:
                stack = namer.stack((), before)
            lab = _label(builder, cache, **common, state=state)
            builder.add(stack, [0.0, 0.0, 0.0, float(requested)], lab, end_ns)
            waste["rounding"] += int(b["size"]) - requested
        for kind, nbytes in waste.items():
            unallocated += nbytes
            if nbytes:
                lab = _label(builder, cache, **common, state=kind)
                stack = builder.stack([leaf[kind]], under)
                builder.add(stack, [0.0, 0.0, 0.0, float(nbytes)], lab, end_ns)
    free_ns.extend([-1] * (len(builder) - n0))
    return reserved, unallocated


def _meta(
    replays: dict[int, Replay], totals: dict[str, int], first_sample: dict[int, int]
) -> dict[str, object]:
    main = max(replays, key=lambda d: replays[d].peak_bytes) if replays else 0
    r = replays.get(main, Replay())
    meta: dict[str, object] = {"default_type": PEAK, "peak_device": main, "legend": LEGEND}
    meta["peak_bytes"] = r.peak_bytes
    meta["peak_time"] = int(r.time_us[r.peak_point]) if r.peak_point >= 0 else None
    meta["peak_time_unit"] = "us" if r.has_time else "event"
    n = len(r.time_us)
    if n:
        keep = decimate(n, r.live, r.peak_point, TIMELINE_POINTS)
        t0 = int(r.time_us[0])
        meta["memory_timeline"] = {
            "device": main,
            "unit": "us" if r.has_time else "event",  # events: a trace without time_us
            "start_us": t0 if r.has_time else 0,
            "time_us": (r.time_us[keep] - t0).tolist(),
            "live_bytes": r.live[keep].tolist(),
            "reserved_bytes": r.reserved[keep].tolist(),
            "peak_index": int(np.searchsorted(keep, r.peak_point)),
            "points": n,
            "blocks": timeline_blocks(
                r.alloc_point, r.free_point, r.size, keep, first_sample.get(main, 0)
            ),
        }
        if r.has_time:
            meta["time_range_ns"] = (t0 * 1000, int(r.time_us[-1]) * 1000)
    ooms = [dict(o, device=d) for d, rp in replays.items() for o in rp.ooms]
    if ooms:
        meta["oom_events"] = ooms
    meta.update(totals)
    when = ""
    if r.peak_point >= 0 and r.has_time:
        when = f" at +{(r.time_us[r.peak_point] - r.time_us[0]) / 1000:.3f} ms"
    meta["info:peak bytes"] = f"{fmt_bytes(r.peak_bytes)}{when} (device {main})"
    meta["info:allocated"] = (
        f"{fmt_bytes(totals['allocated_bytes'])} in {totals['allocations']:,} allocations"
    )
    reserved, frag = totals["reserved_bytes"], totals["fragmentation_bytes"]
    share = f", {frag / reserved:.1%} of it unallocated" if reserved else ""
    meta["info:reserved"] = f"{fmt_bytes(reserved)}{share}"
    if ooms:
        meta["info:oom events"] = str(len(ooms))
    return meta


def timeline_blocks(
    alloc_point: np.ndarray,
    free_point: np.ndarray,
    size: np.ndarray,
    keep: np.ndarray,
    first: int,
) -> dict[str, object]:
    """Each allocation's lifetime in points of the (decimated) timeline, for the page to
    show what was live when: allocation ``i`` (sample ``first + i``) is live at point ``k``
    iff ``alloc[i] <= k < free[i]``, and at some moment between points ``j`` and ``k`` iff
    ``alloc[i] <= k`` and ``free[i] > j``. Both are exact at every kept point (whatever was
    dropped between two kept points is in the second form), so the page can quantize
    lifetimes to the points it draws and stay small on long traces."""
    m = len(keep)
    alloc = np.where(alloc_point >= 0, np.searchsorted(keep, alloc_point), 0)
    free = np.where(free_point >= 0, np.searchsorted(keep, free_point), m)
    return {
        "first_sample": first,
        "alloc": alloc.tolist(),
        "free": free.tolist(),
        "size": size.tolist(),
    }


def fmt_bytes(v: float) -> str:
    """``1.50 MiB (1,572,864 bytes)``: readable, and exact for comparing with other tools."""
    for scale, suffix in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if abs(v) >= scale:
            return f"{v / scale:.2f} {suffix} ({int(v):,} bytes)"
    return f"{int(v):,} bytes"
