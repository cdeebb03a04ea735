"""pprof import checked against pprof's own dumps, plus sniffing, options and bad input.

tests/data/pprof/PROVENANCE.md describes the files: pprof's test profiles converted to
``profile.proto`` by ``go tool pprof`` with pprof's expected ``Profile.String()`` dumps,
profiles written by Go's runtime with ``pprof -raw`` dumps, and the Go profile that
speedscope tests its pprof importer with, with speedscope's expected result.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import numpy as np
import pprof_dump
import pytest
from speedscope_snapshots import expected_stacks, folded_values

from aiflame.errors import InputError
from aiflame.model import FrameKind
from aiflame.proto.pyroscope.google.v1 import profile_pb2 as pb
from aiflame.render.folded import render_folded
from aiflame.sources import load, registry
from aiflame.sources.inputs import SNIFF_BYTES, Input
from aiflame.sources.pprof import importer as pprof_source

DATA = Path(__file__).parents[1] / "data"
PPROF = DATA / "pprof"
PPROF_TESTDATA = sorted((PPROF / "google_pprof").glob("*.string"))
GO_RUNTIME = [PPROF / "go_runtime" / "cpu.raw", PPROF / "go_runtime" / "heap.raw"]


def resolved(profile):
    """Like :func:`pprof_dump.resolved_samples`, from an imported profile."""
    out: dict = {}
    for i in range(len(profile)):
        frames = tuple(
            (f.name, f.file, f.line, f.module, f.address)
            for f in profile.stack_frames(int(profile.sample_stack[i]))
        )
        key = (frames, tuple(sorted(profile.labels_of(i).items())))
        acc = out.setdefault(key, [0] * len(profile.sample_types))
        for j in range(len(profile.sample_types)):
            acc[j] += int(profile.values[i, j])
    return {k: v for k, v in out.items() if any(v)}


@pytest.mark.parametrize("dump_path", PPROF_TESTDATA + GO_RUNTIME, ids=lambda p: p.stem)
def test_samples_match_pprofs_own_dump(dump_path):
    dump = pprof_dump.parse(dump_path.read_text())
    expected = pprof_dump.resolved_samples(dump)
    if dump_path.suffix == ".string":
        # go tool pprof -proto (which made the .pb.gz) drops samples without locations.
        expected = {k: v for k, v in expected.items() if k[0]}
    source = dump_path.with_name(dump_path.name.rsplit(".", 1)[0] + ".pb.gz")
    profile = pprof_source.load(Input(str(source)), granularity="address")

    assert [(t.name, t.unit) for t in profile.sample_types] == dump.sample_types
    assert resolved(profile) == expected
    assert profile.meta.get("period", 0) == dump.period
    if dump.period_type and dump.period_type != ("", ""):
        assert tuple(profile.meta["period_type"]) == dump.period_type
    # pprof's default is the type marked [dflt], else the last one.
    default = dump.default_index if dump.default_index is not None else len(dump.sample_types) - 1
    assert profile.type_index(None) == default


def test_go_runtime_time_labels_and_inlined_lines():
    dump = pprof_dump.parse((PPROF / "go_runtime" / "cpu.raw").read_text())
    profile = load(str(PPROF / "go_runtime" / "cpu.pb.gz"))
    assert profile.meta["format"] == "pprof"
    # "Time: 2026-11-29 10:29:50.288075881 +0000 UTC" -> the nanoseconds part matches.
    fraction = re.search(r"\.(\d{9}) ", dump.time_line).group(1)
    assert str(profile.meta["time_nanos"]).endswith(fraction)
    assert profile.meta["duration_nanos"] == 1_595_934_999
    lo, hi = profile.meta["time_range_ns"]
    assert hi - lo == profile.meta["duration_nanos"]
    workers = {dict(ls).get("worker") for ls in profile.label_sets}
    assert workers == {None, "hash", "alloc"}
    # main.mix is inlined into main.hash, itself inlined into main.work: one location,
    # three frames, caller first, each with its own line.
    inlined = [("main.work", 32), ("main.hash", 19), ("main.mix", 14)]
    found = False
    for s in set(profile.sample_stack.tolist()):
        frames = [(f.name, f.line) for f in profile.stack_frames(s)]
        if frames[-3:] == inlined:
            found = True
            assert all(
                f.file == "/tmp/goprof/main.go" and f.module == "/tmp/goprof/prog"
                for f in profile.stack_frames(s)[-3:]
            )
    assert found


def test_go_heap_profile_default_type_and_numeric_labels():
    profile = load(str(PPROF / "go_runtime" / "heap.pb.gz"))
    assert [t.name for t in profile.sample_types] == [
        "alloc_objects",
        "alloc_space",
        "inuse_objects",
        "inuse_space",
    ]
    assert profile.type_index(None) == 1  # default_sample_type: alloc_space
    assert profile.meta["pprof_numeric_labels"] == ["bytes"]
    sizes = {dict(ls)["bytes"] for ls in profile.label_sets if ls}
    assert "8192" in sizes and all(s.isdigit() for s in sizes)


def test_go_cpu_profile_matches_speedscopes_import():
    folder = PPROF / "speedscope_go"
    expected = expected_stacks((folder / "pprof.test.ts.snap").read_text())
    profile = load(str(folder / "simple.prof"))
    assert profile.sample_types[profile.type_index(None)].name == "cpu"
    assert folded_values(render_folded(profile)) == pytest.approx(expected)
    frames = {f.name: f for f in (profile.frames.get(i) for i in range(len(profile.frames)))}
    assert frames["main.alpha"].file.endswith("sample/programs/go/simple.go")


def test_granularity_options():
    path = str(PPROF / "go_runtime" / "cpu.pb.gz")
    by_line = pprof_source.load(Input(path))
    by_function = pprof_source.load(Input(path), granularity="function")
    by_address = pprof_source.load(Input(path), granularity="address")
    assert all(a == 0 for a in by_line.frames.address)  # symbolized: the line says where
    assert len(set(by_address.frames.address)) > 10
    lines = {by_function.frames.get(i).line for i in range(len(by_function.frames))}
    assert lines == {0}  # Go writes no start lines: one frame per function
    assert len(by_function.frames) < len(by_line.frames) < len(by_address.frames)
    for p in (by_function, by_address):
        assert np.allclose(p.totals(), by_line.totals())
    with pytest.raises(ValueError):
        pprof_source.load(Input(path), granularity="column")


def _all_test_profiles():
    return [*sorted(PPROF.rglob("*.pb.gz")), PPROF / "speedscope_go" / "simple.prof"]


@pytest.mark.parametrize("path", _all_test_profiles(), ids=lambda p: p.name)
def test_sniff_and_detect_gzipped_and_plain(path, tmp_path):
    raw = gzip.decompress(path.read_bytes())
    assert pprof_source.sniff(raw[:SNIFF_BYTES], str(path))
    plain = tmp_path / "plain.pb"
    plain.write_bytes(raw)
    assert registry.detect(Input(str(plain))).FORMAT == "pprof"
    assert registry.detect(Input(str(path))).FORMAT == "pprof"
    assert render_folded(load(str(plain))) == render_folded(load(str(path)))


def test_sniff_refuses_text_and_other_formats():
    refused = [
        *(DATA / "speedscope").rglob("*.json"),
        *(DATA / "speedscope" / "stackcollapse").glob("*.txt"),
        *(PPROF / "google_pprof").glob("*.string"),
        PPROF / "go_runtime" / "main.go",
    ]
    assert len(refused) > 20
    for path in refused:
        assert not pprof_source.sniff(path.read_bytes()[:SNIFF_BYTES], str(path)), path
    for head in (b"hi", b"\x08\x01", b"\x00\x00\x00\x00\x03\x00", b"\n\x05ab", b"\xff\xfea\x00"):
        assert not pprof_source.sniff(head, "x")


def test_sniff_accepts_a_cut_head_of_a_big_profile():
    raw = gzip.decompress((PPROF / "go_runtime" / "heap.pb.gz").read_bytes())
    for cut in (40, 100, 333, len(raw) - 7):
        head = raw[:cut]
        assert pprof_source.looks_like_profile(head, complete=False)
        assert not pprof_source.looks_like_profile(head, complete=True)


def test_truncated_or_corrupt_data_is_a_clean_input_error(tmp_path):
    raw = gzip.decompress((PPROF / "go_runtime" / "cpu.pb.gz").read_bytes())
    target = tmp_path / "cut.pb"
    errors = 0
    # The importer itself (not the registry, which wraps any exception) must raise
    # InputError and nothing else.
    for cut in range(1, len(raw), 19):
        target.write_bytes(raw[:cut])
        try:
            pprof_source.load(Input(str(target)))
        except InputError as e:
            assert str(target) in str(e)
            errors += 1
    assert errors > len(raw) // 19 * 0.9  # almost every cut breaks a reference or a field
    gz = tmp_path / "cut.pb.gz"
    gz.write_bytes((PPROF / "go_runtime" / "cpu.pb.gz").read_bytes()[:500])
    with pytest.raises(InputError, match="truncated gzip"):
        load(str(gz), "pprof")
    rng = np.random.default_rng(7)
    for _ in range(80):
        bad = bytearray(raw)
        for i in rng.integers(0, len(raw), 3):
            bad[i] = int(rng.integers(0, 256))
        target.write_bytes(bytes(bad))
        try:
            profile = pprof_source.load(Input(str(target)))
        except InputError:
            continue
        assert len(profile) <= 100  # what survived still parses into a sane profile


def _message(**kw) -> pb.Profile:
    strings = ["", "samples", "count", "f", "g", "key", "bytes", "cpu"]
    msg = pb.Profile(string_table=strings, **kw)
    msg.sample_type.add(type=1, unit=2)
    msg.function.add(id=1, name=3)
    msg.function.add(id=2, name=4)
    msg.location.add(id=1).line.add(function_id=1)
    msg.location.add(id=2).line.add(function_id=2)
    return msg


def _load_message(msg: pb.Profile, tmp_path: Path):
    path = tmp_path / "m.pb.gz"
    path.write_bytes(gzip.compress(msg.SerializeToString()))
    return load(str(path))


def test_references_to_missing_entries_are_input_errors(tmp_path):
    msg = _message()
    msg.sample.add(location_id=[9], value=[1])
    with pytest.raises(InputError, match="missing location 9"):
        _load_message(msg, tmp_path)
    msg = _message()
    msg.location.add(id=3).line.add(function_id=42)
    with pytest.raises(InputError, match="missing function 42"):
        _load_message(msg, tmp_path)
    msg = _message()
    msg.sample.add(location_id=[1], value=[1, 2])
    with pytest.raises(InputError, match="2 values for 1 types"):
        _load_message(msg, tmp_path)
    msg = _message()
    msg.function.add(id=3, name=99)
    with pytest.raises(InputError, match="string index 99"):
        _load_message(msg, tmp_path)


def test_numeric_labels_with_units_empty_stacks_and_unsymbolized_locations(tmp_path):
    msg = _message()
    msg.mapping.add(id=1, filename=6)
    msg.location.add(id=3, mapping_id=1, address=0x4A0)
    s = msg.sample.add(location_id=[2, 1], value=[5])
    s.label.add(key=5, num=4096, num_unit=6)
    msg.sample.add(location_id=[], value=[2])
    msg.sample.add(location_id=[3], value=[1])
    profile = _load_message(msg, tmp_path)
    assert profile.labels_of(0) == {"key": "4096 bytes"}
    assert profile.stack_names(int(profile.sample_stack[0])) == ["f", "g"]
    assert int(profile.sample_stack[1]) == -1 and profile.values[1, 0] == 2
    leaf = profile.stack_frames(int(profile.sample_stack[2]))[-1]
    assert (leaf.name, leaf.module, leaf.address) == ("0x4a0", "bytes", 0x4A0)
    assert profile.type_index(None) == 0


def test_kind_marker_is_read_back_and_ignored_when_it_does_not_fit(tmp_path):
    msg = _message()
    msg.string_table.extend(["f [aiflame:gpu-kernel]", "h [aiflame:python]"])
    msg.function[0].system_name = 8  # matches the name: kind read back
    msg.function[1].system_name = 9  # another name: not ours, guess from the name
    msg.sample.add(location_id=[2, 1], value=[1])
    profile = _load_message(msg, tmp_path)
    f, g = profile.stack_frames(int(profile.sample_stack[0]))
    assert f.kind == FrameKind.GPU_KERNEL
    assert g.kind == FrameKind.NATIVE


def test_info_of_a_heap_profile_taken_at_one_instant(capsys):
    # A heap profile has a time of collection and no duration: info said "time range: 0 ns".
    from aiflame.cli.main import main

    heap = PPROF / "go_runtime" / "heap.pb.gz"
    assert main(["info", str(heap)]) == 0
    out = capsys.readouterr().out
    assert "time range:" not in out
    assert "time:        1795948191894615725 ns (one instant, no time range)" in out
    assert main(["info", str(PPROF / "go_runtime" / "cpu.pb.gz")]) == 0  # spans its duration
    assert "time range:  1.596 s (" in capsys.readouterr().out
