"""Hang the kernels of CUDA/HIP graph replays under the operators that captured them.

A graph replay runs its kernels under one ``cudaGraphLaunch``/``hipGraphLaunch``: the trace
knows no operator, Python frame or input shape for them. The trace of the graph's capture
(vLLM and SGLang can write one) has the launch calls made while the graph was captured,
inside their operators and Python frames, in the order they became graph nodes. Matching
the replayed activities (in start order) to the captured launches (in call order) gives
each replayed kernel its captured launch: by kernel name where the capture trace names
them (ROCm launch calls carry a ``kernel`` argument; a launch is skipped when it does not
match, as TraceLens aligns them), else by position when the counts agree.

The capture's CPU slices are appended to the replay's trace on threads of their own
(``gpu_origin`` points at them; ``gpu_op`` becomes the captured operator), so the replay's
own timeline, launches and idle gaps stay as they were.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

import numpy as np

from aiflame.model.trace import Kind, TraceData
from aiflame.transforms.correlate import nearest_enclosing

GRAPH_LAUNCH = re.compile(r"^(cuda|hip|cu)GraphLaunch")
_BEGIN = re.compile(r"^(cuda|hip|cu)StreamBeginCapture")
_END = re.compile(r"^(cuda|hip|cu)StreamEndCapture")
_LAUNCH = re.compile(
    r"^(cuda|hip|cu)(LaunchKernel|LaunchCooperativeKernel|ModuleLaunchKernel|"
    r"ExtModuleLaunchKernel|ExtLaunchKernel|LaunchKernelEx|Memcpy\w*Async|Memset\w*Async)"
)


@dataclass
class Attached:
    trace: TraceData
    replayed: int  # activities of graph replays in the replay trace
    matched: int  # of them, hung under a captured launch
    # graph launches that fit more than one captured graph (batch sizes captured alike):
    # matched to the first that fits exactly, their shapes not certain
    ambiguous: int = 0


def _mask(names: list[str], pattern: re.Pattern[str]) -> np.ndarray:
    return np.fromiter((bool(pattern.search(n)) for n in names), dtype=bool, count=len(names))


def graph_launches(t: TraceData) -> np.ndarray:
    """Per GPU activity: was it launched by a graph launch call?"""
    if t.cpu_ts.size == 0:
        return np.zeros(t.gpu_ts.size, dtype=bool)
    is_graph = _mask(t.names, GRAPH_LAUNCH)[t.cpu_name]
    launch = t.gpu_launch
    return (launch >= 0) & is_graph[np.maximum(launch, 0)]


def _captures(c: TraceData) -> list[np.ndarray]:
    """The launch calls of each capture window of the capture trace, in call order (the
    whole trace's launch calls when it marks no window)."""
    if c.cpu_ts.size == 0:
        return []
    runtime = c.cpu_is_runtime if c.cpu_is_runtime is not None else np.ones(c.cpu_ts.size, bool)
    launch = runtime & _mask(c.names, _LAUNCH)[c.cpu_name]
    begins = np.nonzero(runtime & _mask(c.names, _BEGIN)[c.cpu_name])[0]
    ends = np.nonzero(runtime & _mask(c.names, _END)[c.cpu_name])[0]
    threads = c.threads()
    out = []
    for b in begins[np.argsort(c.cpu_ts[begins])].tolist():
        later = ends[(threads[ends] == threads[b]) & (c.cpu_ts[ends] > c.cpu_ts[b])]
        if later.size == 0:
            continue
        e = later[np.argmin(c.cpu_ts[later])]
        inside = launch & (threads == threads[b])
        inside &= (c.cpu_ts > c.cpu_ts[b]) & (c.cpu_ts < c.cpu_ts[e])
        idx = np.nonzero(inside)[0]
        out.append(idx[np.argsort(c.cpu_ts[idx], kind="stable")])
    if not out:
        idx = np.nonzero(launch)[0]
        out.append(idx[np.argsort(c.cpu_ts[idx], kind="stable")])
    return [w for w in out if w.size]


def _kind_key(name: str, kind: int) -> str:
    if kind == Kind.MEMCPY or "Memcpy" in name:
        return "[memcpy]"
    if kind == Kind.MEMSET or "Memset" in name or "fillBuffer" in name:
        return "[memset]"
    return name


def _align(replayed: list[str], captured: list[str] | None, n_captured: int) -> list[int] | None:
    """Index of the captured launch of each replayed activity, or None if they do not fit."""
    if captured is None:
        return list(range(len(replayed))) if n_captured == len(replayed) else None
    out, ci = [], 0
    for name in replayed:
        while ci < len(captured) and captured[ci] != name:
            ci += 1  # a launch the replay does not show (the profiler lost it): skip it
        if ci == len(captured):
            return None
        out.append(ci)
        ci += 1
    return out


def attach_capture(replay: TraceData, capture: TraceData) -> Attached:
    """The replay trace with its graph replays matched to the capture trace's launches."""
    replayed = graph_launches(replay)
    n_replayed = int(replayed.sum())
    windows = _captures(capture)
    if not n_replayed or not windows:
        return Attached(replay, n_replayed, 0)
    # Names of the capture, as ids of the replay's name table.
    names = list(replay.names)
    ids = {n: i for i, n in enumerate(names)}
    remap = np.empty(len(capture.names), dtype=np.int64)
    for i, n in enumerate(capture.names):
        if n not in ids:
            ids[n] = len(names)
            names.append(n)
        remap[i] = ids[n]

    def captured_names(w: np.ndarray) -> list[str] | None:
        """The kernel each captured launch names (copies and sets by kind), or None."""
        if capture.cpu_kernel is None:
            return None
        out = []
        for call in w.tolist():
            k = int(capture.cpu_kernel[call])
            call_name = capture.names[int(capture.cpu_name[call])]
            if k >= 0:
                out.append(capture.names[k])
            elif "Memcpy" in call_name:
                out.append("[memcpy]")
            elif "Memset" in call_name:
                out.append("[memset]")
            else:
                return None  # a kernel launch without a name: fall back on positions
        return out

    offset = replay.cpu_ts.size
    origin = np.full(replay.gpu_ts.size, -1, dtype=np.int64)
    launch = np.where(replayed, replay.gpu_launch, -1)
    ambiguous = 0
    for call in np.unique(launch[launch >= 0]).tolist():
        acts = np.nonzero(launch == call)[0]
        acts = acts[np.argsort(replay.gpu_ts[acts], kind="stable")]
        keys = [
            _kind_key(replay.names[int(replay.gpu_name[j])], int(replay.gpu_kind[j]))
            for j in acts.tolist()
        ]
        fits = [(w, where) for w in windows if (where := _align(keys, captured_names(w), w.size))]
        # A capture of the same size first: nothing skipped (a graph of another batch size
        # can fit too when the kernels' names do not change with it).
        exact = [f for f in fits if f[0].size == len(keys)]
        if len(exact if exact else fits) > 1:
            ambiguous += 1
        if fits:
            w, where = (exact or fits)[0]
            origin[acts] = offset + w[np.asarray(where, dtype=np.int64)]
    matched = int((origin >= 0).sum())
    if not matched:
        return Attached(replay, n_replayed, 0)
    merged = replace(_merged(replay, capture, remap, names, origin), replays_ambiguous=ambiguous)
    return Attached(merged, n_replayed, matched, ambiguous)


def _merged(
    r: TraceData, c: TraceData, remap: np.ndarray, names: list[str], origin: np.ndarray
) -> TraceData:
    offset = r.cpu_ts.size
    r_threads, c_threads = r.threads(), c.threads()
    thread_base = (int(r_threads.max()) + 1 if r_threads.size else 0) - int(c_threads.min())

    def both(a: np.ndarray | None, b: np.ndarray | None, fill: int | bool) -> np.ndarray:
        a = np.full(r.cpu_ts.size, fill) if a is None else a
        b = np.full(c.cpu_ts.size, fill) if b is None else b
        return np.concatenate([a, b])

    cpu_is_op = np.concatenate([r.cpu_is_op, c.cpu_is_op])
    cpu_parent = np.concatenate(
        [r.cpu_parent, np.where(c.cpu_parent >= 0, c.cpu_parent + offset, -1)]
    )
    c_kernel = (
        None
        if c.cpu_kernel is None
        else np.where(c.cpu_kernel >= 0, remap[np.maximum(c.cpu_kernel, 0)], -1)
    )
    gpu_op = r.gpu_op.copy()
    m = origin >= 0
    gpu_op[m] = nearest_enclosing(cpu_parent, cpu_is_op, origin[m])
    return replace(
        r,
        cpu_ts=np.concatenate([r.cpu_ts, c.cpu_ts]),
        cpu_dur=np.concatenate([r.cpu_dur, c.cpu_dur]),
        cpu_name=np.concatenate([r.cpu_name, remap[c.cpu_name]]),
        cpu_is_op=cpu_is_op,
        cpu_parent=cpu_parent,
        names=names,
        cpu_is_runtime=both(r.cpu_is_runtime, c.cpu_is_runtime, False).astype(bool),
        cpu_is_annotation=both(r.cpu_is_annotation, c.cpu_is_annotation, False).astype(bool),
        cpu_thread=np.concatenate([r_threads, c_threads + thread_base]),
        cpu_kernel=both(r.cpu_kernel, c_kernel, -1).astype(np.int64),
        gpu_op=gpu_op,
        gpu_origin=origin,
        cpu_own=offset,
        op_shapes={**r.op_shapes, **{k + offset: v for k, v in c.op_shapes.items()}},
        op_concrete={**r.op_concrete, **{k + offset: v for k, v in c.op_concrete.items()}},
    )
