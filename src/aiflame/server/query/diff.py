"""Two selections compared: Pyroscope's ``FlameGraphDiff``.

The diff levels hold seven numbers per node: the left side's x offset, total and self, the
right side's x offset, total and self, and the name index; each side's offsets are from the
previous node's end on that side, as in the single flame graph.
"""

from __future__ import annotations

import numpy as np

from aiflame.proto.pyroscope.querier.v1 import querier_pb2
from aiflame.server.query.flame import Merged, Symbols, levels, name_tree, node_limit, truncate


def flame_graph_diff(
    left: Merged, right: Merged, symbols: Symbols, max_nodes: int | None
) -> querier_pb2.FlameGraphDiff:
    both = Merged(
        np.concatenate((left.frames, right.frames)),
        np.concatenate((left.lengths, right.lengths)),
        np.concatenate((left.values, right.values)),
        np.concatenate((_ids(left), _ids(right))),
        [*(left.seqs or []), *(right.seqs or [])],
    )
    values = np.zeros((both.lengths.size, 2), dtype=np.int64)
    values[: left.lengths.size, 0] = left.values
    values[left.lengths.size :, 1] = right.values
    tree = truncate(name_tree(both, symbols, values), node_limit(max_nodes), count_root=True)
    fg = querier_pb2.FlameGraphDiff(
        names=tree.names,
        total=int(tree.total[0].sum()),
        max_self=int(tree.self_value.max()) if tree.self_value.size else 0,
        leftTicks=int(left.total),
        rightTicks=int(right.total),
    )
    for lrow, rrow in zip(levels(tree, 0), levels(tree, 1), strict=True):
        row: list[int] = []
        for i in range(0, len(lrow), 4):
            row.extend((*lrow[i : i + 3], *rrow[i : i + 3], lrow[i + 3]))
        fg.levels.add(values=row)
    return fg


def _ids(m: Merged) -> np.ndarray:
    return m.ids if m.ids is not None else np.zeros(0, dtype=np.uint64)
