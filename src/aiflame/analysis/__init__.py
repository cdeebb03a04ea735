"""Analysis of GPU timeline traces: time breakdown, idle causes, launch overhead, syncs,
copies, kernels and ops, FLOPs and roofline, and findings with the fix to try.

The library call is :func:`analyze`: traces (paths, read through the sources registry, or
:class:`~aiflame.model.trace.TraceData`) in, a typed :class:`~aiflame.analysis.schema.Report`
out (``schema.to_json(report)`` for its JSON). Everything works on plain columns, whatever
the input format.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from aiflame.model.trace import TraceData

if TYPE_CHECKING:
    from aiflame.analysis.report import Options
    from aiflame.analysis.schema import Report
    from aiflame.sources.trace_input import TraceInput

__all__ = ["analyze", "read"]


def read(
    path: str, capture: str | TraceInput | TraceData | None = None, **flame_options: bool
) -> TraceInput:
    """One trace through the sources registry; with ``capture`` (the trace of the CUDA/HIP
    graph capture, a path or its TraceData), its graph replays hung under the captured ops.
    ``flame_options`` (``module_instances``, ``merge_steps``) shape its flame graph. Bad
    input raises one :class:`~aiflame.errors.InputError`."""
    from aiflame.sources.registry import load_trace_input
    from aiflame.transforms.graph_capture import attach_capture

    found = load_trace_input(path, **flame_options)
    if capture is None:
        return found
    cap = load_trace_input(capture, kernel_args=True) if isinstance(capture, str) else capture
    cap_trace = cap if isinstance(cap, TraceData) else cap.trace
    attached = attach_capture(found.trace, cap_trace)
    t = attached.trace
    if not attached.replayed:
        t.notes.append("a capture trace was given, but this trace has no graph replays")
    elif attached.matched < attached.replayed:
        t.notes.append(
            f"the capture trace matched {attached.matched:,} of the {attached.replayed:,} "
            "replayed graph activities (the rest keep no operator)"
        )
    if attached.ambiguous:
        t.notes.append(
            f"{attached.ambiguous:,} graph launches fit more than one graph of the capture "
            "trace (graphs of other batch sizes launch the same kernels): matched to the first "
            "that fits; their operators' FLOPs rates are reported but no roofline finding is "
            "drawn from them"
        )
    if attached.matched and t.gpu_origin is not None and not isinstance(cap, TraceData):
        _replay_flame(found, cap, t.gpu_origin - found.trace.cpu_ts.size)
    found.trace = t
    return found


def _replay_flame(found: TraceInput, capture: TraceInput, origin: np.ndarray) -> None:
    """The flame graph of a Kineto replay trace with its kernels under the capture."""
    if found.format != "kineto" or capture.format != "kineto":
        return
    from aiflame.sources.kineto import importer as kineto

    found.profile = lambda: kineto.replay_profile(found, capture, np.maximum(origin, -1))


def analyze(
    inputs: Sequence[str | TraceData],
    options: Options | None = None,
    capture: str | TraceData | None = None,
) -> Report:
    """The report of these traces (one per rank), as ``aiflame analyze`` writes it."""
    from aiflame.analysis.report import analyze as analyze_traces

    traces = [read(i, capture).trace if isinstance(i, str) else i for i in inputs]
    where = capture if isinstance(capture, str) else ("given" if capture is not None else None)
    return analyze_traces(traces, options=options, captures=[where] * len(traces))
