"""The bulk stack-tree builder and path walker used by the pprof/speedscope importers and
exporters agree with interning stacks one by one."""

from __future__ import annotations

import numpy as np
import pytest

from aiflame.model import StackTable
from aiflame.render.stackpaths import leaf_first_paths, root_first_paths
from aiflame.sources import stacktrie


def random_paths(seed: int, n: int = 400) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    paths = []
    for _ in range(n):
        depth = int(rng.integers(0, 12))
        # Few distinct frames, so that prefixes are shared and recursion occurs.
        paths.append(rng.integers(0, 6, depth).tolist())
    paths += [[], [3], [3], [3, 3, 3]]
    return paths


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("bulk", [True, False])
def test_intern_paths_matches_interning_one_by_one(seed, bulk, monkeypatch):
    if not bulk:
        monkeypatch.setattr(stacktrie, "_MAX_CELLS", 0)  # the path-by-path fallback
    paths = random_paths(seed)
    table = StackTable()
    flat = np.asarray([f for p in paths for f in p], dtype=np.int64)
    ids = stacktrie.intern_paths(table, flat, np.asarray([len(p) for p in paths]))
    assert [table.frames_of(int(i)) for i in ids] == paths
    reference = StackTable()
    for p in paths:
        reference.intern(p)
    assert len(table) == len(reference)  # every prefix stored once
    parents = table.parents_array()
    assert np.all(parents < np.arange(len(table)))  # parents come first
    assert table.intern(paths[0]) == ids[0]  # the lookup index works after the bulk load
    assert list(root_first_paths(table, ids)) == paths
    assert list(leaf_first_paths(table, ids)) == [p[::-1] for p in paths]


def test_intern_paths_needs_an_empty_table_and_handles_no_paths():
    table = StackTable()
    assert stacktrie.intern_paths(table, np.zeros(0), np.zeros(0)).tolist() == []
    assert stacktrie.intern_paths(table, np.zeros(0), np.zeros(3)).tolist() == [-1, -1, -1]
    table.intern([1])
    with pytest.raises(ValueError):
        stacktrie.intern_paths(table, np.asarray([1]), np.asarray([1]))
