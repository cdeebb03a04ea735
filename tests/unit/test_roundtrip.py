"""Conversions that must not lose anything: folded/speedscope/pprof -> pprof -> back, and the
same through the ``aiflame convert`` command line."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from aiflame.cli.main import main
from aiflame.model import FrameKind
from aiflame.proto.pyroscope.google.v1 import profile_pb2 as pb
from aiflame.render.folded import render_folded
from aiflame.render.pprof import build_message, render_pprof
from aiflame.render.speedscope import render_speedscope
from aiflame.sources import load

DATA = Path(__file__).parents[1] / "data"
COLLAPSED = DATA / "speedscope" / "stackcollapse"
FOLDED_INPUTS = [
    COLLAPSED / "perf-vertx-stacks-01-collapsed-all.txt.gz",
    COLLAPSED / "recursion.txt",
    COLLAPSED / "simple-utf16-le.txt",
    COLLAPSED / "alternating.txt",
]
PPROF_INPUTS = [
    DATA / "pprof" / "go_runtime" / "cpu.pb.gz",
    DATA / "pprof" / "go_runtime" / "heap.pb.gz",
    DATA / "pprof" / "google_pprof" / "java.heap.pb.gz",
    DATA / "pprof" / "speedscope_go" / "simple.prof",
]
SPEEDSCOPE_INPUTS = [
    DATA / "speedscope" / "py_spy" / "pyspy.speedscope.json",
    DATA / "speedscope" / "profiles" / "two-sampled-0.6.0.speedscope.json",
    DATA / "speedscope" / "profiles" / "simple-evented-0.0.1.speedscope.json",
]


def through(profile, fmt: str, tmp_path: Path):
    """Write ``profile`` as ``fmt`` and read it back."""
    if fmt == "pprof":
        path = tmp_path / "rt.pb.gz"
        path.write_bytes(render_pprof(profile))
    else:
        path = tmp_path / "rt.speedscope.json"
        path.write_text(render_speedscope(profile), encoding="utf-8")
    again = load(str(path))
    assert again.meta["format"] == fmt
    return again


def frame_rows(profile, col: int = 0) -> dict:
    """(frames with every attribute but the address, labels) -> summed value of ``col``."""
    out: dict = {}
    for i in range(len(profile)):
        frames = tuple(
            (f.name, f.kind, f.file, f.line, f.module)
            for f in profile.stack_frames(int(profile.sample_stack[i]))
        )
        key = (frames, tuple(sorted(profile.labels_of(i).items())))
        out[key] = out.get(key, 0.0) + float(profile.values[i, col])
    return {k: v for k, v in out.items() if v}


@pytest.mark.parametrize("path", FOLDED_INPUTS, ids=lambda p: p.name)
def test_folded_to_pprof_and_back(path, tmp_path):
    profile = load(str(path))
    again = through(profile, "pprof", tmp_path)
    assert render_folded(again) == render_folded(profile)
    assert again.totals().tolist() == profile.totals().tolist()
    assert frame_rows(again) == frame_rows(profile)  # kinds too


def test_frame_kinds_survive_pprof(tmp_path):
    path = tmp_path / "gpu.folded"
    path.write_text(
        "train.py:12;aten::mm;cudaLaunchKernel;-;sgemm_kernel;sgemm.cu:40;FFMA R1 2\n"
        "train.py:12;do_syscall_64_[k] 3\n"
        "train.py:12;jit_avx512_gemm 1\n",
        encoding="utf-8",
    )
    profile = load(str(path))
    kinds = {FrameKind(k) for k in profile.frames.kind}
    assert len(kinds) >= 8  # python, cpp, runtime, delimiter, gpu x3, kernel, jit
    again = through(profile, "pprof", tmp_path)
    assert frame_rows(again) == frame_rows(profile)


def test_frame_kinds_survive_speedscope(tmp_path, data_dir):
    """The kinds (the page's colours) of a GPU trace's frames come back from speedscope:
    the GPU kernels, the delimiter, runtime calls, operators, Python."""
    trace = data_dir / "kineto/tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"
    profile = load(str(trace))
    again = through(profile, "speedscope", tmp_path)

    def by_stack(p, col: int) -> dict:  # labels and modules are not written to speedscope
        out: dict = {}
        for (frames, _labels), v in frame_rows(p, col).items():
            key = tuple((n, k, f, line) for n, k, f, line, _module in frames)
            out[key] = out.get(key, 0.0) + v
        return out

    ours = by_stack(profile, profile.type_index("gpu-time"))
    assert by_stack(again, again.type_index(None)) == pytest.approx(ours)
    kinds = {FrameKind(k) for k in again.frames.kind}
    assert {FrameKind.GPU_KERNEL, FrameKind.DELIMITER, FrameKind.RUNTIME, FrameKind.PYTHON} <= kinds
    doc = json.loads((tmp_path / "rt.speedscope.json").read_text())
    assert {f.get("aiflameKind") for f in doc["shared"]["frames"]} >= {"gpu-kernel", "delimiter"}


def test_fractional_values_survive_pprof(tmp_path):
    path = tmp_path / "frac.folded"
    path.write_text("a;b 0.25\na;c 1.5\nd 3\n", encoding="utf-8")
    profile = load(str(path))
    message = build_message(profile)
    unit = message.string_table[message.sample_type[0].unit]
    assert unit == "count*1e-2"  # pprof values are integers: written in hundredths
    again = through(profile, "pprof", tmp_path)
    assert again.sample_types == profile.sample_types
    assert render_folded(again) == "a;b 0.25\na;c 1.5\nd 3\n"


@pytest.mark.parametrize("path", PPROF_INPUTS, ids=lambda p: p.name)
def test_pprof_to_pprof_keeps_everything(path, tmp_path):
    profile = load(str(path))
    again = through(profile, "pprof", tmp_path)
    assert again.sample_types == profile.sample_types
    for col in range(len(profile.sample_types)):
        assert frame_rows(again, col) == frame_rows(profile, col)
    assert again.type_index(None) == profile.type_index(None)
    for key in ("period", "period_type", "time_nanos", "duration_nanos", "pprof_numeric_labels"):
        assert again.meta.get(key) == profile.meta.get(key)


def test_numeric_labels_are_written_as_numbers():
    profile = load(str(DATA / "pprof" / "go_runtime" / "heap.pb.gz"))
    message = build_message(profile)
    labels = [lb for s in message.sample for lb in s.label]
    assert labels and all(lb.num > 0 and lb.str == 0 for lb in labels)
    assert {message.string_table[lb.key] for lb in labels} == {"bytes"}


def test_go_tool_pprof_sees_names_files_and_the_default_type():
    """What other tools read: plain names and files; the kind only in system_name."""
    profile = load(str(DATA / "pprof" / "go_runtime" / "cpu.pb.gz"))
    message = pb.Profile.FromString(gzip.decompress(render_pprof(profile)))
    st = message.string_table
    names = {st[f.name] for f in message.function}
    assert "main.hash" in names and not any("aiflame" in n for n in names)
    assert {st[f.filename] for f in message.function} >= {"/tmp/goprof/main.go"}
    assert all(st[f.system_name].startswith(st[f.name] + " [aiflame:") for f in message.function)
    assert st[message.default_sample_type] == "cpu"
    assert [st[m.filename] for m in message.mapping] == ["/tmp/goprof/prog"]


@pytest.mark.parametrize("path", SPEEDSCOPE_INPUTS, ids=lambda p: p.name)
def test_speedscope_to_folded_pprof_and_speedscope(path, tmp_path):
    profile = load(str(path))
    folded = render_folded(profile)
    assert folded  # the stacks are there
    for fmt in ("pprof", "speedscope"):
        again = through(profile, fmt, tmp_path)
        assert render_folded(again) == folded
        assert again.totals()[again.type_index(None)] == pytest.approx(profile.totals()[0])
    again = through(profile, "pprof", tmp_path)
    assert frame_rows(again) == frame_rows(profile)  # files, lines and labels too


def test_cli_convert_folded_to_pprof_and_back(tmp_path, capsys):
    x = tmp_path / "x.folded"
    x.write_bytes(gzip.decompress(FOLDED_INPUTS[0].read_bytes()))
    y = tmp_path / "y.pb.gz"
    assert main(["convert", str(x), "-o", str(y)]) == 0
    assert y.read_bytes()[:2] == b"\x1f\x8b"
    capsys.readouterr()
    assert main(["convert", str(y), "-f", "folded", "-o", "-"]) == 0
    via_pprof = capsys.readouterr().out
    assert main(["convert", str(x), "-f", "folded", "-o", "-"]) == 0
    direct = capsys.readouterr().out
    assert via_pprof == direct and len(direct.splitlines()) == 199


def test_cli_convert_to_speedscope_and_pprof_by_extension(tmp_path, capsys):
    src = str(DATA / "pprof" / "go_runtime" / "heap.pb.gz")
    out = tmp_path / "heap.speedscope.json"
    assert main(["convert", src, "-o", str(out), "-m", "inuse_space"]) == 0
    assert main(["convert", str(out), "-f", "folded", "-o", "-"]) == 0
    via = capsys.readouterr().out
    assert main(["convert", src, "-m", "inuse_space", "-f", "folded", "-o", "-"]) == 0
    assert capsys.readouterr().out == via
    assert main(["convert", src, "-o", str(tmp_path / "h.pprof"), "-m", "nope"]) == 1
    assert "no metric 'nope'" in capsys.readouterr().err


def test_pprof_output_is_deterministic():
    profile = load(str(DATA / "pprof" / "go_runtime" / "cpu.pb.gz"))
    assert render_pprof(profile) == render_pprof(profile)
    assert np.array_equal(
        profile.values, load(str(DATA / "pprof" / "go_runtime" / "cpu.pb.gz")).values
    )


def test_numeric_label_units_and_time_span_are_written(tmp_path):
    message = pb.Profile(string_table=["", "space", "bytes", "f", "size", "B", "request"])
    message.sample_type.add(type=1, unit=2)
    message.function.add(id=1, name=3)
    message.location.add(id=1).line.add(function_id=1)
    sample = message.sample.add(location_id=[1], value=[64])
    sample.label.add(key=4, num=4096, num_unit=5)
    sample.label.add(key=6, str=3)
    path = tmp_path / "in.pb"
    path.write_bytes(message.SerializeToString())
    profile = load(str(path))
    assert profile.labels_of(0) == {"size": "4096 B", "request": "f"}
    out = build_message(profile)
    st = out.string_table
    labels = {st[lb.key]: (lb.num, st[lb.num_unit], st[lb.str]) for lb in out.sample[0].label}
    assert labels == {"size": (4096, "B", ""), "request": (0, "", "f")}
    # Sample timestamps (here from speedscope events) give pprof's time and duration.
    events = DATA / "speedscope" / "profiles" / "simple-evented-0.0.1.speedscope.json"
    doc = events.read_text().replace('"unit": "none"', '"unit": "milliseconds"')
    timed = tmp_path / "timed.speedscope.json"
    timed.write_text(doc)
    out = build_message(load(str(timed)))
    assert (out.time_nanos, out.duration_nanos) == (0, 0)  # starts at 0: no wall-clock time
    profile = load(str(timed))
    profile.timestamps = profile.timestamps + 1_700_000_000_000_000_000
    out = build_message(profile)
    assert out.time_nanos == 1_700_000_000_000_000_000
    assert out.duration_nanos == 9_000_000  # last interval starts at 9 ms
