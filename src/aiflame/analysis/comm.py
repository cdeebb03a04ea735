"""Which GPU kernels are communication, beyond the names the sources recognise.

The sources mark a kernel as communication by its name (:func:`aiflame.model.trace.
is_communication`: collective libraries, expert-parallel namespaces, dispatch/combine,
all-to-all, send/receive... function names). Two more signs are read here, on the whole
trace:

- a kernel on a **communication stream** (one where recognised communication holds at least
  ``STREAM_SHARE`` of the kernel time) is communication too, unless its name says it
  computes (GEMM, casts, copies, norms...): a library's own helper kernels between its
  transfers;
- the user's **patterns** (``aiflame analyze --comm-kernels REGEX``, any case): kernels of a
  library no rule knows.

:func:`apply` rewrites the trace's kinds once, before any analysis reads them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import numpy as np

from aiflame.errors import AiflameError
from aiflame.model.trace import Kind, TraceData, kernel_function

STREAM_SHARE = 0.9
MIN_STREAM_KERNELS = 2  # recognised communication kernels a stream needs
# Names that say a kernel computes: never communication by its stream alone.
_COMPUTES = re.compile(
    r"gemm|gemv|matmul|mma|conv|elementwise|vectorized|reduce_kernel|norm|softmax|attn|"
    r"attention|flash|transpose|cast|copy|fill|quant|topk|sort|index|embed|rotary|silu|gelu|"
    r"swiglu|triton_|cutlass|cublas|cudnn|xmma|cijk_|fused|expand|gather_kernel|scatter_kernel",
    re.IGNORECASE,
)
# How an exposed-communication item is named: the collective it runs.
_COLLECTIVE = re.compile(
    r"all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|broadcast|send_?recv|sendrecv|"
    r"reduce|send|recv",
    re.I,
)


def compile_patterns(patterns: Iterable[str]) -> list[re.Pattern[str]]:
    """The user's patterns as case-insensitive regexes; a bad one is one error line."""
    out = []
    for p in patterns:
        try:
            out.append(re.compile(p, re.IGNORECASE))
        except re.error as e:
            raise AiflameError(f"--comm-kernels '{p}': not a regular expression ({e})") from None
    return out


def kinds(t: TraceData, patterns: Sequence[re.Pattern[str]] = ()) -> np.ndarray:
    """The trace's kinds with communication recognised by stream and by ``patterns``."""
    kind = t.gpu_kind.copy()
    kernel = (kind == Kind.COMPUTE) | (kind == Kind.COMM)
    if not np.any(kernel):
        return kind
    names = t.names
    used = np.unique(t.gpu_name[kernel])
    if patterns:
        mine = np.zeros(len(names), dtype=bool)
        for i in used.tolist():
            mine[i] = any(p.search(names[i]) for p in patterns)
        kind[kernel & mine[t.gpu_name]] = Kind.COMM
    if t.gpu_stream is not None:
        computes = np.zeros(len(names), dtype=bool)
        for i in used.tolist():
            computes[i] = _COMPUTES.search(kernel_function(names[i])[0]) is not None
        comm = kind == Kind.COMM
        for s in np.unique(t.gpu_stream[kernel]).tolist():
            on = kernel & (t.gpu_stream == s)
            n_comm = int(np.count_nonzero(on & comm))
            ns = float(t.gpu_dur[on].sum())
            if n_comm < MIN_STREAM_KERNELS or not ns:
                continue
            if float(t.gpu_dur[on & comm].sum()) >= STREAM_SHARE * ns:
                kind[on & ~comm & ~computes[t.gpu_name]] = Kind.COMM
    return kind


def apply(t: TraceData, patterns: Sequence[re.Pattern[str]] = ()) -> TraceData:
    """Rewrite ``t.gpu_kind`` with :func:`kinds` (in place: every later reader of the trace,
    the report's charts included, sees the same kinds); returns ``t``."""
    t.gpu_kind = kinds(t, patterns)
    return t


def collective(name: str) -> str:
    """What a communication kernel runs, for the report: ``allreduce``, ``alltoall``...,
    or its function's name (``dispatch``, ``combine``, ``notify_dispatch``)."""
    function = kernel_function(name)[1]
    m = _COLLECTIVE.search(name if "nccl" in name.lower() or "rccl" in name.lower() else function)
    if m:
        return m.group(0).replace("_", "").lower()
    return function[:60] or name[:60]


def search(names: Iterable[str]) -> str | None:
    """A flame graph search for these communication kernels: ``nccl``/``rccl`` for the
    collective libraries, else their qualified function names (at most 12)."""
    parts: set[str] = set()
    for n in names:
        low = n.lower()
        library = "nccl" in low or "rccl" in low
        parts.add("nccl|rccl" if library else re.escape(kernel_function(n)[0]))
    return "|".join(sorted(parts)[:12]) or None
