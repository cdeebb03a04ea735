"""Frame-id paths of many stacks at once, for exporters that write every stack out in full."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from aiflame.model.stacks import StackTable

_CHUNK = 65_536  # stacks walked together; bounds the temporary (stacks x depth) matrix


def leaf_first_paths(
    stacks: StackTable, ids: np.ndarray, frame: np.ndarray | None = None
) -> Iterator[list[int]]:
    """Frame ids of each stack in ``ids`` (leaf first); the empty stack (-1) gives [].

    ``frame`` replaces the table's frame column (e.g. mapped to an output's ids, >= 0).
    """
    ids = np.asarray(ids, dtype=np.int64)
    # Index -1 (the empty stack, and the parent of roots) maps to itself.
    parent = np.append(stacks.parents_array(), -1)
    frame = np.append(stacks.frames_array() if frame is None else frame, -1).astype(np.int64)
    for lo in range(0, len(ids), _CHUNK):
        # Walk a chunk of stacks up together, one level per step (pointer chasing).
        cur = ids[lo : lo + _CHUNK]
        columns = []
        while True:
            live = cur >= 0
            if not live.any():
                break
            columns.append(frame[cur])
            cur = parent[cur]
        if not columns:
            yield from ([] for _ in range(len(cur)))
            continue
        rows = np.stack(columns, axis=1)
        valid = rows >= 0
        flat = rows[valid].tolist()  # row-major: each stack's frames are contiguous
        ends = np.cumsum(valid.sum(axis=1)).tolist()
        start = 0
        for end in ends:
            yield flat[start:end]
            start = end


def root_first_paths(
    stacks: StackTable, ids: np.ndarray, frame: np.ndarray | None = None
) -> Iterator[list[int]]:
    for path in leaf_first_paths(stacks, ids, frame):
        path.reverse()
        yield path
