"""One-time initialization a trace records: what a warm process does not pay again.

A process's first calls set things up that later calls reuse; a trace that starts cold
(the model's first call, the first steps of a job) shows that cost as CPU work while the
GPU idles, and it is not the steady state's problem:

- **runtime calls of ``INIT_CALL_MS`` or more**: CUDA context creation (``cudaFree(0)``,
  the first call of a process), cuDNN's benchmark, loading a library's kernels;
- **the first launch of each kernel** taking ``FIRST_LAUNCH_MS`` or more: with lazy module
  loading (``CUDA_MODULE_LOADING=LAZY``, the default since CUDA 11.7) a kernel's module is
  loaded when it is first launched, 3-18 ms a kernel on an A100, where later launches take
  microseconds;
- **initialization calls by name**: module and library loading (``cuModuleLoad*``,
  ``cuLibraryLoad*``, ``cuModuleGetFunction``), context creation (``cuInit``,
  ``cuDevicePrimaryCtxRetain``), library handles (``cublasCreate``, ``cublasLtCreate``,
  ``cudnnCreate``, ``miopenCreate``, ``rocblas_create_handle``...), NCCL communicators,
  graph instantiation;
- in a trace that shows any of these (a **cold** trace): **the first allocations** (the
  caching allocator's ``cudaMalloc`` calls while its pools fill), and the **first call of
  each operator** whose own CPU time is ``FIRST_LAUNCH_MS`` or more (cuBLAS handle and
  workspace creation inside the first ``aten::mm``, cuDNN's algorithm search).

The fix is the same for all: profile after a warm-up, or pay the setup before it matters
(``CUDA_MODULE_LOADING=EAGER``, a warm-up request).
"""

from __future__ import annotations

import re

import numpy as np

from aiflame.analysis.calls import name_mask
from aiflame.model.trace import Kind, TraceData

INIT_CALL_MS = 50
FIRST_LAUNCH_MS = 1.0
# What a one-time slice is (one_time's values; 0: not one-time), as a report names them.
KINDS = (
    "",
    "runtime calls of 50 ms or more (context creation, cuDNN setup)",
    "first launches of kernels (lazy module loading)",
    "module loading, library handles, communicators",
    "first allocations (the caching allocator filling its pools)",
    "first calls of operators (library handles, workspaces, algorithm search)",
)
LONG_CALL, FIRST_LAUNCH, SETUP_CALL, FIRST_ALLOC, FIRST_OP = range(1, 6)
_INIT_CALL = re.compile(
    r"^cuInit$|^(cu|hip)(Module|Library)Load|^cuModuleGetFunction|^cuLibraryGetKernel|"
    r"^cuDevicePrimaryCtxRetain|^cuCtxCreate|^hipInit$|^(cuda|hip)GraphInstantiate|"
    r"^cublas(Lt)?Create|^cudnnCreate|^cusparseCreate|^cusolver\w*Create|^cufft(Create|Plan)|"
    r"^miopenCreate|^rocblas_create_handle|^hipblas(Lt)?Create|^nccl(CommInit|CommSplit)"
)
# Calls that take long for what they wait on or move, not for setting anything up.
_WAITS = re.compile(r"Synchronize|Memcpy|Memset|Wait|Query", re.I)
_MALLOC = re.compile(r"^(cuda|hip|cu)(Malloc|MemAlloc|HostAlloc|MallocHost|MallocManaged)")


def _first_of_each(keys: np.ndarray, ts: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Of ``ids`` (slices), the earliest of each key."""
    if ids.size == 0:
        return ids
    order = np.lexsort((ts, keys))
    keys, ids = keys[order], ids[order]
    return ids[np.r_[True, keys[1:] != keys[:-1]]]


def one_time(t: TraceData, launching: np.ndarray) -> np.ndarray:
    """Per CPU slice: what one-time initialization its own time is (an index into
    ``KINDS``, 0: none; see the module docstring). ``launching``: per slice, does it launch
    GPU work (only such an operator's first call sets a GPU library up). Computed once per
    trace."""
    found = t.__dict__.get("_one_time")
    if found is not None:
        return found
    n = t.cpu_ts.size
    out = np.zeros(n, dtype=np.int8)
    runtime = t.cpu_is_runtime if t.cpu_is_runtime is not None else np.zeros(n, bool)
    own = np.arange(n) < t.own_slices()
    rt = np.nonzero(runtime & own)[0]
    if rt.size:
        rt_names = t.cpu_name[rt]
        waits = name_mask(t, _WAITS.search, rt_names)[rt_names]
        out[rt[~waits & (t.cpu_dur[rt] >= INIT_CALL_MS * 1_000_000)]] = LONG_CALL
    # The first launch of each kernel, when it is slow: the kernel's module was loaded.
    kernel = (t.gpu_kind == Kind.COMPUTE) | (t.gpu_kind == Kind.COMM)
    one = np.nonzero((t.gpu_launch >= 0) & kernel)[0]
    if one.size:
        calls, count = np.unique(t.gpu_launch[one], return_counts=True)
        single = calls[count == 1]  # a graph launch runs many: not a kernel's launch
        act = one[np.isin(t.gpu_launch[one], single)]
        call = t.gpu_launch[act]
        first = _first_of_each(t.gpu_name[act], t.cpu_ts[call], call)
        out[first[t.cpu_dur[first] >= FIRST_LAUNCH_MS * 1e6]] = FIRST_LAUNCH
    if rt.size:
        rt_names = t.cpu_name[rt]
        out[rt[name_mask(t, _INIT_CALL.search, rt_names)[rt_names]]] = SETUP_CALL
    if np.any(out):  # a cold trace: its first allocations and first op calls too
        if rt.size:
            rt_names = t.cpu_name[rt]
            alloc = rt[name_mask(t, _MALLOC.search, rt_names)[rt_names]]
            out[alloc[out[alloc] == 0]] = FIRST_ALLOC
        ops = np.nonzero(t.cpu_is_op & own & launching)[0]
        first_ops = _first_of_each(t.cpu_name[ops], t.cpu_ts[ops], ops)
        has_parent = t.cpu_parent >= 0
        inner = np.bincount(t.cpu_parent[has_parent], weights=t.cpu_dur[has_parent], minlength=n)
        own_ns = t.cpu_dur[first_ops] - inner[first_ops]
        out[first_ops[own_ns >= FIRST_LAUNCH_MS * 1e6]] = FIRST_OP
    t.__dict__["_one_time"] = out
    return out
