"""speedscope import (checked against speedscope's own expected imports and a real py-spy
recording) and export (the file-format spec of src/lib/file-format-spec.ts)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from speedscope_snapshots import expected_stacks, folded_values

from aiflame.errors import InputError
from aiflame.model import FrameKind
from aiflame.render.folded import render_folded
from aiflame.render.speedscope import render_speedscope
from aiflame.sources import load
from aiflame.sources import speedscope as speedscope_source
from aiflame.sources.inputs import SNIFF_BYTES, Input

DATA = Path(__file__).parents[1] / "data"
PROFILES = DATA / "speedscope" / "profiles"
PYSPY = DATA / "speedscope" / "py_spy" / "pyspy.speedscope.json"
SNAPSHOT = (PROFILES / "file-format.test.ts.snap").read_text(encoding="utf-8")

CASES = {
    "simple-evented-0.0.1.speedscope.json": "importSpeedscopeProfiles 0.0.1 evented profile",
    "simple-no-pretty-print-0.0.1.speedscope.json": (
        "importSpeedscopeProfiles 0.0.1 evented profile (no pretty print)"
    ),
    "simple-sampled-0.1.2.speedscope.json": "importSpeedscopeProfiles 0.1.2 sampled profile",
}


def folded_of_label(profile, key: str, value: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for i in range(len(profile)):
        if profile.labels_of(i).get(key) == value:
            stack = ";".join(profile.stack_names(int(profile.sample_stack[i])))
            out[stack] = out.get(stack, 0.0) + float(profile.values[i, 0])
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_speedscopes_import(name):
    profile = load(str(PROFILES / name))
    assert profile.meta["format"] == "speedscope"
    assert folded_values(render_folded(profile)) == expected_stacks(SNAPSHOT, CASES[name])
    assert profile.label_sets == [()]  # one profile: no profile label


def test_several_profiles_become_labels():
    profile = load(str(PROFILES / "two-sampled-0.6.0.speedscope.json"))
    test = "importSpeedscopeProfiles 0.6.0 multiple profiles"
    assert folded_of_label(profile, "profile", "one") == expected_stacks(SNAPSHOT, test, 1)
    assert folded_of_label(profile, "profile", "two") == expected_stacks(SNAPSHOT, test, 2)
    assert profile.meta["title"] == "Two Samples"
    assert profile.meta["active_profile"] == "two"  # activeProfileIndex 1
    assert [(t.name, t.unit) for t in profile.sample_types] == [("time", "nanoseconds")]


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("invalid-incomplete-trace.json", "1 frames are never closed"),
        ("invalid-out-of-order-events.json", 'closing frame "B" at 4 while "A" is open'),
    ],
)
def test_files_speedscope_refuses_are_input_errors(name, message):
    with pytest.raises(InputError, match=message):
        load(str(PROFILES / name))


def test_py_spy_recording():
    profile = load(str(PYSPY))
    threads = sorted(dict(ls)["profile"] for ls in profile.label_sets if ls)
    assert threads == ['Thread 5592 ""', 'Thread 5595 "hasher"']
    assert len(profile) == 628
    # py-spy -r 200 writes weights of 0.005 s: whole nanoseconds after conversion.
    assert set(profile.values[:, 0].tolist()) == {5_000_000.0}
    frames = [profile.frames.get(i) for i in range(len(profile.frames))]
    assert all(f.kind == FrameKind.PYTHON for f in frames)
    fib = [f for f in frames if f.name == "fib"]
    assert fib and all(f.file.endswith("work.py") and f.line in (6, 7) for f in fib)
    hasher = folded_of_label(profile, "profile", 'Thread 5595 "hasher"')
    assert max(hasher, key=hasher.get).endswith("hashing")
    # py-spy names every file "py-spy profile": the page is titled by the file instead
    assert '"name":"py-spy profile"' in PYSPY.read_text() and "title" not in profile.meta
    from aiflame.render.titles import input_name

    assert input_name(profile) == "pyspy"


def _write(tmp_path, profiles, frames=None) -> str:
    doc = {
        "$schema": speedscope_source.SCHEMA_URL,
        "shared": {"frames": frames or [{"name": "a", "file": "a.c", "line": 3}, {"name": "b"}]},
        "profiles": profiles,
    }
    path = tmp_path / "p.speedscope.json"
    path.write_text(json.dumps(doc))
    return str(path)


def _sampled(unit, weights, name="p"):
    return {
        "type": "sampled",
        "name": name,
        "unit": unit,
        "startValue": 0,
        "endValue": sum(weights),
        "samples": [[0, 1]] * len(weights),
        "weights": weights,
    }


@pytest.mark.parametrize(
    ("unit", "sample_type", "total"),
    [
        ("nanoseconds", ("time", "nanoseconds"), 3.5),
        ("microseconds", ("time", "nanoseconds"), 3500),
        ("milliseconds", ("time", "nanoseconds"), 3_500_000),
        ("seconds", ("time", "nanoseconds"), 3_500_000_000),
        ("bytes", ("bytes", "bytes"), 3.5),
        ("none", ("samples", "count"), 3.5),
    ],
)
def test_units(tmp_path, unit, sample_type, total):
    profile = load(_write(tmp_path, [_sampled(unit, [1.5, 2])]))
    assert [(t.name, t.unit) for t in profile.sample_types] == [sample_type]
    assert profile.totals()[0] == pytest.approx(total)
    leaf = profile.stack_frames(int(profile.sample_stack[0]))[0]
    assert (leaf.name, leaf.file, leaf.line) == ("a", "a.c", 3)


def test_evented_times_become_durations_and_timestamps(tmp_path):
    events = [
        {"type": "O", "frame": 0, "at": 10},
        {"type": "O", "frame": 1, "at": 12},
        {"type": "C", "frame": 1, "at": 15},
        {"type": "C", "frame": 0, "at": 16},
        {"type": "O", "frame": 1, "at": 20},
        {"type": "C", "frame": 1, "at": 20.5},
    ]
    prof = {"type": "evented", "name": "e", "unit": "microseconds", "events": events}
    prof |= {"startValue": 10, "endValue": 21}
    profile = load(_write(tmp_path, [prof]))
    rows = [
        (";".join(profile.stack_names(int(s))), v, t)
        for s, v, t in zip(
            profile.sample_stack, profile.values[:, 0], profile.timestamps, strict=True
        )
    ]
    assert rows == [
        ("a", 2000, 10_000),
        ("a;b", 3000, 12_000),
        ("a", 1000, 15_000),
        ("b", 500, 20_000),
    ]


def test_mixed_profiles_keep_their_units_in_separate_metrics(tmp_path):
    evented = {
        "type": "evented",
        "name": "wall",
        "unit": "milliseconds",
        "startValue": 0,
        "endValue": 2,
        "events": [{"type": "O", "frame": 1, "at": 0}, {"type": "C", "frame": 1, "at": 2}],
    }
    profile = load(_write(tmp_path, [_sampled("bytes", [7], "memory"), evented]))
    assert [t.name for t in profile.sample_types] == ["bytes", "time"]
    assert profile.timestamps is None  # not every profile has times
    assert profile.totals().tolist() == [7, 2_000_000]
    assert profile.type_index(None) == 0  # activeProfileIndex defaults to the first


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"weights": [1]}, "2 samples but 1 weights"),
        ({"samples": [[0, 5], [0]]}, "refers to frame 5"),
        ({"samples": [[0, -1], [0]]}, "refers to frame -1"),
        ({"weights": [1, "x"]}, "not a number"),
        ({"unit": "furlongs"}, "unknown unit 'furlongs'"),
        ({"type": "traced"}, "unknown type 'traced'"),
    ],
)
def test_malformed_profiles_are_input_errors(tmp_path, change, message):
    prof = _sampled("none", [1, 2]) | change
    with pytest.raises(InputError, match=message):
        speedscope_source.load(Input(_write(tmp_path, [prof])))


def test_not_json_or_not_speedscope(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"$schema": "https://www.speedscope.app/file-format-schema.json", "pro')
    with pytest.raises(InputError, match="not valid JSON"):
        load(str(path))
    path.write_text('{"shared": {"frames": []}, "profiles": []}')
    with pytest.raises(InputError, match="no profiles"):
        load(str(path), "speedscope")


def test_sniff():
    for path in [*PROFILES.glob("*.json"), PYSPY]:
        assert speedscope_source.sniff(path.read_bytes()[:SNIFF_BYTES], str(path)), path
    others = [
        b'{"traceEvents": [{"ph": "X", "name": "a"}]}',
        b"a;b;c 1\n",
        (DATA / "pprof" / "go_runtime" / "cpu.pb.gz").read_bytes(),
    ]
    for head in others:
        assert not speedscope_source.sniff(head, "x")


def test_export_follows_the_file_format(tmp_path):
    profile = load(str(PYSPY))
    doc = json.loads(render_speedscope(profile))
    assert doc["$schema"] == "https://www.speedscope.app/file-format-schema.json"
    assert doc["exporter"].startswith("aiflame@")
    (out,) = doc["profiles"]
    assert out["type"] == "sampled" and out["unit"] == "nanoseconds"
    assert len(out["samples"]) == len(out["weights"])
    assert out["startValue"] == 0 and out["endValue"] == sum(out["weights"]) == 3_140_000_000
    frames = doc["shared"]["frames"]
    assert all(0 <= i < len(frames) for stack in out["samples"] for i in stack)
    assert [] in out["samples"]  # py-spy's samples without a Python stack are kept
    fib = {"name": "fib", "file": "/tmp/pyspy/work.py", "line": 7, "aiflameKind": "python"}
    assert fib in frames
    # Reading it back gives the same stacks and values.
    path = tmp_path / "out.speedscope.json"
    path.write_text(json.dumps(doc))
    again = load(str(path))
    assert render_folded(again) == render_folded(profile)


def test_export_picks_the_metric_and_its_unit():
    profile = load(str(DATA / "pprof" / "go_runtime" / "heap.pb.gz"))
    for metric, unit in (("inuse_space", "bytes"), ("alloc_objects", "none"), (None, "bytes")):
        doc = json.loads(render_speedscope(profile, metric))
        (out,) = doc["profiles"]
        assert out["unit"] == unit
        col = profile.type_index(metric)
        assert sum(out["weights"]) == pytest.approx(profile.totals()[col])
        assert all(w != 0 for w in out["weights"])
    with pytest.raises(KeyError):
        render_speedscope(profile, "nope")


def test_export_of_an_empty_stack_profile_is_valid():
    profile = load(str(PROFILES / "simple-sampled-0.1.2.speedscope.json"))
    profile.values[:] = 0
    doc = json.loads(render_speedscope(profile))
    assert doc["profiles"][0]["samples"] == [] and doc["profiles"][0]["endValue"] == 0
    assert np.all(profile.values == 0)
