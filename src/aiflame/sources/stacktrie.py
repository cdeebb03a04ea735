"""Build a stack prefix tree from many frame paths at once, with numpy instead of a dict.

Interning a path frame by frame costs a dict lookup per frame; a profile of 200k stacks of
depth 30 makes that 6 million Python-level steps. Here the paths are sorted as rows of a
padded matrix, so that a node is new exactly where a row first differs from the row above
it, and each depth is one vectorised pass.
"""

from __future__ import annotations

import numpy as np

from aiflame.model.stacks import EMPTY_STACK, StackTable

_PAD = -1
# Beyond this many cells (8 bytes each, and a sorted copy) the matrix would cost more memory
# than the paths themselves (a few very deep stacks among many): intern path by path.
_MAX_CELLS = 16_000_000
_FRAMES_PER_PASS = 64  # a pass over one depth costs about as much as interning this many


def intern_paths(table: StackTable, flat: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Add paths (root first, concatenated in ``flat``) to an empty ``table``.

    Returns the stack id of each path (``EMPTY_STACK`` for an empty one). Nodes are
    numbered depth by depth, so a parent's id is always smaller than its children's.
    """
    if len(table):
        raise ValueError("intern_paths needs an empty stack table")
    lengths = np.asarray(lengths, dtype=np.int64)
    n = len(lengths)
    leaf = np.full(n, EMPTY_STACK, dtype=np.int64)
    if n == 0 or not lengths.any():
        return leaf
    width = int(lengths.max())
    if n * width > _MAX_CELLS or width > n * _FRAMES_PER_PASS:
        # A few very deep stacks: one vectorised pass per depth would cost more (tens of
        # microseconds each, thousands of them) than a dict lookup per frame.
        return _one_by_one(table, np.asarray(flat, dtype=np.int64), lengths)
    rows = _padded(np.asarray(flat), lengths)
    order = np.lexsort(rows.T[::-1])  # column 0 is the primary key
    rows = rows[order]
    parents: list[np.ndarray] = []
    frames: list[np.ndarray] = []
    changed = np.zeros(n, dtype=bool)
    changed[0] = True
    above = np.full(n, EMPTY_STACK, dtype=np.int64)  # node of each row at depth d-1
    sorted_leaf = np.full(n, EMPTY_STACK, dtype=np.int64)
    next_id = 0
    for d in range(rows.shape[1]):
        col = rows[:, d]
        changed[1:] |= col[1:] != col[:-1]
        valid = col != _PAD
        new = changed & valid
        count = int(new.sum())
        # Row i's node at depth d: the last new node at or above row i (rows share it).
        at = np.where(new, np.arange(n), -1)
        np.maximum.accumulate(at, out=at)
        ids = np.cumsum(new) - 1 + next_id
        node = np.where(valid, ids[np.maximum(at, 0)], EMPTY_STACK)
        parents.append(above[new])
        frames.append(col[new])
        next_id += count
        sorted_leaf = np.where(valid, node, sorted_leaf)
        above = node
    parent_col, frame_col = table.bulk_columns()
    parent_col.extend(np.concatenate(parents).tolist())
    frame_col.extend(np.concatenate(frames).tolist())
    table.bulk_done()
    leaf[order] = sorted_leaf
    return leaf


def _one_by_one(table: StackTable, flat: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    ends = np.cumsum(lengths).tolist()
    intern = table.intern
    out, start = [], 0
    for end in ends:  # a path's ints at a time: all of them as Python ints cost 5x the array
        out.append(intern(flat[start:end].tolist()))
        start = end
    return np.asarray(out, dtype=np.int64)


def _padded(flat: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    n, width = len(lengths), int(lengths.max())
    small = not len(flat) or int(flat.max()) < 2**31 - 1
    rows = np.full((n, width), _PAD, dtype=np.int32 if small else np.int64)
    row_of = np.repeat(np.arange(n), lengths)
    starts = np.cumsum(lengths) - lengths
    col_of = np.arange(len(flat)) - np.repeat(starts, lengths)
    rows[row_of, col_of] = flat
    return rows
