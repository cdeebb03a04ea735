"""Frame-id paths of many stacks at once, for exporters that write every stack out in full
(folded lines, pprof samples, speedscope samples), and the bound on what they may write.

A stack table stores each stack once as a prefix tree, but these formats spell every stack
out from its root: ``n`` slices nested ``n`` deep are ``n`` tree nodes and ``n * n / 2``
written frames. The paths are expanded a bounded number of frames at a time, in time
proportional to what is written (numpy one level at a time while many stacks are that
deep, then a plain walk for the few deepest), and :func:`check_written` refuses, in one
line naming the limit, an output that would be far larger than the profile it comes from.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np

from aiflame.errors import AiflameError
from aiflame.model.stacks import StackTable, depths_of

_CELLS = 1 << 20  # frames expanded at a time (a stack deeper than this alone)
_DEEP = 512  # frames beyond which a stack is spelled by copying its spelled ancestors

MAX_OUTPUT_ENV = "AIFLAME_MAX_OUTPUT_MIB"
OUTPUT_FLOOR_MIB = 256  # always allowed, whatever the profile's size
PER_NODE = 4096  # bytes allowed in addition per node of the profile's stack table
MIB = 1 << 20


def frames_per_stack(stacks: StackTable) -> np.ndarray:
    """Frames in each stack (index -1, the empty stack, has none)."""
    return np.append(depths_of(stacks.parents_array()) + 1, 0)


def path_sums(stacks: StackTable, weight: np.ndarray) -> np.ndarray:
    """Per stack, the sum of ``weight[frame]`` over its frames (index -1: 0). Pointer
    jumping: each pass doubles the ancestors summed, log(depth) passes."""
    parent = stacks.parents_array()
    total = np.asarray(weight, dtype=np.int64)[stacks.frames_array()]
    jump = parent.copy()
    while True:
        idx = np.flatnonzero(jump >= 0)
        if idx.size == 0:
            return np.append(total, 0)
        target = jump[idx]
        total[idx] += total[target]
        jump[idx] = jump[target]


def max_output(nodes: int) -> int:
    """Bytes an output that spells stacks out may take for a profile of ``nodes`` stacks."""
    try:
        floor = int(os.environ.get(MAX_OUTPUT_ENV, ""))
    except ValueError:
        floor = 0
    return (floor if floor > 0 else OUTPUT_FLOOR_MIB) * MIB + PER_NODE * nodes


def check_written(what: str, nbytes: int, frames: int, deepest: int, nodes: int) -> None:
    """Refuse to write ``what`` when spelling its stacks out would take more than
    :func:`max_output` (in one line naming the limit and how to raise it)."""
    limit = max_output(nodes)
    if nbytes <= limit:
        return
    raise AiflameError(
        f"{what} would spell out {frames:,} frames ({nbytes / MIB:,.0f} MiB; stacks up to "
        f"{deepest:,} deep) for a profile of {nodes:,} distinct stack nodes, more than the "
        f"{limit / MIB:,.0f} MiB an output may take for it (set {MAX_OUTPUT_ENV} to raise "
        "it; an html flame graph holds each stack once)"
    )


def check_frames(what: str, stacks: StackTable, ids: np.ndarray, bytes_per_frame: int) -> None:
    """:func:`check_written` for an output that writes ``bytes_per_frame`` per frame of
    each stack of ``ids``."""
    depth = frames_per_stack(stacks)[np.asarray(ids, dtype=np.int64)]
    frames = int(depth.sum())
    deepest = int(depth.max(initial=0))
    check_written(what, frames * bytes_per_frame, frames, deepest, len(stacks))


def leaf_first_paths(
    stacks: StackTable, ids: np.ndarray, frame: np.ndarray | None = None
) -> Iterator[list[int]]:
    """Frame ids of each stack in ``ids`` (leaf first); the empty stack (-1) gives [].

    ``frame`` replaces the table's frame column (e.g. mapped to an output's ids, >= 0).
    """
    column = stacks.frames_array() if frame is None else np.asarray(frame, dtype=np.int64)
    for nodes, starts, ends in expanded(stacks, ids, root_first=False):
        flat = column[nodes].tolist()
        yield from (flat[a:b] for a, b in zip(starts, ends, strict=True))


def root_first_paths(
    stacks: StackTable, ids: np.ndarray, frame: np.ndarray | None = None
) -> Iterator[list[int]]:
    """As :func:`leaf_first_paths`, root first."""
    column = stacks.frames_array() if frame is None else np.asarray(frame, dtype=np.int64)
    for nodes, starts, ends in expanded(stacks, ids, root_first=True):
        flat = column[nodes].tolist()
        yield from (flat[a:b] for a, b in zip(starts, ends, strict=True))


def expanded(
    stacks: StackTable, ids: np.ndarray, root_first: bool
) -> Iterator[tuple[np.ndarray, list[int], list[int]]]:
    """The stacks ``ids`` spelled out a chunk at a time: (node ids of the chunk's stacks,
    one after the other, each stack's start and end in them), in the order of ``ids``.

    A chunk holds about _CELLS frames (one deeper stack alone), so memory stays bounded
    whatever the depth, and the work is proportional to the frames written.
    """
    ids = np.asarray(ids, dtype=np.int64)
    if ids.size == 0:
        return
    depth = frames_per_stack(stacks)
    parent = stacks.parents_array()
    parent_list = stacks.parent
    cells = np.cumsum(depth[ids])
    lo = 0
    while lo < ids.size:
        done = int(cells[lo - 1]) if lo else 0
        hi = max(int(np.searchsorted(cells, done + _CELLS, "right")), lo + 1)
        chunk = ids[lo:hi]
        d = depth[chunk]
        ends = np.cumsum(d)
        starts = ends - d
        nodes = _spell(chunk, d, starts, parent, parent_list, root_first)
        yield nodes, starts.tolist(), ends.tolist()
        lo = hi


def _spell(
    ids: np.ndarray,
    depth: np.ndarray,
    starts: np.ndarray,
    parent: np.ndarray,
    parent_list: list[int],
    root_first: bool,
) -> np.ndarray:
    """Node ids of the stacks ``ids`` (``depth`` frames each) laid out from ``starts``."""
    out = np.empty(int(depth.sum()), dtype=np.int64)
    deep = depth > _DEEP
    if not deep.all():
        shallow = np.flatnonzero(~deep)
        _spell_by_levels(out, ids[shallow], depth[shallow], starts[shallow], parent, root_first)
    if deep.any():
        where = np.flatnonzero(deep)
        _spell_by_copies(out, ids[where], depth[where], starts[where], parent_list, root_first)
    return out


def _spell_by_levels(
    out: np.ndarray,
    ids: np.ndarray,
    depth: np.ndarray,
    starts: np.ndarray,
    parent: np.ndarray,
    root_first: bool,
) -> None:
    """Shallow stacks, walked up together one level per numpy step."""
    cur = ids.copy()
    # Position of level j (0: the leaf) of stack k: start + j, or start + depth - 1 - j.
    pos = starts + (depth - 1 if root_first else 0)
    step = -1 if root_first else 1
    live = np.flatnonzero(depth > 0)
    level = 0
    while live.size:
        out[pos[live] + step * level] = cur[live]
        cur[live] = parent[cur[live]]
        level += 1
        live = live[depth[live] > level]


def _spell_by_copies(
    out: np.ndarray,
    ids: np.ndarray,
    depth: np.ndarray,
    starts: np.ndarray,
    parent_list: list[int],
    root_first: bool,
) -> None:
    """Deep stacks, each walked up only to the nearest node already spelled out in this
    chunk (as a stack or on the way to one), whose path is copied: ``n`` stacks nested
    ``n`` deep cost their ``n * n / 2`` frames copied, not walked."""
    at: dict[int, int] = {}  # node -> where its path (depth[node] frames) is in `out`
    for k in np.argsort(ids, kind="stable").tolist():  # a parent's id is below its child's
        node, d, s = int(ids[k]), int(depth[k]), int(starts[k])
        walked: list[int] = []
        while node >= 0 and node not in at:
            walked.append(node)
            node = parent_list[node]
        known = d - len(walked)  # frames of the spelled ancestor `node` (0: none)
        if root_first:
            if known:
                out[s : s + known] = out[at[node] : at[node] + known]
            out[s + known : s + d] = walked[::-1]
            for n in walked:
                at[n] = s
        else:
            out[s : s + len(walked)] = walked
            if known:
                out[s + len(walked) : s + d] = out[at[node] : at[node] + known]
            for i, n in enumerate(walked):
                at[n] = s + i


def json_paths(stacks: StackTable, ids: np.ndarray, frame: np.ndarray) -> str:
    """The stacks ``ids`` as a JSON array of arrays of ``frame`` ids, root first, built as
    text a chunk at a time (lists of Python ints would take five times the memory)."""
    column = np.asarray(frame, dtype=np.int64)
    text = np.array([f",{i}" for i in range(int(column.max(initial=-1)) + 1)], dtype=object)
    parts: list[str] = []
    for nodes, starts, ends in expanded(stacks, ids, root_first=True):
        flat = text[column[nodes]].tolist()  # shared strings: no conversion per frame
        parts.extend("[" + "".join(flat[a:b])[1:] + "]" for a, b in zip(starts, ends, strict=True))
    return "[" + ",".join(parts) + "]"
