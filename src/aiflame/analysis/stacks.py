"""CPU stacks for evidence: the chain of enclosing slices (Python functions, operators,
annotations, runtime calls) of a CPU slice, and the costliest such stacks of a set of slices.

A stack is a list of names, root first, as in the flame graph, so a finding's stacks can be
looked up there. The profiler's step annotations (``ProfilerStep#12``) are named
``ProfilerStep#*`` in stacks and module instances (``nn.Module: Linear_7``) by their class
(``nn.Module: Linear``), so the same code in every step and every layer is one stack, as in
the flame graph, whose module instances merge.
"""

from __future__ import annotations

import re

import numpy as np

from aiflame.analysis.schema import Stack
from aiflame.model.trace import TraceData
from aiflame.transforms.correlate import first_open
from aiflame.transforms.gpu_idle import slice_depths

STEP_NAME = re.compile(r"^ProfilerStep#\d+$")
_INSTANCE = re.compile(r"^(nn\.Module: [A-Za-z_][\w.]*?)_\d+$")
ANY_STEP = "ProfilerStep#*"
STACK_DEPTH = 12  # innermost frames kept per stack
TOP_STACKS = 3


def _one_of_many(name: str) -> str:
    """A name as stacks print it: ``ProfilerStep#*`` for every step, ``nn.Module: Linear``
    for every instance of a module (as the flame graph merges them)."""
    if STEP_NAME.match(name):
        return ANY_STEP
    m = _INSTANCE.match(name)
    return m.group(1) if m else name


_GLUE = re.compile(r"^(_call_impl|_wrapped_call_impl|decorate_context|inner|_fn|wrapper)\b")
_PY_METHOD = re.compile(r"\(\d+\): (?P<func>.+)$")  # file.py(12): fn, a function with source


def _module_call_owner(t: TraceData) -> np.ndarray:
    """Per CPU slice: itself, or for a module frame (``nn.Module: X_N``) and the call
    machinery under it (``_call_impl``...), the method the call runs (its first child
    with a source file, through the machinery)."""
    n = t.cpu_ts.size
    owner = np.arange(n)
    names = t.names
    module = np.fromiter((x.startswith("nn.Module: ") for x in names), bool, len(names))
    if n == 0 or not np.any(module[t.cpu_name]):
        return owner
    func = [m.group("func") if (m := _PY_METHOD.search(x)) else None for x in names]
    glue = np.fromiter((f is not None and _GLUE.match(f) is not None for f in func), bool)
    method = np.fromiter((f is not None for f in func), bool, len(names)) & ~glue
    parent = t.cpu_parent
    up = np.maximum(parent, 0)
    # a module frame, or machinery under one (a few frames deep: a handful of passes)
    in_call = module[t.cpu_name]
    under = glue[t.cpu_name] & (parent >= 0)
    for _ in range(16):
        grown = in_call | (under & in_call[up])
        if np.array_equal(grown, in_call):
            break
        in_call = grown
    stand = np.full(n, -1, dtype=np.int64)
    kids = np.nonzero((parent >= 0) & method[t.cpu_name] & ~module[t.cpu_name])[0]
    kids = kids[in_call[parent[kids]]]
    kids = kids[np.argsort(-t.cpu_ts[kids], kind="stable")]
    stand[parent[kids]] = kids  # the earliest child is written last: it wins
    for _ in range(16):  # a machinery frame's method stands for the frames above it too
        c = np.nonzero(in_call & ~module[t.cpu_name] & (stand >= 0) & (parent >= 0))[0]
        p = parent[c]
        ok = in_call[p] & (stand[p] < 0)
        if not np.any(ok):
            break
        stand[p[ok]] = stand[c[ok]]
    folded = in_call & (stand >= 0)
    owner[folded] = stand[folded]
    return owner


class _Index:
    """The stacks of one trace's CPU slices, interned once for all queries: stack ``k`` is
    (``up[k]``, ``name[k]``), the stack of the enclosing slice and this slice's name; ids
    are built level by level with numpy, names only for the stacks a query reports."""

    def __init__(self, t: TraceData) -> None:
        self.names = [_one_of_many(n) for n in t.names]
        # names that read the same are one (every step's ProfilerStep, every instance of a
        # module): the id of the first of them
        first: dict[str, int] = {}
        canon = np.fromiter(
            (first.setdefault(n, i) for i, n in enumerate(self.names)), np.int64, len(self.names)
        )
        n = t.cpu_ts.size
        self.of_slice = np.zeros(n, dtype=np.int64)  # stack id of each slice (0: empty)
        depth = slice_depths(t)
        up_parts, name_parts = [np.zeros(1, np.int64)], [np.full(1, -1, np.int64)]
        next_id = 1
        order = np.argsort(depth, kind="stable")
        bounds = np.searchsorted(depth[order], np.arange(int(depth.max()) + 2 if n else 1))
        for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            level = order[lo:hi]
            if level.size == 0:
                continue
            par = t.cpu_parent[level]
            up = np.where(par >= 0, self.of_slice[np.maximum(par, 0)], 0)
            name = canon[t.cpu_name[level]]
            key = up * (len(self.names) + 1) + name
            uniq, at, inv = _distinct(key)
            self.of_slice[level] = next_id + inv
            up_parts.append(up[at])
            name_parts.append(name[at])
            next_id += uniq.size
        self.up = np.concatenate(up_parts)
        self.name = np.concatenate(name_parts)
        # A module call's own time (its module frame, torch's call machinery) is its
        # method's, as the flame graph merges them into one ``Class > method`` frame.
        self.of_slice = self.of_slice[_module_call_owner(t)]

    def cut(self, k: int) -> tuple[str, ...]:
        """The innermost ``STACK_DEPTH`` names of stack ``k``, root first."""
        out: list[str] = []
        while k > 0 and len(out) < STACK_DEPTH:
            out.append(self.names[int(self.name[k])])
            k = int(self.up[k])
        return tuple(reversed(out))


def _distinct(key: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``np.unique(key, return_index=True, return_inverse=True)``, by a dict for the few
    keys of a level of slices nested thousands deep (numpy's sort costs more there)."""
    if key.size > 16:
        return np.unique(key, return_index=True, return_inverse=True)
    seen: dict[int, int] = {}
    first: list[int] = []
    inv: list[int] = []
    for i, k in enumerate(key.tolist()):
        j = seen.get(k)
        if j is None:
            j = seen[k] = len(first)
            first.append(i)
        inv.append(j)
    return np.asarray(list(seen), dtype=np.int64), np.asarray(first), np.asarray(inv)


def _index(t: TraceData) -> _Index:
    found = t.__dict__.get("_stack_index")
    if found is None:
        found = t.__dict__["_stack_index"] = _Index(t)
    return found


def stack_of(t: TraceData, i: int, depth: int = STACK_DEPTH) -> list[str]:
    """Names of slice ``i`` and its enclosing slices, root first (the innermost ``depth``)."""
    out: list[str] = []
    while i >= 0 and len(out) < depth:
        out.append(t.names[int(t.cpu_name[i])])
        i = int(t.cpu_parent[i])
    return out[::-1]


def top_stacks(
    t: TraceData,
    slices: np.ndarray,
    cost_ns: np.ndarray,
    n: int = TOP_STACKS,
    include_self: bool = True,
) -> list[Stack]:
    """The ``n`` costliest distinct stacks of ``slices`` (CPU slice ids, -1 skipped), each
    with its summed cost (us) and how many slices it stands for. With ``include_self`` the
    slice itself is the innermost frame, else its parent is."""
    if slices.size == 0 or t.cpu_ts.size == 0:
        return []
    ok = slices >= 0
    starts = slices[ok] if include_self else t.cpu_parent[slices[ok]]
    index = _index(t)
    sid = np.where(starts >= 0, index.of_slice[np.maximum(starts, 0)], 0)
    if sid.size > len(index.up) // 8:  # many: sums by bincount over all ids, no sort
        ids = np.arange(len(index.up))
        cost = np.bincount(sid, weights=cost_ns[ok], minlength=ids.size)
        count = np.bincount(sid, minlength=ids.size)
    else:
        ids, inv = np.unique(sid, return_inverse=True)
        cost = np.bincount(inv, weights=cost_ns[ok], minlength=ids.size)
        count = np.bincount(inv, minlength=ids.size)
    cost[ids == 0] = 0.0  # the empty stack
    want = min(8 * n, int(np.count_nonzero(cost)))
    if want == 0:
        return []
    top = np.argpartition(-cost, want - 1)[:want]
    top = top[np.argsort(-cost[top], kind="stable")]
    # Stacks equal in their innermost STACK_DEPTH names are one: merge the candidates.
    by_stack: dict[tuple[str, ...], list[float]] = {}
    for k in top.tolist():
        key = index.cut(int(ids[k]))
        if not key:
            continue
        entry = by_stack.setdefault(key, [0.0, 0])
        entry[0] += float(cost[k])
        entry[1] += int(count[k])
    ranked = sorted(by_stack.items(), key=lambda kv: -kv[1][0])[:n]
    return [Stack(stack=list(k), cost_us=v[0] / 1e3, count=int(v[1])) for k, v in ranked]


def innermost_at(t: TraceData, thread: np.ndarray, when: np.ndarray) -> np.ndarray:
    """For each (thread, time): the innermost CPU slice on that thread running then, or -1."""
    out = np.full(when.shape[0], -1, dtype=np.int64)
    if t.cpu_ts.size == 0 or when.size == 0:
        return out
    threads = t.threads()
    end = t.cpu_ts + t.cpu_dur
    order = np.lexsort((t.cpu_ts, threads))
    th_sorted = threads[order]
    for th in np.unique(thread).tolist():
        lo, hi = np.searchsorted(th_sorted, [th, th + 1])
        if lo == hi:
            continue
        mine = order[lo:hi]
        q = np.nonzero(thread == th)[0]
        k = np.searchsorted(t.cpu_ts[mine], when[q], side="right") - 1
        cur = np.where(k >= 0, mine[np.maximum(k, 0)], -1)
        # The last slice starting before the point, or one of its ancestors, contains it
        # (slices on a thread nest): the first of them still running then.
        out[q] = first_open(t.cpu_parent, end, cur, when[q])
    return out
