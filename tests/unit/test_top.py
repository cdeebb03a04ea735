"""``aiflame top`` and the costs it lists (aiflame/analysis/hotspots.py): self and total value
per function checked against a sample-by-sample count on a real recording, recursion counted
once, kinds filtered, and the command's table and JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from aiflame.analysis.hotspots import function_values, top_functions
from aiflame.model import FrameKind, ProfileBuilder
from aiflame.sources import load

DATA = Path(__file__).resolve().parents[1] / "data"
RECORDING = DATA / "server" / "torch_train_cpu.pb.gz"
SRC = Path(__file__).resolve().parents[2] / "src"


def brute_force(profile, col):  # type: ignore[no-untyped-def]
    self_v, total_v = Counter(), Counter()
    for i in range(len(profile)):
        s, v = int(profile.sample_stack[i]), float(profile.values[i, col])
        if s < 0 or v == 0:
            continue
        names = profile.stack_names(s)
        self_v[names[-1]] += v
        for n in set(names):
            total_v[n] += v
    return self_v, total_v


def test_self_and_total_of_every_function_of_a_real_recording():
    p = load(str(RECORDING))
    col = p.type_index(None)
    self_v, total_v = brute_force(p, col)
    got_self, got_total = function_values(p, col)
    S = p.strings
    named = {S[i]: (got_self[i], got_total[i]) for i in range(len(S)) if got_total[i]}
    assert {k: v[1] for k, v in named.items()} == dict(total_v)
    assert {k: v[0] for k, v in named.items() if v[0]} == dict(self_v)
    h = top_functions(p, n=5)
    assert [f.self_value for f in h.functions] == sorted(self_v.values(), reverse=True)[:5]
    assert h.total == sum(self_v.values()) and h.samples == 496


def test_recursion_counts_once_and_kinds_filter():
    b = ProfileBuilder()
    main = b.frame("main", FrameKind.PYTHON)
    rec = b.frame("walk", FrameKind.PYTHON)
    k = b.frame("gemm", FrameKind.GPU_KERNEL)
    b.add(b.stack([main, rec, rec, rec]), [5.0])
    b.add(b.stack([main, rec, k]), [3.0])
    p = b.build()
    h = top_functions(p, by="total", n=10)
    assert [(f.name, f.self_value, f.total_value) for f in h.functions] == [
        ("walk", 5.0, 8.0),  # equal totals: the larger self first
        ("main", 0.0, 8.0),
        ("gemm", 3.0, 3.0),
    ]
    only = top_functions(p, kinds=frozenset({FrameKind.GPU_KERNEL}))
    assert [f.name for f in only.functions] == ["gemm"] and only.distinct == 1
    with pytest.raises(ValueError):
        top_functions(p, by="bogus")


def run(*args: str) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-m", "aiflame", "top", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_the_command_table_and_json():
    out = run(str(RECORDING), "-n", "3", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    want = top_functions(load(str(RECORDING)), n=3).to_json()
    assert doc == want
    table = run(str(RECORDING), "-n", "3", "--by", "total", "--kind", "python")
    assert table.returncode == 0
    lines = table.stdout.splitlines()
    assert lines[0].startswith("cpu-samples [count]: total 892 over 496 samples")
    assert "<module> (train.py:1)" in lines[2] and "85.9%" in lines[2]
    bad = run(str(RECORDING), "--metric", "nope")
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "no metric 'nope'" in bad.stderr
