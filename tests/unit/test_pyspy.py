"""py-spy output to samples: frame kinds, JIT names from perf maps, labels, sampler flags."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from aiflame.collectors.pyspy import (
    SamplerConfig,
    StreamSpec,
    add_samples,
    convert_frame,
    explain_failure,
    read_speedscope,
)
from aiflame.errors import InputError
from aiflame.model import FrameKind, ProfileBuilder, SampleType
from aiflame.symbolize.perfmap import PerfMap


@pytest.fixture(scope="module")
def native(data_dir):
    d = data_dir / "record"
    pid = int((d / "pyspy-native.pid").read_text())
    return (
        read_speedscope(str(d / "pyspy-native.speedscope.json")),
        PerfMap.read(str(d / "pyspy-native.perf.map")),
        pid,
    )


def _profile(data, spec, types=("native-samples",)):
    b = ProfileBuilder([SampleType(t) for t in types])
    n = add_samples(b, data, spec)
    return b.build(), n


def test_frames_get_kinds_files_and_jit_names(native):
    data, perf_map, pid = native
    prof, n = _profile(data, StreamSpec(0, True, pid, lambda p: perf_map if p == pid else None))
    assert n == sum(len(t.samples) for t in data.threads)
    frames = [prof.frames.get(i) for i in range(len(prof.frames))]
    by_kind = Counter(f.kind for f in frames)
    assert by_kind[FrameKind.PYTHON] and by_kind[FrameKind.CPP] and by_kind[FrameKind.NATIVE]
    jit = {f.name for f in frames if f.kind == FrameKind.JIT}
    assert "jit_avx2_conv_fwd_kernel_f32_t" in jit  # the oneDNN counter suffix is folded
    assert not [f for f in frames if f.name.startswith("0x")]  # nothing left as an address
    step = [f for f in frames if f.name == "train_step"]
    assert step and step[0].file == "<string>" and step[0].line > 0
    conv = [f for f in frames if f.name.startswith("at::native::") and f.kind == FrameKind.CPP]
    assert conv and conv[0].module == "libtorch_cpu.so"
    # JIT kernels sit under the oneDNN C++ that calls them, under the Python that calls that
    for s, _ in prof.iter_stack_values(0):
        names = prof.stack_names(s)
        if names[-1].startswith("jit_avx2_conv"):
            assert "train_step" in names and any(x.startswith("dnnl::") for x in names)


def test_without_perf_map_jit_code_is_unknown_not_an_address(native):
    data, _, pid = native
    prof, _ = _profile(data, StreamSpec(0, True, pid))
    names = {prof.frames.name_of(i) for i in range(len(prof.frames))}
    assert "[unknown]" in names
    assert not any(n.startswith(("0x", "jit_")) for n in names)


def test_labels_pid_tid_thread_state(native):
    data, perf_map, pid = native
    prof, _ = _profile(data, StreamSpec(0, True, pid, lambda p: perf_map, {pid: {"rank": "0"}}))
    by_thread = Counter()
    for i in range(len(prof)):
        labels = prof.labels_of(i)
        assert labels["pid"] == str(pid) and labels["rank"] == "0" and labels["tid"].isdigit()
        by_thread[(labels["thread"], labels["state"])] += 1
    assert by_thread[("sleeper", "idle")] > 0 and by_thread[("MainThread", "active")] > 0
    assert by_thread[("sleeper", "active")] == 0


def test_cpu_stream_drops_waiting_threads(native):
    data, _, pid = native
    spec_native = StreamSpec(1, True, pid)
    b = ProfileBuilder([SampleType("cpu-samples"), SampleType("native-samples")])
    add_samples(b, data, spec_native)
    # The same recording read as a CPU stream: the sleeper (idle in every native sample)
    # is not CPU time, the training thread is.
    n = add_samples(b, data, StreamSpec(0, False, pid, states=spec_native.states))
    prof = b.build()
    cpu_threads = {prof.labels_of(i)["thread"] for i in range(len(prof)) if prof.values[i, 0]}
    assert cpu_threads == {"MainThread"}
    assert n == len(data.threads[0].samples)


def test_subprocess_profiles_carry_their_pid(tmp_path):
    frames = [{"name": "main", "file": "/a/child.py", "line": 3}]
    doc = {
        "shared": {"frames": frames},
        "profiles": [
            {"name": 'Process 41 Thread 41 "MainThread"', "samples": [[0], [0]]},
            {"name": 'Process 42 Thread 0x7F00 ""', "samples": [[0]]},
        ],
    }
    path = tmp_path / "s.json"
    path.write_text(json.dumps(doc))
    data = read_speedscope(str(path))
    assert [(t.pid, t.tid, t.name) for t in data.threads] == [
        (41, "41", "MainThread"),
        (42, "0x7F00", ""),
    ]
    prof, _ = _profile(data, StreamSpec(0, True, default_pid=1))
    pids = Counter(prof.labels_of(i)["pid"] for i in range(len(prof)))
    assert pids == {"41": 2, "42": 1}


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"name": "f", "file": "/x/y.py", "line": 7}, ("f", FrameKind.PYTHON, "/x/y.py", 7, "")),
        ({"name": "<module>", "file": "<string>", "line": 1}, ("<module>", FrameKind.PYTHON)),
        ({"name": "f", "file": "/x/script", "line": 4}, ("f", FrameKind.PYTHON)),  # no .py
        (
            {"name": "at::mm", "file": "/t/lib/libtorch_cpu.so", "line": 0},
            ("at::mm", FrameKind.CPP, "", 0, "libtorch_cpu.so"),
        ),
        (
            {"name": "memcpy", "file": "/usr/lib/libc.so.6", "line": 0},
            ("memcpy", FrameKind.NATIVE, "", 0, "libc.so.6"),
        ),
        (
            {"name": "0x7f0000001234", "file": "/usr/lib/libc.so.6", "line": 0},
            ("[libc.so.6]", FrameKind.NATIVE, "", 0, "libc.so.6"),
        ),
        (
            {"name": "do_work", "file": "/src/work.c", "line": 12},  # native with debug info
            ("do_work", FrameKind.NATIVE, "/src/work.c", 12, ""),
        ),
        ({"name": "0x1234", "file": "?", "line": 0}, ("[unknown]", FrameKind.NATIVE)),
        (
            {"name": 'process 12:"python child.py --x"', "file": "", "line": 0},
            ("process 12: python child.py --x", FrameKind.LABEL),
        ),
    ],
)
def test_convert_frame(raw, expected):
    f = convert_frame(raw)
    assert (f.name, f.kind, f.file, f.line, f.module)[: len(expected)] == expected


def test_bad_outputs_are_input_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        read_speedscope(str(bad))
    odd = tmp_path / "odd.json"
    odd.write_text('{"profiles": []}')
    with pytest.raises(InputError, match="unexpected py-spy speedscope layout"):
        read_speedscope(str(odd))
    with pytest.raises(InputError, match="cannot read"):
        read_speedscope(str(tmp_path / "missing.json"))


def test_sampler_flags():
    cpu = SamplerConfig(99, native=False, idle=False, duration=2.4).args("py-spy", 7, "o.json")
    assert cpu[:4] == ["py-spy", "record", "--pid", "7"]
    assert "--nonblocking" in cpu and "--native" not in cpu and "--idle" not in cpu
    assert cpu[cpu.index("--duration") + 1] == "2"
    nat = SamplerConfig(5, native=True, idle=True, subprocesses=True).args("py-spy", 7, "o")
    assert {"--native", "--idle", "--subprocesses"} <= set(nat) and "--nonblocking" not in nat
    assert nat[nat.index("--rate") + 1] == "5" and "--format" in nat


def test_failure_messages():
    assert "not permitted" in explain_failure("Error: Permission denied (os error 13)", 5)
    assert "does not look like a Python" in explain_failure(
        "Error: Failed to find python version from target process", 5
    )
    assert (
        explain_failure("some noise\nError: boom\n", 5) == "py-spy failed on process 5: Error: boom"
    )
