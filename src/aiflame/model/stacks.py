"""Interned stacks stored as a prefix tree: each stack is (parent stack, leaf frame).

A stack id names the whole path from the root to that node, so identical stacks share
one id and common prefixes are stored once. A parent always has a smaller id than its
children, which lets totals be accumulated in one reverse pass.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

EMPTY_STACK = -1


class StackTable:
    """Columns ``parent`` and ``frame``; ``EMPTY_STACK`` (-1) is the empty stack."""

    __slots__ = ("_index_cache", "frame", "parent")

    def __init__(self) -> None:
        self.parent: list[int] = []
        self.frame: list[int] = []
        self._index_cache: dict[tuple[int, int], int] | None = {}

    @property
    def _index(self) -> dict[tuple[int, int], int]:
        if self._index_cache is None:  # rebuilt after bulk appends
            self._index_cache = dict(
                zip(zip(self.parent, self.frame, strict=True), range(len(self.frame)), strict=True)
            )
        return self._index_cache

    def bulk_columns(self) -> tuple[list[int], list[int]]:
        """The raw columns, for a caller that appends nodes it knows are new.

        Call :meth:`bulk_done` afterwards; the lookup index is rebuilt when next needed.
        """
        self._index_cache = None
        return self.parent, self.frame

    def bulk_done(self) -> None:
        self._index_cache = None

    def child(self, parent: int, frame: int) -> int:
        """Id of the stack ``parent + [frame]``, adding it if new."""
        key = (parent, frame)
        i = self._index.get(key)
        if i is None:
            i = len(self.frame)
            self._index[key] = i
            self.parent.append(parent)
            self.frame.append(frame)
        return i

    def intern(self, frames: Iterable[int], parent: int = EMPTY_STACK) -> int:
        """Id of the stack made of ``frames`` (root first) below ``parent``."""
        index = self._index
        for f in frames:
            key = (parent, f)
            i = index.get(key)
            if i is None:
                i = len(self.frame)
                index[key] = i
                self.parent.append(parent)
                self.frame.append(f)
            parent = i
        return parent

    def frames_of(self, stack: int) -> list[int]:
        """Frame ids of ``stack``, root first."""
        out: list[int] = []
        parent, frame = self.parent, self.frame
        while stack != EMPTY_STACK:
            out.append(frame[stack])
            stack = parent[stack]
        out.reverse()
        return out

    def parents_array(self) -> np.ndarray:
        return np.asarray(self.parent, dtype=np.int64)

    def frames_array(self) -> np.ndarray:
        return np.asarray(self.frame, dtype=np.int64)

    def depths(self) -> np.ndarray:
        """Depth of every stack node (roots have depth 0), computed by pointer jumping."""
        return depths_of(self.parents_array())

    def __len__(self) -> int:
        return len(self.frame)


def depths_of(parents: Sequence[int] | np.ndarray) -> np.ndarray:
    """Depth of each node of a parent-array tree (roots: parent < 0, depth 0)."""
    parent = np.asarray(parents, dtype=np.int64)
    depth = (parent >= 0).astype(np.int64)
    jump = parent.copy()
    while True:
        live = jump >= 0
        if not live.any():
            return depth
        idx = np.nonzero(live)[0]
        target = jump[idx]
        depth[idx] += depth[target]
        # Pointer jumping: after k rounds each node has summed 2^k ancestors' edges.
        jump[idx] = jump[target]
