"""What produced a trace (PyTorch eager, torch.compile, vLLM, SGLang, JAX, a C++ CUDA/HIP
program), from the names in it: the rules word their fixes for the program's own stack.
"""

from __future__ import annotations

import re

import numpy as np

from aiflame.analysis.schema import Workload
from aiflame.model.trace import TraceData

_SIGNS = (  # (kind, label, pattern over names, evidence), first match wins
    ("vllm", "vLLM", re.compile(r"(^|/)vllm/"), "Python frames of vllm/"),
    ("sglang", "SGLang", re.compile(r"(^|/)sglang/"), "Python frames of sglang/"),
    (
        "torch.compile",
        "PyTorch with torch.compile",
        re.compile(
            r"^triton_(poi|red|per|tem)_|Torch-Compiled Region|CompiledFunction|"
            r"CompiledFxGraph|torch/_inductor/"
        ),
        "Triton kernels and compiled regions of torch.compile",
    ),
    ("pytorch", "PyTorch (eager)", re.compile(r"^aten::"), "PyTorch operators (aten::)"),
    ("jax", "JAX/XLA", re.compile(r"^jit_|XLA|/device:GPU"), "XLA modules and GPU tracks"),
)


def detect(t: TraceData) -> Workload:
    """The workload kind of a trace (``unknown`` when nothing tells)."""
    used = np.zeros(len(t.names), dtype=bool)
    used[t.cpu_name] = True
    used[t.gpu_name] = True
    names = [n for n, u in zip(t.names, used.tolist(), strict=True) if u]
    text = "\n".join(names)  # one name a line: each sign is one scan, in C
    for kind, label, pattern, evidence in _SIGNS:
        if kind == "jax" and t.format != "trace-events":
            continue
        if re.search(pattern.pattern, text, re.MULTILINE):
            return Workload(kind=kind, label=label, evidence=evidence)
    if t.format == "kineto":  # PyTorch's profiler, even where it recorded no operator
        return Workload(kind="pytorch", label="PyTorch", evidence="a PyTorch profiler trace")
    if t.format == "nsys" or t.gpu_ts.size:
        amd = any(n.startswith("hip") for n in names) or any(
            "AMD" in str(d.get("name", "")) or d.get("warpSize") == 64 for d in t.device_info
        )
        kind, api = ("hip-app", "HIP") if amd else ("cuda-app", "CUDA")
        if not any(".py" in n for n in names):
            return Workload(
                kind=kind,
                label=f"a {api} program",
                evidence="GPU work and runtime calls without Python frames or PyTorch operators",
            )
    return Workload(kind="unknown", label="unknown", evidence="nothing in the trace tells")


_FAMILY = {"hip-app": "app", "cuda-app": "app", "vllm": "serving", "sglang": "serving"}
_PYTORCH = ("pytorch", "torch.compile", "vllm", "sglang")


def pick(fixes: dict[str, str], w: Workload) -> str:
    """The fix worded for the workload: its own entry, its family's (``app``, ``serving``),
    PyTorch's for PyTorch-based stacks, else ``default``."""
    for key in (w.kind, _FAMILY.get(w.kind), "pytorch" if w.kind in _PYTORCH else None):
        if key and key in fixes:
            return fixes[key]
    return fixes["default"]
