"""The timeline of a PyTorch profiler (Kineto) trace: every CPU slice and GPU activity the
flame graph is built from, on the trace's own processes and threads, with each GPU activity
linked to its launch by a flow (as Kineto's ``ac2g`` arrows).

Kept: Python functions, operators, user annotations, runtime/driver calls, kernels, memcpys
and memsets with their times to the nanosecond, their correlation ids (device and stream of
GPU work, and an operator's ``Call stack`` in older traces) and the trace's top-level keys
(``deviceProperties``, ``distributedInfo``...). Not kept: events that the flame graph does
not use either (instant events, counters, ``gpu_user_annotation``, other ``args``).
Categories are Kineto's, so the written trace reads back as a Kineto trace.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from aiflame.model.timeline import Timeline, TimelineBuilder
from aiflame.sources.kineto.events import Cls, Columns, correlation_ids
from aiflame.sources.kineto.names import short_kernel_name
from aiflame.transforms import correlate

FLOW_CATEGORY = "ac2g"  # Kineto's name for the arrows from a launch to its GPU work
CATEGORIES = {
    Cls.PYTHON: "python_function",
    Cls.OP: "cpu_op",
    Cls.ANNOTATION: "user_annotation",
    Cls.RUNTIME: "cuda_runtime",
    Cls.KERNEL: "kernel",
    Cls.MEMCPY: "gpu_memcpy",
    Cls.MEMSET: "gpu_memset",
}
_DRIVER_NAME = re.compile(r"cu[A-Z]")  # cuLaunchKernel, cuMemAlloc: the driver API; cudaX: runtime
# Top-level keys written anew; the others (baseTimeNanoseconds too: times are kept as read)
# are copied.
_OWN_KEYS = ("traceEvents", "displayTimeUnit")


def build_timeline(cols: Columns, trace_meta: dict[str, Any], kernel_names: str) -> Timeline:
    b = TimelineBuilder()
    b.flow_cat = FLOW_CATEGORY
    tracks = np.asarray([_track(b, cols, key) for key in cols.threads] or [0], dtype=np.int32)
    names = cols.names
    if kernel_names == "short":
        kernels = set(cols.gpu_name[cols.gpu_cls == Cls.KERNEL].tolist())
        names = [short_kernel_name(n) if i in kernels else n for i, n in enumerate(names)]
    name_ids = np.asarray([b.string(n) for n in names] or [0], dtype=np.int32)
    cat_ids = np.zeros(8, dtype=np.int32)
    for cls, cat in CATEGORIES.items():
        cat_ids[cls] = b.string(_category(cols, cls) or cat)
    cpu_cat = cat_ids[cols.cpu_cls]
    driver = _driver_calls(cols)
    if driver is not None:
        cpu_cat[driver] = b.string("cuda_driver")
    base_ns = round(cols.base_us * 1000)
    cpu_corr, gpu_corr = correlation_ids(cols)

    cpu_args = np.full(cols.cpu_ts.shape[0], -1, dtype=np.int32)
    with_args = np.nonzero((cpu_corr >= 0) | (cols.cpu_stack >= 0))[0]
    corr_l, stack_l = cpu_corr[with_args].tolist(), cols.cpu_stack[with_args].tolist()
    for i, corr, cs in zip(with_args.tolist(), corr_l, stack_l, strict=True):
        args: dict[str, Any] = {}
        if corr >= 0:
            args["correlation"] = corr
        if cs >= 0:
            args["Call stack"] = cols.call_stacks[cs]
        cpu_args[i] = b.add_args(args)
    first_cpu = b.add_many(
        tracks[cols.cpu_thread],
        base_ns + cols.cpu_ts,
        cols.cpu_dur,
        name_ids[cols.cpu_name],
        cpu_cat,
        cpu_args,
    )

    gpu_args = np.empty(cols.gpu_ts.shape[0], dtype=np.int32)
    devices, streams = cols.gpu_device.tolist(), cols.gpu_stream.tolist()
    for j, (dev, stream, corr) in enumerate(zip(devices, streams, gpu_corr.tolist(), strict=True)):
        args = {"device": _number(cols.names[dev]), "stream": _number(cols.names[stream])}
        if corr >= 0:
            args["correlation"] = corr
        gpu_args[j] = b.add_args(args)
    first_gpu = b.add_many(
        tracks[cols.gpu_thread],
        base_ns + cols.gpu_ts,
        cols.gpu_dur,
        name_ids[cols.gpu_name],
        cat_ids[cols.gpu_cls],
        gpu_args,
    )

    launch = launches(cols, cpu_corr, gpu_corr)
    linked = np.nonzero(launch >= 0)[0]
    b.link(first_cpu + launch[linked], first_gpu + linked)
    b.meta["trace"] = {k: v for k, v in trace_meta.items() if k not in _OWN_KEYS}
    b.meta["format"] = "kineto"
    return b.build()


def _category(cols: Columns, cls: int) -> str | None:
    """The trace's own category of a class, when it used one (``mtia_runtime``), or the
    runtime's when it used ``cuda_driver`` beside it."""
    used = sorted(c for c, k in cols.categories.items() if k == cls)
    if cls == Cls.RUNTIME and len(used) > 1:
        used = [c for c in used if c != "cuda_driver"]
    return used[0] if len(used) == 1 else None


def _driver_calls(cols: Columns) -> np.ndarray | None:
    """Runtime-class slices that are CUDA driver calls (``cuLaunchKernel``), where the trace
    has both ``cuda_driver`` and other runtime events: the class does not tell them apart,
    the driver API's naming does."""
    runtime = [c for c, k in cols.categories.items() if k == Cls.RUNTIME]
    if "cuda_driver" not in runtime:
        return None
    if len(runtime) == 1:
        return cols.cpu_cls == Cls.RUNTIME
    is_driver = np.asarray([_DRIVER_NAME.match(n) is not None for n in cols.names] or [False])
    return (cols.cpu_cls == Cls.RUNTIME) & is_driver[cols.cpu_name]


def _track(b: TimelineBuilder, cols: Columns, key: tuple[Any, Any]) -> int:
    pid, tid = key
    process = cols.process_meta.get(pid, {})
    thread = cols.thread_meta.get((pid, tid), {})
    return b.track(
        pid,
        tid,
        _text(process.get("name")),
        _text(thread.get("name")),
        labels=_text(process.get("labels")),
        process_sort=_int(process.get("sort_index")),
        thread_sort=_int(thread.get("sort_index")),
    )


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(value: object) -> str:
    return value.strip() if isinstance(value, str) else ""


def _number(text: str) -> int | str:
    """A device or stream id as Kineto writes it: a number where it is one."""
    return int(text) if text.lstrip("-").isdigit() else text


def launches(cols: Columns, cpu_corr: np.ndarray, gpu_corr: np.ndarray) -> np.ndarray:
    """The CPU slice that launched each GPU activity (-1: not in the trace), as the flame
    graph links them: a runtime/driver call first, else any slice with the same id."""
    is_rt = cols.cpu_cls == Cls.RUNTIME
    links = correlate.link(gpu_corr, np.where(is_rt, cpu_corr, -1), cols.cpu_ts)
    rest = correlate.link(gpu_corr, np.where(is_rt, -1, cpu_corr), cols.cpu_ts)
    return np.where(links.launch >= 0, links.launch, rest.launch)
