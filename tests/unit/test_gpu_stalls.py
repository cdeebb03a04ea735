"""``aiflame analyze`` of GPU PC samples: top reasons, lines and fixes per hot kernel, on the
real recordings (HPCToolkit on an sm_80 GPU, rocprofv3 on MI300, Nsight Compute on A40)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aiflame.analysis.gpu_stalls import advice_for, analyze_stalls
from aiflame.cli.main import main
from aiflame.model import gpu
from aiflame.sources import load

DATA = Path(__file__).parents[1] / "data" / "gpu_instructions"
HPC = DATA / "hpctoolkit" / "loops-cuda-nvidiapc-t.d"
ROCPROF = DATA / "rocprofiler_sdk" / "pc_sampling_stochastic_debug.csv"
NCU = DATA / "nsight_compute" / "indexspaces-bb-a40.ncu-rep.gz"
TRACE = (
    DATA.parent / "kineto" / "tracelens" / "h100" / "gaunernst_bert-small-uncased__1016001.json.gz"
)


def test_hpctoolkit_kernel_is_dependency_bound_on_its_inlined_line():
    report = analyze_stalls(load(str(HPC)))
    (k,) = report.kernels
    assert k.kernel == "kernmain()" and k.share == 1.0
    assert k.reasons[0].name == "STL_IDEP"
    assert k.reasons[0].samples * 4096 == pytest.approx(1_881_944_064)  # HPCToolkit's own
    assert k.lines[0].name == "loops.cu:16"  # func2, inlined at line 31
    (f,) = [f for f in report.findings if f.reason == "STL_IDEP"]
    assert f.stall_class == gpu.SHORT_DEPENDENCY
    assert "independent instructions" in f.fix
    assert any("loops.cu:16" in e for e in f.evidence)
    assert report.period == 4096 and report.period_unit == "cycles"


def test_amd_waitcnt_is_memory_latency():
    report = analyze_stalls(load(str(ROCPROF)))
    assert report.total_samples == 97
    # without a kernel trace each dispatch is its own kernel; WAITCNT leads the hot ones
    assert report.kernels[0].reasons[0].name == "WAITCNT"
    assert report.kernels[0].lines[0].name == "vector-ops.cpp:82"
    memory = [f for f in report.findings if f.reason == "WAITCNT"]
    assert memory and all(f.stall_class == gpu.MEMORY for f in memory)
    assert "coalesce" in memory[0].fix


def test_nsight_compute_findings_with_evidence():
    pytest.importorskip("ncu_report")
    report = analyze_stalls(load(str(NCU)))
    first, second = report.kernels
    assert first.kernel.startswith("julia_bb_4477") and first.samples == 956_805
    assert first.reasons[0].name == "math_pipe_throttle"
    f = next(f for f in report.findings if f.reason == "math_pipe_throttle")
    assert f.title.startswith("compute-bound at a math pipe")
    assert "IndexSpaces.jl:1404" in f.evidence[1]
    assert not any(f.reason == "selected" for f in report.findings)  # issued is not a stall
    assert second.reasons[0].name == "drain"


@pytest.mark.parametrize(
    ("reason", "word"),
    [
        ("long_scoreboard", "coalesce"),
        ("smsp__pcsamp_warps_issue_stalled_barrier", "balance"),
        ("STL_GMEM", "coalesce"),
        ("BARRIER_WAIT", "balance"),
        ("sbid", "coalesce"),
        ("mio_throttle", "bank conflicts"),
        ("math_pipe_throttle", "compute-bound"),
    ],
)
def test_advice_reads_every_vendors_names(reason, word):
    advice = advice_for(reason)
    assert advice is not None and word in (advice.title + " " + advice.fix)


def test_cli_json_and_text(capsys):
    assert main(["analyze", str(HPC), "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["gpu_stalls"]["kernels"][0]["kernel"] == "kernmain()"
    assert main(["analyze", str(ROCPROF)]) == 0
    out = capsys.readouterr().out
    assert "GPU stall analysis" in out and "WAITCNT" in out and "fix:" in out


def test_trace_and_samples_together(capsys):
    assert main(["analyze", str(TRACE), str(HPC)]) == 0
    out = capsys.readouterr().out
    assert "GPU stall analysis" in out and "kernmain()" in out


def test_names_from_the_profile_reach_the_terminal_spelled_out(tmp_path, capsys):
    """A source file named with terminal escapes (a hostile CSV) prints as <U+001B>...,
    never as an escape the terminal would run."""
    from aiflame.cli.main import main

    seed = Path(__file__).resolve().parents[1] / "data/gpu_instructions/rocprofiler_sdk"
    text = (seed / "pc_sampling_stochastic_debug.csv").read_text(encoding="utf-8")
    hostile = tmp_path / "hostile.csv"
    hostile.write_text(text.replace("vector-ops.cpp", "vector-\x1b[2J\x1b[H.cpp"), encoding="utf-8")
    assert main(["analyze", str(hostile)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "vector-<U+001B>[2J<U+001B>[H.cpp:82" in out


def test_device_functions_below_a_kernel_are_not_kernels():
    """HPCToolkit puts the device functions a kernel calls below it: their samples are the
    launched kernel's, and the report lists that kernel alone."""
    from aiflame.model import FrameKind, ProfileBuilder

    b = ProfileBuilder([gpu.GPU_SAMPLES])
    host = b.stacks.intern((b.frame("main", FrameKind.NATIVE), b.frame("-", FrameKind.DELIMITER)))
    kernel = b.stacks.intern((b.frame("kern(float*)", FrameKind.GPU_KERNEL),), host)
    device_fn = b.stacks.intern((b.frame("helper(float)", FrameKind.GPU_KERNEL),), kernel)
    for parent, line, value in ((kernel, 3, 10.0), (device_fn, 7, 30.0)):
        sid = b.stacks.intern(
            (b.frame(f"k.cu:{line}", FrameKind.GPU_SOURCE), b.frame("STL_X", FrameKind.GPU_STALL)),
            parent,
        )
        b.add(sid, value)
    report = analyze_stalls(b.build())
    (k,) = report.kernels
    assert k.kernel == "kern(float*)" and k.samples == 40.0
    assert [(x.name, x.samples) for x in k.lines] == [("k.cu:7", 30.0), ("k.cu:3", 10.0)]
