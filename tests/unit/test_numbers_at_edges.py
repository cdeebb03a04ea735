"""Numbers at the edges: stacks deeper than an int16, counts whose sum overflows, values
beyond int64, NaN and infinities, a frame line of 2**64, event times beyond int64
nanoseconds. Values are checked on import with one clear line; every writer writes valid
output or fails in one line."""

from __future__ import annotations

import gzip
import io
import json
import math
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hostile_inputs import one_error_line

from aiflame.model import CallTree, ProfileBuilder
from aiflame.render import jsonsafe
from aiflame.render.flamedata import unpack
from aiflame.render.html import extract_data, render_html, script_json
from aiflame.render.registry import render
from aiflame.sources.registry import load
from aiflame.sources.torch_memory.importer import PlainDataUnpickler
from aiflame.transforms.diff import diff_profiles

DATA = Path(__file__).parents[1] / "data"
SNAPSHOT = DATA / "memory" / "medium_128_inference_memory_snapshot.pickle.gz"
TRITON = DATA / "kineto" / "tracelens" / "torch_compile_triton" / "trace.json.gz"
BIG = "17" + "0" * 307  # 1.7e308: two of them add up to infinity


def aiflame(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "aiflame", *args], capture_output=True, timeout=300
    )


# -- deep stacks --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def deep(tmp_path_factory) -> Path:
    """A folded stack of 40,000 frames (beyond int16 depths) beside a shallow one."""
    path = tmp_path_factory.mktemp("deep") / "deep.folded"
    frames = ";".join(f"f{i % 7}" for i in range(40_000))
    path.write_text(f"{frames} 5\nmain;other 2\n")
    return path


def test_call_tree_of_a_deep_stack(deep):
    profile = load(str(deep))
    tree = CallTree.from_profile(profile)
    assert int(tree.depth.max()) == 39_999
    roots = tree.roots()
    assert sorted(tree.total_value[roots, 0].tolist()) == [2.0, 5.0]
    deepest = int(np.argmax(tree.depth))
    assert tree.total_value[deepest, 0] == 5.0


def test_page_and_outputs_of_a_deep_stack(deep, tmp_path):
    profile = load(str(deep))
    header, payload = extract_data(render_html(profile))
    assert header["maxDepth"] == 40_000  # below the synthetic root
    assert sum(unpack(header, payload)["self"][0]) == 7.0
    for fmt in ("folded", "pprof", "speedscope"):
        assert render(profile, fmt)
    r = aiflame("diff", str(deep), str(deep), "-o", str(tmp_path / "d.html"))
    assert r.returncode == 0, r.stderr.decode()


# -- sums beyond float range, values beyond int64 ----------------------------------------


@pytest.fixture
def overflowing(tmp_path) -> Path:
    path = tmp_path / "inf.folded"
    path.write_text(f"a;b {BIG}\na;c {BIG}\n")
    return path


@pytest.mark.parametrize(
    "command",
    [
        ["info"],
        ["convert", "-f", "folded", "-o", "OUT"],
        ["convert", "-f", "speedscope", "-o", "OUT"],
        ["convert", "-f", "pprof", "-o", "OUT"],
        ["flamegraph", "-o", "OUT"],
        ["diff", "SAME", "-o", "OUT"],
    ],
)
def test_counts_that_add_up_to_infinity(overflowing, tmp_path, command):
    out = tmp_path / "out.html"
    argv = [command[0], str(overflowing)] + [
        str(out) if a == "OUT" else str(overflowing) if a == "SAME" else a for a in command[1:]
    ]
    one_error_line(aiflame(*argv), "add up to more than a float holds")
    assert not out.exists()


def test_merged_inputs_that_overflow(tmp_path):
    half = tmp_path / "half.folded"
    half.write_text(f"a;b {BIG}\n")
    one_error_line(aiflame("info", str(half), str(half)), "2 inputs merged", "add up")


def test_a_value_beyond_int64(tmp_path):
    """pprof holds int64 values: refused in one line; speedscope and folded still write."""
    path = tmp_path / "huge.folded"
    path.write_text("a;b 1" + "0" * 30 + "\na;c 1\n")
    one_error_line(
        aiflame("convert", str(path), "-f", "pprof", "-o", str(tmp_path / "x")), "64-bit"
    )
    assert not (tmp_path / "x").exists()
    r = aiflame("convert", str(path), "-f", "speedscope", "-o", str(tmp_path / "s.json"))
    assert r.returncode == 0, r.stderr.decode()
    doc = json.loads((tmp_path / "s.json").read_text(), parse_constant=_no_constants)
    assert sorted(map(float, doc["profiles"][0]["weights"])) == [1.0, 1e30]


def _no_constants(token: str) -> None:
    raise AssertionError(f"{token} in JSON output")


def test_nan_and_infinity_never_reach_a_profile():
    b = ProfileBuilder()
    b.add(b.stack([b.frame("a")]), math.nan)
    assert "not a finite number" in b.build().value_problem()
    b = ProfileBuilder()
    b.add(b.stack([b.frame("a")]), 1.0)
    b.add(b.stack([b.frame("b")]), -math.inf)
    assert "-inf" in b.build().value_problem()


def test_diff_of_opposite_signs_beyond_range():
    """Mixed signs (a diff) whose plain sum stays finite while a subtree would not."""
    b = ProfileBuilder()
    b.add(b.stack([b.frame("a"), b.frame("x")]), 1.7e308)
    b.add(b.stack([b.frame("a"), b.frame("y")]), 1.7e308)
    b.add(b.stack([b.frame("z")]), -1.7e308)
    assert "add up" in b.build().value_problem()


def test_diff_profiles_stay_finite(tmp_path):
    base, test = ProfileBuilder(), ProfileBuilder()
    base.add(base.stack([base.frame("a")]), 1e-300)
    test.add(test.stack([test.frame("a")]), 1e300)
    test.add(test.stack([test.frame("b")]), 1e300)
    diff = diff_profiles(base.build(), test.build(), normalize=True)
    assert diff.value_problem() is None or "add up" in diff.value_problem()


# -- JSON writers -------------------------------------------------------------------------


def test_json_writers_write_null_for_nan():
    value = {"a": [1.0, math.nan, math.inf], "b": {"c": -math.inf}, "d": "NaN"}
    assert json.loads(jsonsafe.dumps(value)) == {
        "a": [1.0, None, None],
        "b": {"c": None},
        "d": "NaN",
    }
    assert "NaN" not in script_json({"x": math.nan}) and "null" in script_json({"x": math.nan})


def test_analyze_json_and_page_stay_valid(tmp_path):
    """A trace whose kernels last 0 us and whose ops have no shapes: ratios of nothing."""
    doc = json.loads(gzip.decompress(TRITON.read_bytes()))
    for e in doc["traceEvents"]:
        if e.get("cat") in ("kernel", "gpu_memcpy") and "dur" in e:
            e["dur"] = 0
    trace = tmp_path / "zero.json"
    trace.write_text(json.dumps(doc))
    r = aiflame(
        "analyze", str(trace), "--json", str(tmp_path / "r.json"), "-o", str(tmp_path / "r.html")
    )
    assert r.returncode in (0, 1), r.stderr.decode()
    assert "Traceback" not in r.stderr.decode()
    if r.returncode == 0:
        json.loads((tmp_path / "r.json").read_text(), parse_constant=_no_constants)
        assert (tmp_path / "r.html").read_text().rstrip().endswith("</html>")


@pytest.mark.parametrize(("key", "value"), [("dur", 1e308), ("ts", 1e300), ("dur", "inf")])
def test_event_times_beyond_int64_nanoseconds(tmp_path, key, value):
    doc = json.loads(gzip.decompress(TRITON.read_bytes()))
    kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    kernel[key] = value
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps(doc))
    for command in (["flamegraph", "-o", str(tmp_path / "x.html")], ["info"]):
        r = aiflame(command[0], str(trace), *command[1:])
        if value == "inf":  # not a time: the event is skipped, as other odd events are
            assert r.returncode == 0, r.stderr.decode()
        else:
            one_error_line(r, "more than 64-bit nanoseconds hold")


# -- memory snapshots ---------------------------------------------------------------------


def test_memory_page_with_a_frame_line_of_2_64(tmp_path):
    snap = PlainDataUnpickler(io.BytesIO(gzip.decompress(SNAPSHOT.read_bytes()))).load()
    frames = [f for t in snap["device_traces"] for e in t for f in e.get("frames", [])]
    for f in frames[:50]:
        f["line"] = 2**64
    path = tmp_path / "snap.pickle"
    path.write_bytes(pickle.dumps(snap, protocol=4))
    r = aiflame("memory", str(path), "-o", str(tmp_path / "m.html"))
    assert r.returncode == 0, r.stderr.decode()
    header, payload = extract_data((tmp_path / "m.html").read_text())
    lines = unpack(header, payload)["frame_line"]
    assert lines.max() < 2**31


def _deep_among_short(path: Path) -> Path:
    """A pprof of 20,000 short stacks and one of 100,000 frames: a (stacks x depth)
    matrix of it would be two billion cells."""
    from aiflame.proto.pyroscope.google.v1 import profile_pb2 as pb

    msg = pb.Profile()
    msg.string_table.extend(["", "samples", "count", *(f"f{i}" for i in range(100))])
    msg.sample_type.add(type=1, unit=2)
    for i in range(100):
        msg.function.add(id=i + 1, name=i + 3)
        msg.location.add(id=i + 1).line.add(function_id=i + 1)
    for i in range(20_000):
        distinct = [i % 97 + 1, (i // 97) % 97 + 1, (i // 9409) % 97 + 1]
        msg.sample.add(location_id=distinct, value=[1])
    msg.sample.add(location_id=[i % 100 + 1 for i in range(100_000)], value=[5])
    path.write_bytes(gzip.compress(msg.SerializeToString()))
    return path


def _load_and_write_all(path: str) -> dict[str, int]:
    profile = load(path)
    return {fmt: len(render(profile, fmt)) for fmt in ("folded", "pprof", "speedscope", "html")}


def test_one_very_deep_stack_among_many_short_ones(tmp_path):
    from limited import run_limited

    path = _deep_among_short(tmp_path / "deep.pb.gz")
    outcome = run_limited(_load_and_write_all, str(path), memory=1 << 30, timeout=120)
    assert outcome.status == "ok", outcome
    assert outcome.seconds < 60
    r = aiflame("diff", str(path), str(path), "-o", str(tmp_path / "d.folded"))
    assert r.returncode == 0, r.stderr.decode()
