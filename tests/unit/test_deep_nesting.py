"""Deep nesting stays linear: slices and stacks nested thousands deep cost each stage
(readers, transforms, writers, analysis) time and memory in proportion to the input, or
what an output must spell out; an output far larger than its profile is refused in one
line naming the limit."""

from __future__ import annotations

import gzip
import json
import random

import numpy as np
import pytest
from hostile_inputs import (
    GIB,
    aiflame,
    chrome_nested,
    hpctoolkit_with_struct,
    kineto_nested_syncs,
    one_error_line,
    speedscope_evented,
)

from aiflame.model import StackTable
from aiflame.proto.pyroscope.google.v1 import profile_pb2
from aiflame.render import stackpaths
from aiflame.sources.hpctoolkit import hpcstruct
from aiflame.transforms import correlate
from limited import run_limited

# -- the walks up a tree: equal to a walk, linear in deep chains ------------------------------


def _random_tree(rng: np.random.Generator, n: int, chain: bool) -> np.ndarray:
    if chain:
        parent = np.arange(-1, n - 1)
    else:
        parent = np.array([int(rng.integers(-1, i)) if i else -1 for i in range(n)])
    perm = rng.permutation(n)  # ids in no particular order
    inverse = np.argsort(perm)
    return np.where(parent >= 0, perm[np.maximum(parent, 0)], -1)[inverse]


@pytest.mark.parametrize("walk", [32, 0, 3])
def test_tree_walks_agree_with_walking_up(monkeypatch, walk):
    monkeypatch.setattr(correlate, "_WALK", walk)
    rng = np.random.default_rng(7)
    for trial in range(60):
        n = int(rng.integers(1, 200))
        parent = _random_tree(rng, n, chain=trial % 3 == 0)
        mask = rng.random(n) < 0.2
        end = rng.integers(0, 100, n)

        def up(i: int, parent: np.ndarray = parent) -> list[int]:
            out = []
            while i >= 0:
                out.append(i)
                i = int(parent[i])
            return out

        nearest = [next((a for a in up(i) if mask[a]), -1) for i in range(n)]
        outermost = [([a for a in up(i) if mask[a]] or [-1])[-1] for i in range(n)]
        assert correlate.nearest_marked(parent, mask).tolist() == nearest
        assert correlate.outermost_marked(parent, mask).tolist() == outermost
        start = rng.integers(-1, n, 40)
        at = rng.integers(0, 100, 40)
        expected = [
            next((a for a in up(int(s)) if end[a] > t), -1) for s, t in zip(start, at, strict=True)
        ]
        assert correlate.first_open(parent, end, start, at).tolist() == expected
        assert correlate.nearest_enclosing(parent, mask, start).tolist() == [
            nearest[s] if s >= 0 else -1 for s in start
        ]


def _walk_a_chain(n: int) -> int:
    parent = np.arange(-1, n - 1)
    mask = np.zeros(n, dtype=bool)
    mask[0] = True
    end = np.full(n, 10, dtype=np.int64)
    end[0] = 100
    everyone = np.arange(n)
    found = correlate.first_open(parent, end, everyone, np.full(n, 50))
    nearest = correlate.nearest_marked(parent, mask)
    outer = correlate.outermost_marked(parent, mask)
    return int((found == 0).sum() + (nearest == 0).sum() + (outer == 0).sum())


def test_tree_walks_are_linear_in_a_chain_300000_deep():
    """Every node of a chain 300,000 deep asks for its enclosing ones: a step per level
    per query would be 4.5e10 steps; these take a second."""
    outcome = run_limited(_walk_a_chain, 300_000, memory=1 * GIB, timeout=60)
    assert outcome.status == "ok", outcome
    assert outcome.value == 3 * 300_000


# -- stacks spelled out -------------------------------------------------------------------------


@pytest.mark.parametrize(("cells", "deep"), [(1 << 20, 512), (7, 2), (1000, 0)])
def test_stacks_spelled_out_agree_with_frames_of(monkeypatch, cells, deep):
    monkeypatch.setattr(stackpaths, "_CELLS", cells)
    monkeypatch.setattr(stackpaths, "_DEEP", deep)
    rng = random.Random(3)
    table = StackTable()
    ids: list[int] = []
    for _ in range(120):
        path = [rng.randrange(4) for _ in range(rng.choice([0, 1, 3, 20, 600, 1500]))]
        if ids and rng.random() < 0.5:
            path = table.frames_of(rng.choice(ids)) + path
        ids.append(table.intern(path))
    wanted = np.array([*ids, -1])
    rng.shuffle(wanted)
    expected = [table.frames_of(int(i)) if i >= 0 else [] for i in wanted]
    assert list(stackpaths.root_first_paths(table, wanted)) == expected
    assert list(stackpaths.leaf_first_paths(table, wanted)) == [e[::-1] for e in expected]


# -- the commands on inputs nested deep ------------------------------------------------------


def test_analyze_of_a_kineto_trace_with_deeply_nested_sync_calls(tmp_path):
    """1,000 synchronizing calls, each inside all the others (286 KB): each is blamed on
    the outermost aten::item around it, without a walk up per call."""
    trace = kineto_nested_syncs(tmp_path / "trace.json")
    assert 250_000 < trace.stat().st_size < 320_000
    r = aiflame("analyze", str(trace), "--json", str(tmp_path / "a.json"), timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    sync = json.loads((tmp_path / "a.json").read_text())["ranks"][0]["sync"]
    assert sync["calls"] == 1_000
    assert list(sync["by_cause"]) == ["aten::item"]
    assert sync["by_cause"]["aten::item"]["count"] == 1_000


@pytest.mark.parametrize(("kind", "depth"), [("chrome", 5_000), ("speedscope", 2_500)])
def test_traces_nested_deep_convert_in_bounds(tmp_path, kind, depth):
    """130-160 KB of slices nested thousands deep: millions of frames written out in full
    (the writers were quadratic in the depth), in bounded memory, each output whole."""
    make = chrome_nested if kind == "chrome" else speedscope_evented
    trace = make(tmp_path / "deep.json", depth)
    assert 130_000 < trace.stat().st_size < 170_000
    folded, pb, ss = tmp_path / "o.folded", tmp_path / "o.pb.gz", tmp_path / "o.speedscope.json"
    for out, fmt in ((folded, "folded"), (pb, "pprof"), (ss, "speedscope")):
        r = aiflame("convert", str(trace), "-f", fmt, "-o", str(out), timeout=60)
        assert r.returncode == 0, r.stderr.decode()
    # The innermost 'B' event, never ended, ends where its thread's last event is: no time.
    stacks = depth - 1 if kind == "chrome" else depth
    lines = folded.read_text().splitlines()
    assert sorted(line.count(";") + 1 for line in lines) == list(range(1, stacks + 1))
    message = profile_pb2.Profile()
    message.ParseFromString(gzip.decompress(pb.read_bytes()))
    assert sorted(len(s.location_id) for s in message.sample) == list(range(1, stacks + 1))
    samples = json.loads(ss.read_text())["profiles"][0]["samples"]
    assert sorted(map(len, samples)) == list(range(1, stacks + 1))


def test_an_output_far_larger_than_its_profile_is_refused(tmp_path):
    """160 KB of 'B' events nested 9,000 deep: pprof would spell out 40 million frames
    (over 300 MiB) for 9,000 stack nodes: one line naming the limit, no file; raising the
    limit lets a smaller one through."""
    trace = chrome_nested(tmp_path / "deep.json", 9_000)
    out = tmp_path / "out.pb.gz"
    r = aiflame("convert", str(trace), "-f", "pprof", "-o", str(out), timeout=60)
    one_error_line(r, "40,495,500 frames", "AIFLAME_MAX_OUTPUT_MIB")
    assert not out.exists()
    small = chrome_nested(tmp_path / "small.json", 1_500)
    env = {"AIFLAME_MAX_OUTPUT_MIB": "1"}
    r = aiflame("convert", str(small), "-f", "pprof", "-o", str(out), env=env)
    one_error_line(r, "pprof output", "more than the 7 MiB")  # 1 MiB and 4 KiB a node
    assert not out.exists()
    r = aiflame("convert", str(small), "-f", "pprof", "-o", str(out))
    assert r.returncode == 0, r.stderr.decode()


def test_one_deep_stack_among_70000_short_ones_in_bounded_memory(tmp_path):
    """A stack 2,040 deep sorted first among 70,000 short ones once made the writers walk a
    70,000 x 2,040 matrix (over 2 GiB)."""
    path = tmp_path / "wide.folded"
    deep = ";".join(f"a{i % 3}" for i in range(2_040))
    path.write_text(f"{deep} 1\n" + "".join(f"b;s{i} 1\n" for i in range(70_000)))
    for fmt, ext in (("pprof", ".pb.gz"), ("speedscope", ".json")):
        out = tmp_path / f"out{ext}"
        r = aiflame("convert", str(path), "-f", fmt, "-o", str(out), memory=GIB)
        assert r.returncode == 0, r.stderr.decode()


# -- HPCToolkit structure files --------------------------------------------------------------


def test_an_hpcstruct_of_40000_nested_inlined_calls(tmp_path):
    """1.3 KB of gzip nesting 40,000 inlined calls once took a tuple of every enclosing
    scope per level (gigabytes): refused in one line, in bounded memory."""
    body = '<A l="2" n="f">' * 40_000 + '<S l="9" v="{[0xa000-0xb000)}"/>' * 2_000
    measurements = hpctoolkit_with_struct(tmp_path, body)
    struct = measurements / "structs" / "testmeas-loops-cuda.hpcstruct.gz"
    assert struct.stat().st_size < 2_000
    out = tmp_path / "out.folded"
    r = aiflame("convert", str(measurements), "-f", "folded", "-o", str(out), memory=GIB)
    one_error_line(r, "testmeas-loops-cuda.hpcstruct.gz: scopes nested deeper than 1,024")
    assert not out.exists()


def test_hpcstruct_statements_share_their_scopes(tmp_path):
    """Statements deep in nested inlined calls share the chain above them; each address
    still gets its procedure, call sites, inlined functions and line, outermost first."""
    head = (
        '<?xml version="1.0"?>\n<HPCToolkitStructure i="0"><LM n="m"><F n="a.c"><P n="main" l="1">'
    )
    body = '<A l="5"><A n="inl" f="b.h" l="7">' * 300
    statements = "".join(f'<S l="{9 + k}" v="{{[{0x100 + k}-{0x101 + k})}}"/>' for k in range(5))
    path = tmp_path / "x.hpcstruct"
    path.write_text(
        head + body + statements + "</A></A>" * 300 + "</P></F></LM></HPCToolkitStructure>"
    )
    (module,) = hpcstruct.read_structure(str(path))
    chain = module.scopes(0x102)
    assert chain is not None and len(chain) == 1 + 2 * 300 + 1
    assert chain[0].kind == hpcstruct.PROCEDURE and chain[0].name == "main"
    assert [s.kind for s in chain[1:3]] == [hpcstruct.CALL_SITE, hpcstruct.INLINED]
    assert chain[-1].kind == hpcstruct.LINE and chain[-1].line == 11
    assert module.scopes(0x1000) is None


def test_austin_frames_with_a_long_name_full_of_parentheses(tmp_path):
    """A 100,000-character name of " (" once made the Austin 2 frame pattern backtrack
    for minutes."""
    name = " (" * 50_000
    path = tmp_path / "x.austin"
    path.write_text(f"# austin: 3.0.0\n# mode: wall\n\nP1;T1;a.py:<{name}>:3;b.py:f:4 10\n")
    r = aiflame("convert", str(path), "-f", "folded", "-o", str(tmp_path / "o.folded"), timeout=30)
    assert r.returncode == 0, r.stderr.decode()
