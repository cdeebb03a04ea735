"""What the CPU did while the GPU sat idle: every idle gap split among causes, exactly.

For a gap the host caused (``host_wait``, ``sync_wait``: the next launch began after the GPU
ran dry), the launching thread's time during the gap is cut into segments of its innermost
open CPU slice (:func:`aiflame.transforms.segments.innermost_segments`), and each segment's
overlap with the gap is charged to the cause its slice stands for:

===================  ===============================================================
``data_loading``     inside a DataLoader (``enumerate(DataLoader)``, ``torch/utils/data``)
``preprocessing``    inside input preprocessing (image/feature processors, tokenizers,
                     transforms, PIL, OpenCV, SciPy ndimage, ``preprocess``), where the
                     slice launches no GPU work
``collective``       inside a CPU-side collective or barrier (``c10d``, ``nccl:``, ``gloo``,
                     ``MPI_*``)
``sync``             a synchronizing runtime call (device/stream/event synchronize)
``copy``             a memcpy runtime call (synchronous, or staging pageable memory)
``allocation``       ``cudaMalloc``/``cudaFree`` and kin, which synchronize the device
``initialization``   one-time setup (:mod:`coldstart`): runtime calls of ``INIT_CALL_MS``
                     or more, slow first launches of kernels (lazy module loading), library
                     handles; in a cold trace the first allocations and operator calls
``launch_overhead``  a launch call or another runtime call
``cpu_ops``          an operator that launches no GPU work (it computes on the CPU)
``python_overhead``  Python code and operator dispatch between launches
``host_code``        a native frame of the program (an Nsight Systems backtrace) running
                     no runtime call: its own CPU code
``host_free``        after a free of ``FREE_MIN_BYTES`` or more of host memory (the
                     ``[memory]`` events of ``profile_memory=True``), where no operator or
                     runtime call runs: the CPU freeing the last batch
``untraced``         no slice open on the thread, or only an annotation (``ProfilerStep#N``,
                     a ``record_function`` block) with nothing running inside it: the trace
                     does not show what it did (it is not dispatch)
===================  ===============================================================

Innermost first: a runtime call is what it is wherever it runs; then the enclosing context
decides, collective before preprocessing before data loading (preprocessing that a
DataLoader runs in the launching thread is the work to move). A ``sync_wait`` gap's
synchronizing call is charged ``min(gap, time it blocked before the GPU ran dry)``: had the
CPU not waited there, it could have done its next work that much earlier; the rest of the
gap goes to what the CPU did. Gaps the host did not cause are ``launch_latency``
(``kernel_wait``), ``dependency`` (``event_wait``) and ``unlinked``. The parts of each gap
sum to the gap, so the causes sum to the idle time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from aiflame.analysis.calls import is_sync_call, name_mask
from aiflame.analysis.coldstart import one_time
from aiflame.analysis.idle import HOST, SYNC, Gaps
from aiflame.analysis.schema import IdleCause, Stack
from aiflame.analysis.stacks import top_stacks
from aiflame.model.trace import TraceData
from aiflame.transforms.gpu_idle import P_HOST, PARTS, Charges, charge

CAUSES: dict[str, str] = {  # the labels a report shows
    "data_loading": "data loading (DataLoader)",
    "preprocessing": "input preprocessing on the CPU",
    "collective": "CPU waiting in collectives",
    "sync": "CPU blocked in synchronizing calls",
    "copy": "memcpy calls (synchronous or pageable copies)",
    "allocation": "GPU memory allocation and freeing",
    "initialization": "one-time initialization: first launches (module loading), library "
    "handles, first allocations, runtime calls of 50 ms or more",
    "launch_overhead": "kernel launch and other runtime calls",
    "cpu_ops": "operators computing on the CPU",
    "python_overhead": "Python and operator dispatch between launches",
    "host_code": "the program's own CPU code between GPU calls",
    "host_free": "freeing large host memory (CPU tensors such as the last batch)",
    "untraced": "CPU work the trace does not show",
    "launch_latency": "GPU launch latency between queued kernels",
    "dependency": "queued work waiting on a dependency",
    "unlinked": "work launched outside the trace",
}
KEYS = tuple(CAUSES)
INDEX = {k: i for i, k in enumerate(KEYS)}
HOST_CAUSES = frozenset(KEYS[: KEYS.index("untraced") + 1])

# Context of a slice, from its own name or an enclosing slice's (bit flags).
_COLLECTIVE, _DATA, _PREPROCESS = 1, 2, 4
_CONTEXT = (
    (
        _COLLECTIVE,
        re.compile(
            r"c10d::|^nccl:|^gloo:|record_param_comms|ProcessGroup|distributed_c10d|"
            r"torch/distributed/|all_reduce|allreduce|all_gather|reduce_scatter|barrier|^MPI_"
        ),
    ),
    (
        _DATA,
        re.compile(
            r"DataLoader|dataloader|torch/utils/data/|_DataLoaderIter|datapipes?/|webdataset"
        ),
    ),
    (
        _PREPROCESS,
        re.compile(
            r"image_processing|feature_extraction|processing_utils|tokenization|tokenizer|"
            r"torchvision/transforms|/transforms\.py|PIL/|cv2|scipy/ndimage|librosa|"
            r"torchaudio|preprocess|Preprocess|processor\.py|\(image_utils"
        ),
    ),
)
# Operators that only make a view or an empty tensor, and autograd's own nodes: when one is
# all the CPU runs, that is dispatch, not computation.
_DISPATCH_OPS = re.compile(
    r"^(autograd|torch::autograd)::|^aten::(view|_unsafe_view|view_as|reshape|_reshape_alias|permute|transpose|t|expand|"
    r"expand_as|slice|select|unsqueeze|squeeze|as_strided|empty|empty_like|empty_strided|"
    r"detach|alias|split|split_with_sizes|chunk|narrow|unbind|flatten|unflatten|contiguous|"
    r"lift_fresh|resolve_conj|resolve_neg|set_|resize_|movedim|swapaxes|to|lift|numpy_T|"
    r"_has_compatible_shallow_copy_type|is_nonzero|item|_local_scalar_dense)_?$"
)
_FLAG_OF = {"collective": _COLLECTIVE, "data": _DATA, "preprocess": _PREPROCESS}
# One pass over each name: the first context it names (names rarely name two).
_ANY_CONTEXT = re.compile(
    "|".join(f"(?P<{key}>{p.pattern})" for key, (_, p) in zip(_FLAG_OF, _CONTEXT, strict=True))
)
_MEMCPY = re.compile(r"^(cuda|hip|cu)Memcpy|^cudaMemcpy|Memcpy[A-Z0-9]|MemcpyAsync", re.I)
_ALLOC = re.compile(r"^(cuda|hip|cu)(Malloc|Free|MemAlloc|MemFree|HostAlloc|MallocHost|FreeHost)")


@dataclass
class Explained:
    """Parts of the idle gaps: gap index, CPU slice charged (-1: none), cause index, ns."""

    gap: np.ndarray
    slice: np.ndarray
    cause: np.ndarray
    ns: np.ndarray

    def of(self, *causes: str) -> np.ndarray:
        """Mask of the parts charged to these causes."""
        want = np.zeros(len(KEYS), dtype=bool)
        want[[INDEX[c] for c in causes]] = True
        return want[self.cause]


@dataclass
class _Within:
    """Some CPU slices, closed under enclosing ones (``keep``, global ids), with their
    parents as positions in ``keep``: the part of a trace a question needs."""

    keep: np.ndarray
    parent: np.ndarray
    local: np.ndarray  # global id -> position in keep, -1 outside


def _within(t: TraceData, keep: np.ndarray) -> _Within:
    local = np.full(t.cpu_ts.size, -1, dtype=np.int64)
    local[keep] = np.arange(keep.size)
    par = t.cpu_parent[keep]
    return _Within(keep, np.where(par >= 0, local[np.maximum(par, 0)], -1), local)


def _or_up(flags: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Each flag ORed with those of all its ancestors (pointer jumping: log(depth) passes)."""
    flags = flags.copy()
    up = parent.copy()
    while True:
        has = np.nonzero(up >= 0)[0]
        if has.size == 0:
            return flags
        flags[has] |= flags[up[has]]
        up[has] = up[up[has]]


def _context_flags(t: TraceData, w: _Within) -> np.ndarray:
    """Per slice of ``w``: the context flags of it and all its enclosing slices."""
    own = np.zeros(len(t.names), dtype=np.int8)
    names = t.names
    for i in np.unique(t.cpu_name[w.keep]).tolist():
        m = _ANY_CONTEXT.search(names[i])
        if m is not None:
            own[i] = _FLAG_OF[m.lastgroup or ""]
    return _or_up(own[t.cpu_name[w.keep]], w.parent)


def launching(t: TraceData) -> np.ndarray:
    """Per CPU slice: does it (or a slice inside it) launch GPU work?"""
    out = np.zeros(t.cpu_ts.size, dtype=bool)
    cur = np.unique(t.gpu_launch[t.gpu_launch >= 0])
    while cur.size:
        cur = cur[~out[cur]]
        out[cur] = True
        cur = t.cpu_parent[cur]
        cur = np.unique(cur[cur >= 0])
    return out


def slice_causes(t: TraceData, slices: np.ndarray, within: np.ndarray | None = None) -> np.ndarray:
    """The cause index of each CPU slice in ``slices`` (-1: untraced) as the innermost one.

    ``within``: slices closed under enclosing ones that hold all of ``slices`` (the work
    is done on those only); all slices by default.
    """
    out = np.full(slices.size, INDEX["untraced"], dtype=np.int8)
    ok = slices >= 0
    if not np.any(ok):
        return out
    w = _within(t, np.arange(t.cpu_ts.size) if within is None else within)
    s, back = np.unique(slices[ok], return_inverse=True)  # each slice classified once
    at = w.local[s]
    name = t.cpu_name[s]
    runtime = t.cpu_is_runtime[s] if t.cpu_is_runtime is not None else np.zeros(s.size, bool)
    ctx = _context_flags(t, w)[at]
    rt_names = name[runtime]
    sync = name_mask(t, is_sync_call, rt_names)[name]
    copy = name_mask(t, _MEMCPY.search, rt_names)[name]
    alloc = name_mask(t, _ALLOC.search, rt_names)[name]
    # An operator computing on the CPU: it launches nothing and neither does an operator
    # around it (an empty/view inside a GPU operator is that operator's dispatch).
    launches = launching(t)[w.keep]
    mark = t.cpu_is_op[w.keep] & launches
    in_gpu_op = _or_up(np.where(w.parent >= 0, mark[np.maximum(w.parent, 0)], False), w.parent)
    cpu_op = t.cpu_is_op[s] & ~launches[at] & ~in_gpu_op[at]
    cpu_op &= ~name_mask(t, _DISPATCH_OPS.search, name[cpu_op])[name]
    cause = np.full(s.size, INDEX["python_overhead"], dtype=np.int8)
    # Not dispatch: an annotation (ProfilerStep#N, a record_function block; in traces of
    # 2021 an "operator" without a namespace) with nothing inside it running: the work
    # there is not in the trace. A native frame of a program's backtrace (Nsight Systems):
    # its own code.
    annotation = name_mask(t, lambda n: "::" not in n, name[t.cpu_is_op[s]])[name]
    annotation &= t.cpu_is_op[s]
    if t.cpu_is_annotation is not None:
        annotation |= t.cpu_is_annotation[s]
    cause[annotation] = INDEX["untraced"]
    if t.format == "nsys":
        cause[~t.cpu_is_op[s] & ~runtime] = INDEX["host_code"]
    cause[cpu_op] = INDEX["cpu_ops"]
    cause[(ctx & _DATA) > 0] = INDEX["data_loading"]
    # Inside preprocessing (e.g. in a DataLoader's fetch), but not the model work an
    # engine's input step launches (vLLM's _preprocess runs the embedding on the GPU).
    on_gpu = launches[at] | in_gpu_op[at]
    cause[((ctx & _PREPROCESS) > 0) & ~on_gpu] = INDEX["preprocessing"]
    cause[(ctx & _COLLECTIVE) > 0] = INDEX["collective"]
    cause[runtime] = INDEX["launch_overhead"]
    cause[runtime & alloc] = INDEX["allocation"]
    cause[runtime & sync] = INDEX["sync"]
    cause[runtime & copy] = INDEX["copy"]
    # Setup a warm process does not pay again (first launches, handles, first allocations,
    # an operator's first call creating its library's handle): wherever it runs.
    first = one_time(t, launching(t))[s] > 0
    cause[first & ~(runtime & (sync | copy))] = INDEX["initialization"]
    out[ok] = cause[back]
    return out


def explain(t: TraceData, g: Gaps) -> Explained:
    """Every idle gap cut into parts charged to causes: the CPU slices
    :func:`~aiflame.transforms.gpu_idle.charge` charges, each by what its slice stands for
    (:func:`slice_causes`), the other parts by their kind; then what follows a large free
    of host memory in a part no operator explains is that free's (:func:`_frees`)."""
    c = charge(t, g)
    by_part = np.array([INDEX.get(k, -1) for k in PARTS], dtype=np.int8)
    cause = by_part[c.part]
    host = c.part == P_HOST
    if np.any(host):
        cause[host] = slice_causes(t, c.slice[host], c.within)
    e = Explained(c.gap, c.slice, cause, c.ns)
    return _frees(t, g, c, e) if t.host_free_ts is not None and t.host_free_ts.size else e


# Freed at once, this much host memory takes the CPU long enough to count (unmapping a
# batch the DataLoader's workers passed in shared memory: milliseconds for tens of MB).
FREE_MIN_BYTES = 1 << 20


def _frees(t: TraceData, g: Gaps, c: Charges, e: Explained) -> Explained:
    """Split the parts where the CPU ran no operator and no runtime call (Python, an
    annotation, no slice) at the first large host free inside them: from the free to the
    part's end, the time is the free's (``host_free``)."""
    assert t.host_free_ts is not None and t.host_free_thread is not None
    assert t.host_free_bytes is not None and c.lo is not None and c.hi is not None
    big = t.host_free_bytes >= FREE_MIN_BYTES
    if not np.any(big):
        return e
    f_ts, f_th = t.host_free_ts[big], t.host_free_thread[big]
    order = np.argsort(f_ts, kind="stable")
    f_ts, f_th = f_ts[order], f_th[order]
    # untraced (no slice, or an annotation with nothing running inside), or Python's own
    # time; not an operator's (it frees what it works on)
    loose = e.cause == INDEX["untraced"]
    if t.cpu_ts.size:
        py = (e.cause == INDEX["python_overhead"]) & (c.slice >= 0)
        py &= ~t.cpu_is_op[np.maximum(c.slice, 0)]
        loose |= py
    cand = np.nonzero(loose & (c.hi > c.lo))[0]
    if cand.size == 0:
        return e
    thread = g.thread[c.gap[cand]]
    at = np.full(cand.size, -1, dtype=np.int64)  # the first free inside each part
    for th in np.unique(thread).tolist():
        q = np.nonzero(thread == th)[0]
        mine = f_ts[f_th == th]
        if mine.size == 0:
            continue
        k = np.searchsorted(mine, c.lo[cand[q]])
        inside = (k < mine.size) & (mine[np.minimum(k, mine.size - 1)] < c.hi[cand[q]])
        at[q[inside]] = mine[k[inside]]
    hit = at >= 0
    if not np.any(hit):
        return e
    p = cand[hit]
    share = (c.hi[p] - at[hit]) / (c.hi[p] - c.lo[p])
    moved = np.floor(e.ns[p] * share)
    ns = e.ns.copy()
    ns[p] -= moved
    return Explained(
        np.concatenate([e.gap, e.gap[p]]),
        np.concatenate([e.slice, e.slice[p]]),
        np.concatenate([e.cause, np.full(p.size, INDEX["host_free"], np.int8)]),
        np.concatenate([ns, moved]),
    )


def dominant(e: Explained, gaps: int) -> np.ndarray:
    """Per gap: the cause with the largest part of it (-1 for a gap without parts)."""
    out = np.full(gaps, -1, dtype=np.int64)
    if e.gap.size == 0:
        return out
    table = np.zeros((gaps, len(KEYS)))
    np.add.at(table, (e.gap, e.cause.astype(np.int64)), e.ns)
    has = table.sum(axis=1) > 0
    out[has] = np.argmax(table[has], axis=1)
    return out


def cause_rows(t: TraceData, e: Explained, gaps: int, total_ns: float) -> list[IdleCause]:
    """Idle time per cause with its top stacks, largest first."""
    rows = []
    main = dominant(e, gaps)
    for k, key in enumerate(KEYS):
        m = e.cause == k
        ns = float(e.ns[m].sum())
        if ns <= 0:
            continue
        rows.append(
            IdleCause(
                cause=key,
                label=CAUSES[key],
                time_us=ns / 1e3,
                share=ns / total_ns if total_ns else 0.0,
                gaps=int(np.count_nonzero(main == k)),
                top_stacks=top_stacks(t, e.slice[m], e.ns[m]),
            )
        )
    rows.sort(key=lambda r: -r.time_us)
    return rows


def stacks_by_category(t: TraceData, g: Gaps, e: Explained) -> dict[str, list[Stack]]:
    """The top stacks of the host and sync waits: what the CPU ran during them."""
    out = {}
    for cat, key in ((HOST, "host_wait"), (SYNC, "sync_wait")):
        m = (g.category[e.gap] == cat) & (e.slice >= 0)
        if np.any(m):
            out[key] = top_stacks(t, e.slice[m], e.ns[m])
    return out
