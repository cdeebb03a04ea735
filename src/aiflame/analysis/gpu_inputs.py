"""GPU PC samples among the inputs of an analysis (HPCToolkit, Nsight Compute, CUPTI dumps,
rocprofv3, iaprof): told apart from traces, and analyzed for stalls (``aiflame analyze``,
``aiflame mcp``)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from aiflame.analysis.gpu_stalls import StallReport, analyze_stalls, has_gpu_samples
from aiflame.errors import AiflameError
from aiflame.model import Profile
from aiflame.sources.inputs import Input
from aiflame.sources.registry import detect, load, load_many

# Formats whose profiles are GPU PC samples (traces go to the trace analysis).
SAMPLE_FORMATS = frozenset({"hpctoolkit", "nsight-compute", "cupti-pc", "rocprofv3-pc", "iaprof"})


def split_inputs(paths: Sequence[str]) -> tuple[list[str], list[str]]:
    """(trace inputs, GPU-sample inputs), in the given order."""
    traces: list[str] = []
    samples: list[str] = []
    for path in paths:
        fmt = ""
        if path != "-":  # stdin can be read once: it stays with the trace reader
            with contextlib.suppress(AiflameError):  # the trace reader gives the clear error
                fmt = detect(Input(path)).FORMAT

        if fmt == "pprof":  # aiflame's own recordings: PC samples if they carry them
            with contextlib.suppress(AiflameError):
                fmt = "gpu-samples" if has_gpu_samples(load(path)) else fmt
        (samples if fmt in SAMPLE_FORMATS or fmt == "gpu-samples" else traces).append(path)
    return traces, samples


def stall_report(paths: Sequence[str], top: int) -> StallReport | None:
    profile: Profile = load_many(paths) if len(paths) > 1 else load(paths[0])
    if not has_gpu_samples(profile):
        return None
    return analyze_stalls(profile, top=min(top, 10))
