"""The functions that cost the most in a profile: self and total value of one metric.

What ``go tool pprof -top`` and ``perf report`` list, for any profile aiflame reads (CPU
samples, GPU time of a trace's flame graph, bytes of memory): a function's **self** value is
what its samples spent in it (it is the leaf), its **total** what they spent in it or in what
it called, counted once per sample when it recurses. Functions are frames of one name (a
Python function, an operator, a GPU kernel); a kind filter keeps, say, GPU kernels only.
``aiflame top`` prints it; ``aiflame mcp`` answers with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from aiflame.model import FrameKind, Profile

_CELLS = 4_000_000  # stack frames looked at per pass (bounds the memory of a deep profile)


@dataclass(frozen=True)
class FunctionCost:
    name: str
    kind: str  # FrameKind slug
    file: str
    module: str
    self_value: float
    total_value: float


@dataclass(frozen=True)
class Hotspots:
    metric: str
    unit: str
    total: float  # the metric's total over the profile
    samples: int  # sample rows the totals come from
    by: str  # "self" or "total": the order of ``functions``
    functions: list[FunctionCost]
    distinct: int  # functions with a value, before the cut to the top ones

    def to_json(self) -> dict[str, Any]:
        """Rows with their shares of the total (what ``aiflame top --json`` writes)."""
        t = self.total or 1.0
        return {
            "metric": self.metric,
            "unit": self.unit,
            "total": self.total,
            "samples": self.samples,
            "by": self.by,
            "functions_with_value": self.distinct,
            "functions": [
                {
                    "name": f.name,
                    "kind": f.kind,
                    "file": f.file,
                    "module": f.module,
                    "self": f.self_value,
                    "self_share": f.self_value / t,
                    "total": f.total_value,
                    "total_share": f.total_value / t,
                }
                for f in self.functions
            ],
        }


def function_values(profile: Profile, col: int) -> tuple[np.ndarray, np.ndarray]:
    """Self and total value of column ``col`` per function, indexed by the string id of the
    function's name (zeros for strings that name no function)."""
    values = profile.values[:, col]
    ok = (profile.sample_stack >= 0) & (values != 0)
    nnames = len(profile.strings)
    self_value, total_value = np.zeros(nnames), np.zeros(nnames)
    per_stack = np.bincount(
        profile.sample_stack[ok], weights=values[ok], minlength=len(profile.stacks)
    )
    nodes = np.flatnonzero(per_stack)
    if nodes.size == 0:
        return self_value, total_value
    frame_of = profile.stacks.frames_array()
    parent = profile.stacks.parents_array()
    name_of = np.asarray(profile.frames.name, dtype=np.int64)  # a function: frames of a name
    self_value += np.bincount(name_of[frame_of[nodes]], weights=per_stack[nodes], minlength=nnames)
    depth = _depths(parent, nodes)
    rows = max(1, _CELLS // max(int(depth.max()), 1))
    for lo in range(0, nodes.size, rows):
        _add_totals(total_value, nodes[lo : lo + rows], per_stack, parent, frame_of, name_of)
    return self_value, total_value


def top_functions(
    profile: Profile,
    metric: str | None = None,
    by: str = "self",
    n: int = 20,
    kinds: frozenset[FrameKind] | None = None,
) -> Hotspots:
    """The ``n`` functions with the largest ``by`` value of ``metric`` (KeyError for a
    metric the profile has not; ValueError for an unknown order)."""
    if by not in ("self", "total"):
        raise ValueError(f"order by 'self' or 'total', not {by!r}")
    col = profile.type_index(metric)
    st = profile.sample_types[col]
    values = profile.values[:, col]
    ok = (profile.sample_stack >= 0) & (values != 0)
    self_value, total_value = function_values(profile, col)
    names = np.flatnonzero((self_value != 0) | (total_value != 0))
    fr = profile.frames
    first_frame = first_frame_of_names(profile)
    if kinds is not None and names.size:
        keep = [FrameKind(fr.kind[first_frame[i]]) in kinds for i in names.tolist()]
        names = names[np.array(keep, dtype=bool)]
    key = self_value if by == "self" else total_value
    order = names[np.lexsort((-total_value[names], -self_value[names], -key[names]))]
    S = profile.strings
    out = []
    for i in order[:n].tolist():
        f = first_frame[i]
        out.append(
            FunctionCost(
                name=S[i],
                kind=FrameKind(fr.kind[f]).slug,
                file=S[fr.file[f]],
                module=S[fr.module[f]],
                self_value=float(self_value[i]),
                total_value=float(total_value[i]),
            )
        )
    return Hotspots(
        metric=st.name,
        unit=st.unit,
        total=float(values[ok].sum()),
        samples=int(np.count_nonzero(ok)),
        by=by,
        functions=out,
        distinct=int(names.size),
    )


def _depths(parent: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    depth = np.zeros(nodes.size, dtype=np.int64)
    cur = nodes.copy()
    while cur.size and (cur >= 0).any():
        alive = cur >= 0
        depth[alive] += 1
        cur[alive] = parent[cur[alive]]
    return depth


def _add_totals(
    total: np.ndarray,
    nodes: np.ndarray,
    per_stack: np.ndarray,
    parent: np.ndarray,
    frame_of: np.ndarray,
    name_of: np.ndarray,
) -> None:
    """Add each node's value to every distinct function name on its path."""
    row_ids, keys = [], []
    cur = nodes.copy()
    row = np.arange(nodes.size)
    while cur.size:
        row_ids.append(row)
        keys.append(name_of[frame_of[cur]])
        up = parent[cur]
        alive = up >= 0
        cur, row = up[alive], row[alive]
    if not row_ids:
        return
    r = np.concatenate(row_ids)
    k = np.concatenate(keys)
    pairs = np.unique(r * (int(name_of.max()) + 1) + k)  # each name once per path
    width = int(name_of.max()) + 1
    np.add.at(total, pairs % width, per_stack[nodes[pairs // width]])


def first_frame_of_names(profile: Profile) -> dict[int, int]:
    """The first frame of each name (its kind, file and module describe the function)."""
    out: dict[int, int] = {}
    for f, name in enumerate(profile.frames.name):
        out.setdefault(int(name), f)
    return out
