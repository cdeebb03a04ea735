"""The call tree of a profile: per stack node, self and total value of one sample type.

Because stacks are interned as a prefix tree, the call tree *is* the stack table; this
module only aggregates sample values onto it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from aiflame.model.profile import Profile
from aiflame.model.stacks import depths_of

# A level's vectorised pass costs about as much as this many nodes added one by one: trees
# deeper than their nodes / this (one stack of 100,000 frames) are summed node by node.
_LEVEL_COST = 100


def _totals_node_by_node(parent: np.ndarray, total: np.ndarray) -> None:
    """Add each node's total into its parent's, children first: a parent's id is always
    smaller than its children's, so descending ids will do."""
    up = parent.tolist()
    for t in range(total.shape[1]):
        col = total[:, t].tolist()
        for i in range(len(up) - 1, -1, -1):
            p = up[i]
            if p >= 0:
                col[p] += col[i]
        total[:, t] = col


@dataclass
class CallTree:
    """Node ``i`` is stack id ``i`` of ``profile``; values are float64 arrays by node."""

    profile: Profile
    parent: np.ndarray  # int64, -1 for roots
    frame: np.ndarray  # int64 frame ids
    self_value: np.ndarray  # shape (n_nodes, n_types)
    total_value: np.ndarray  # shape (n_nodes, n_types)
    depth: np.ndarray

    @classmethod
    def from_profile(cls, profile: Profile) -> CallTree:
        n = len(profile.stacks)
        parent = profile.stacks.parents_array()
        frame = profile.stacks.frames_array()
        ntypes = len(profile.sample_types)
        self_value = np.zeros((n, ntypes))
        valid = profile.sample_stack >= 0  # samples with an empty stack have no node
        for t in range(ntypes):
            self_value[:, t] = np.bincount(
                profile.sample_stack[valid], weights=profile.values[valid, t], minlength=n
            )[:n]
        depth = depths_of(parent)
        total = self_value.copy()
        if n and int(depth.max()) * _LEVEL_COST > n * max(ntypes, 1):
            _totals_node_by_node(parent, total)  # a few very deep stacks
        elif n:
            # Deepest level first: each level adds its totals into its parents' rows.
            # A radix sort on int16 depths keeps this linear (deeper trees need int32).
            key = depth.astype(np.int16) if depth.max() < 2**15 else depth
            order = np.argsort(key, kind="stable")
            bounds = np.searchsorted(depth[order], np.arange(int(depth.max()) + 2))
            for d in range(int(depth.max()), 0, -1):
                idx = order[bounds[d] : bounds[d + 1]]
                up = parent[idx]
                for t in range(ntypes):  # 1-D ufunc.at has a fast path; 2-D is 3x slower
                    col = total[:, t]
                    np.add.at(col, up, col[idx])
        return cls(profile, parent, frame, self_value, total, depth)

    def roots(self) -> np.ndarray:
        return np.nonzero(self.parent < 0)[0]

    def __len__(self) -> int:
        return int(self.parent.shape[0])
