"""CPU stacks for evidence: the chain of enclosing slices (Python functions, operators,
annotations, runtime calls) of a CPU slice, and the costliest such stacks of a set of slices.

A stack is a list of names, root first, as in the flame graph, so a finding's stacks can be
looked up there. The profiler's step annotations (``ProfilerStep#12``) are named
``ProfilerStep#*`` in stacks, so the same code in every step is one stack.
"""

from __future__ import annotations

import re

import numpy as np

from aiflame.analysis.schema import Stack
from aiflame.model.trace import TraceData
from aiflame.transforms.correlate import first_open
from aiflame.transforms.segments import depths

STEP_NAME = re.compile(r"^ProfilerStep#\d+$")
ANY_STEP = "ProfilerStep#*"
STACK_DEPTH = 12  # innermost frames kept per stack
TOP_STACKS = 3


class _Index:
    """The stacks of one trace's CPU slices, interned once for all queries: stack ``k`` is
    (``up[k]``, ``name[k]``), the stack of the enclosing slice and this slice's name; ids
    are built level by level with numpy, names only for the stacks a query reports."""

    def __init__(self, t: TraceData) -> None:
        self.names = [ANY_STEP if STEP_NAME.match(n) else n for n in t.names]
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
            key = up * (len(self.names) + 1) + t.cpu_name[level]
            uniq, first, inv = _distinct(key)
            self.of_slice[level] = next_id + inv
            up_parts.append(up[first])
            name_parts.append(t.cpu_name[level][first].astype(np.int64))
            next_id += uniq.size
        self.up = np.concatenate(up_parts)
        self.name = np.concatenate(name_parts)

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


def slice_depths(t: TraceData) -> np.ndarray:
    """Enclosing slices of each CPU slice (computed once per trace)."""
    found = t.__dict__.get("_depths")
    if found is None:
        found = t.__dict__["_depths"] = depths(t.cpu_parent)
    return found


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
