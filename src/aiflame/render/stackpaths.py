"""Frame-id paths of many stacks at once, for exporters that write every stack out in full."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from aiflame.model.stacks import StackTable, depths_of

_CHUNK = 65_536  # stacks walked together; with _DEEP, bounds the (stacks x depth) matrix
_DEEP = 2048  # frames beyond which a stack is walked alone


def leaf_first_paths(
    stacks: StackTable, ids: np.ndarray, frame: np.ndarray | None = None
) -> Iterator[list[int]]:
    """Frame ids of each stack in ``ids`` (leaf first); the empty stack (-1) gives [].

    ``frame`` replaces the table's frame column (e.g. mapped to an output's ids, >= 0).
    Stacks are walked up a chunk at a time, one level per step; a chunk holding a stack
    deeper than _DEEP frames is walked again with each such stack walked alone, so that the
    (stacks x depth) matrix stays small (one stack of 100,000 frames among short ones would
    make it billions of cells).
    """
    ids = np.asarray(ids, dtype=np.int64)
    # Index -1 (the empty stack, and the parent of roots) maps to itself.
    parent = np.append(stacks.parents_array(), -1)
    frame = np.append(stacks.frames_array() if frame is None else frame, -1).astype(np.int64)
    depth: np.ndarray | None = None  # frames per stack, computed once a deep one is seen
    for lo in range(0, len(ids), _CHUNK):
        cur = ids[lo : lo + _CHUNK]
        paths = _walk_together(cur, parent, frame, _DEEP)
        if paths is None:
            if depth is None:
                depth = np.append(depths_of(parent[:-1]) + 1, 0)
            deep = depth[cur] > _DEEP
            paths = _walk_together(np.where(deep, -1, cur), parent, frame, None)
            assert paths is not None
            for k in np.flatnonzero(deep).tolist():
                paths[k] = _walk_alone(int(cur[k]), parent, frame)
        yield from paths


def _walk_together(
    cur: np.ndarray, parent: np.ndarray, frame: np.ndarray, most: int | None
) -> list[list[int]] | None:
    """Paths of stacks ``cur``, walked up together; None when one is deeper than
    ``most``."""
    columns: list[np.ndarray] = []
    while True:
        live = cur >= 0
        if not live.any():
            break
        if most is not None and len(columns) >= most:
            return None
        columns.append(frame[cur])
        cur = parent[cur]
    if not columns:
        return [[] for _ in range(len(cur))]
    rows = np.stack(columns, axis=1)
    valid = rows >= 0
    flat = rows[valid].tolist()  # row-major: each stack's frames are contiguous
    ends = np.cumsum(valid.sum(axis=1)).tolist()
    out, start = [], 0
    for end in ends:
        out.append(flat[start:end])
        start = end
    return out


def _walk_alone(sid: int, parent: np.ndarray, frame: np.ndarray) -> list[int]:
    path = []
    while sid >= 0:
        path.append(int(frame[sid]))
        sid = int(parent[sid])
    return path


def root_first_paths(
    stacks: StackTable, ids: np.ndarray, frame: np.ndarray | None = None
) -> Iterator[list[int]]:
    for path in leaf_first_paths(stacks, ids, frame):
        path.reverse()
        yield path
