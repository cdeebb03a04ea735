"""CPU stacks for evidence: the chain of enclosing slices (Python functions, operators,
annotations, runtime calls) of a CPU slice, and the costliest such stacks of a set of slices.

A stack is a list of names, root first, as in the flame graph, so a finding's stacks can be
looked up there.
"""

from __future__ import annotations

import numpy as np

from aiflame.analysis.trace import TraceData

STACK_DEPTH = 12  # innermost frames kept per stack
TOP_STACKS = 3


def stack_of(t: TraceData, i: int, depth: int = STACK_DEPTH) -> list[str]:
    """Names of slice ``i`` and its enclosing slices, root first (the innermost ``depth``)."""
    out = []
    while i >= 0 and len(out) < depth:
        out.append(t.names[int(t.cpu_name[i])])
        i = int(t.cpu_parent[i])
    return out[::-1]


def top_stacks(
    t: TraceData,
    slices: np.ndarray,
    cost_ns: np.ndarray,
    n: int = TOP_STACKS,
    key: str = "cost_us",
    include_self: bool = True,
) -> list[dict]:
    """The ``n`` costliest distinct stacks of ``slices`` (CPU slice ids, -1 skipped).

    Each entry: ``{"stack": [...], key: summed cost in us, "count": slices}``. With
    ``include_self`` the slice itself is the innermost frame, else its parent is.
    """
    ok = slices >= 0
    starts = slices[ok] if include_self else t.cpu_parent[slices[ok]]
    uniq, inv = np.unique(starts, return_inverse=True)
    cost = np.bincount(inv, weights=cost_ns[ok], minlength=uniq.size)
    count = np.bincount(inv, minlength=uniq.size)
    memo: dict[int, tuple[str, ...]] = {-1: ()}  # full stack of a slice, root first
    parent, name, names = t.cpu_parent, t.cpu_name, t.names
    by_stack: dict[tuple[str, ...], list[float]] = {}
    for i, c, k in zip(uniq.tolist(), cost.tolist(), count.tolist(), strict=True):
        path = []
        j = i
        while j not in memo:
            path.append(j)
            j = int(parent[j])
        full = memo[j]
        for p in reversed(path):  # shared ancestors are walked once
            full = memo[p] = (*full, names[int(name[p])])
        entry = by_stack.setdefault(full[-STACK_DEPTH:], [0.0, 0])
        entry[0] += c
        entry[1] += k
    ranked = sorted(by_stack.items(), key=lambda kv: -kv[1][0])[:n]
    return [{"stack": list(k), key: v[0] / 1e3, "count": int(v[1])} for k, v in ranked]


def innermost_at(t: TraceData, thread: np.ndarray, when: np.ndarray) -> np.ndarray:
    """For each (thread, time): the innermost CPU slice on that thread running then, or -1."""
    out = np.full(when.shape[0], -1, dtype=np.int64)
    if t.cpu_ts.size == 0 or when.size == 0:
        return out
    threads = t.threads()
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
        # (slices on a thread nest); walk up until one does.
        todo = cur >= 0
        w = when[q]
        while np.any(todo):
            c = np.maximum(cur, 0)
            inside = todo & (t.cpu_ts[c] + t.cpu_dur[c] > w)
            out[q[inside]] = cur[inside]
            todo &= ~inside
            cur = np.where(todo, t.cpu_parent[c], -1)
            todo &= cur >= 0
    return out
