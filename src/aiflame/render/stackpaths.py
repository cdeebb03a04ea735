"""Frame-id paths of many stacks at once, for exporters that write every stack out in full."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from aiflame.model.stacks import StackTable, depths_of

_CHUNK_CELLS = 4_000_000  # bound the (stacks x depth) matrix to about 32 MB


def leaf_first_paths(
    stacks: StackTable, ids: np.ndarray, frame: np.ndarray | None = None
) -> Iterator[list[int]]:
    """Frame ids of each stack in ``ids`` (leaf first); the empty stack (-1) gives [].

    ``frame`` replaces the table's frame column (e.g. mapped to an output's ids, >= 0).
    """
    parent = stacks.parents_array()
    frame = stacks.frames_array() if frame is None else np.asarray(frame, dtype=np.int64)
    ids = np.asarray(ids, dtype=np.int64)
    if not len(parent):
        for _ in range(len(ids)):
            yield []
        return
    # Walk all stacks up together, one level per step (pointer chasing in numpy).
    parent_ext = np.append(parent, -1)  # index -1 (the empty stack) maps to itself
    frame_ext = np.append(frame, -1)
    depth_bound = _max_depth(parent)
    chunk = max(1, _CHUNK_CELLS // max(depth_bound, 1))
    for lo in range(0, len(ids), chunk):
        cur = ids[lo : lo + chunk].copy()
        rows = np.empty((len(cur), depth_bound), dtype=np.int64)
        for d in range(depth_bound):
            rows[:, d] = frame_ext[cur]
            cur = parent_ext[cur]
        lengths = (rows >= 0).sum(axis=1).tolist()
        for i, n in enumerate(lengths):
            yield rows[i, :n].tolist()


def root_first_paths(
    stacks: StackTable, ids: np.ndarray, frame: np.ndarray | None = None
) -> Iterator[list[int]]:
    for path in leaf_first_paths(stacks, ids, frame):
        path.reverse()
        yield path


def _max_depth(parent: np.ndarray) -> int:
    return int(depths_of(parent).max()) + 1
