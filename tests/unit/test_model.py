"""The Profile model: interning, columnar samples, call tree totals."""

from __future__ import annotations

import numpy as np
import pytest

from aiflame.model import CallTree, FrameKind, ProfileBuilder, SampleType
from aiflame.model.stacks import EMPTY_STACK, depths_of


def build_small():
    b = ProfileBuilder([SampleType("cpu-samples", "count"), SampleType("gpu-time", "nanoseconds")])
    main = b.frame("main", FrameKind.NATIVE)
    fwd = b.frame("forward", FrameKind.PYTHON, file="model.py", line=12)
    mm = b.frame("aten::mm", FrameKind.CPP)
    launch = b.frame("cudaLaunchKernel", FrameKind.RUNTIME)
    delim = b.frame("-", FrameKind.DELIMITER)
    gemm = b.frame("sm90_gemm", FrameKind.GPU_KERNEL)
    s1 = b.stack([main, fwd, mm])
    s2 = b.stack([main, fwd, mm, launch, delim, gemm])
    s3 = b.stack([main])
    b.add(s1, [3, 0], b.labels({"tid": 1}))
    b.add(s2, [0, 1500], b.labels({"tid": 1, "stream": 7}))
    b.add(s2, [0, 500], b.labels({"stream": 7, "tid": 1}))
    b.add(s3, [2, 0])
    return b.build()


def test_frames_and_stacks_are_interned():
    b = ProfileBuilder()
    a = b.frame("a", FrameKind.NATIVE)
    assert b.frame("a", FrameKind.NATIVE) == a
    assert b.frame("a", FrameKind.PYTHON) != a  # same name, other kind: another frame
    s = b.stack([a, a])
    assert b.stack([a, a]) == s
    assert b.stack([a]) == b.stacks.parent[s]
    assert b.stacks.frames_of(s) == [a, a]
    assert b.stack([]) == EMPTY_STACK


def test_profile_columns_and_labels():
    p = build_small()
    assert len(p) == 4
    assert p.values.shape == (4, 2)
    assert p.totals().tolist() == [5.0, 2000.0]
    assert p.labels_of(1) == {"stream": "7", "tid": "1"}
    assert p.sample_labels[1] == p.sample_labels[2]  # same label set, interned once
    assert p.stack_names(int(p.sample_stack[1]))[-3:] == ["cudaLaunchKernel", "-", "sm90_gemm"]
    assert p.type_index("gpu-time") == 1
    with pytest.raises(KeyError, match="no metric 'nope'"):
        p.type_index("nope")


def test_call_tree_self_and_total():
    p = build_small()
    tree = CallTree.from_profile(p)
    names = [p.frames.name_of(int(f)) for f in tree.frame]
    root = names.index("main")
    mm = names.index("aten::mm")
    gemm = names.index("sm90_gemm")
    assert tree.total_value[root].tolist() == [5.0, 2000.0]
    assert tree.self_value[root].tolist() == [2.0, 0.0]
    assert tree.self_value[mm].tolist() == [3.0, 0.0]
    assert tree.total_value[mm].tolist() == [3.0, 2000.0]
    assert tree.self_value[gemm].tolist() == [0.0, 2000.0]
    assert tree.depth[gemm] == 5


def test_depths_match_a_plain_walk():
    rng = np.random.default_rng(0)
    n = 5000
    parents = np.array([-1] + [int(rng.integers(0, i)) for i in range(1, n)])
    expected = [0] * n
    for i in range(1, n):
        expected[i] = expected[parents[i]] + 1
    assert depths_of(parents).tolist() == expected


def test_ten_million_samples_fit_in_columns():
    # The builder appends to compact arrays: 10M samples of one type cost ~24 bytes each.
    b = ProfileBuilder([SampleType("cpu-samples")])
    stack = b.stack([b.frame("a"), b.frame("b")])
    n = 10_000_000
    b.add_many(np.full(n, stack), np.ones((n, 1)))
    p = b.build()
    assert len(p) == n
    assert p.totals()[0] == n
    used = p.sample_stack.nbytes + p.values.nbytes + p.sample_labels.nbytes
    assert used <= 24 * n
