"""Nsight Compute importer, on a real report (two Julia CUDA kernels on an A40, with the
Source Counters section), and on ``--page source --csv`` exports laid out from it.

Expected numbers are read from the report here with NVIDIA's ncu_report directly.
"""

from __future__ import annotations

import csv
import gzip
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from aiflame.cli.main import main
from aiflame.errors import InputError
from aiflame.model import FrameKind, gpu
from aiflame.sources import load

ncu_report = pytest.importorskip("ncu_report")

DATA = Path(__file__).parents[1] / "data" / "gpu_instructions" / "nsight_compute"
REPORT_GZ = DATA / "indexspaces-bb-a40.ncu-rep.gz"
PREFIX = "smsp__pcsamp_warps_issue_stalled_"


@pytest.fixture(scope="module")
def report_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("ncu") / "bb.ncu-rep"
    path.write_bytes(gzip.decompress(REPORT_GZ.read_bytes()))
    return path


@pytest.fixture(scope="module")
def actions(report_path):
    ctx = ncu_report.load_report(str(report_path))
    rng = ctx.range_by_idx(0)
    return ctx, [rng.action_by_idx(i) for i in range(rng.num_actions())]


def per_pc(act) -> dict[int, int]:
    """smsp__pcsamp_sample_count per function-relative offset."""
    start = act.metric_by_name("launch__function_pcs").as_uint64()
    m = act.metric_by_name("smsp__pcsamp_sample_count")
    ids = m.correlation_ids()
    return {ids.as_uint64(i) - start: m.as_uint64(i) for i in range(m.num_instances())}


def test_totals_per_kernel_are_the_sample_counts(report_path, actions):
    _, acts = actions
    profile = load(str(report_path))
    col = profile.type_index("gpu-samples")
    got = Counter()
    for s in range(len(profile)):
        got[profile.stack_frames(int(profile.sample_stack[s]))[0].name] += profile.values[s, col]
    for act in acts:
        name = act.name(ncu_report.IAction.NameBase_DEMANGLED)
        assert got[name] == act.metric_by_name("smsp__pcsamp_sample_count").as_uint64()
    t = profile.type_index("gpu-time")
    expected_ns = sum(a.metric_by_name("gpu__time_duration.sum").as_double() for a in acts)
    assert profile.totals()[t] == pytest.approx(expected_ns)
    assert profile.meta[gpu.META_PERIOD] == 1024


def test_each_sample_under_its_instruction_and_line(report_path, actions):
    _, acts = actions
    profile = load(str(report_path))
    col = profile.type_index("gpu-samples")
    act = next(a for a in acts if a.name() == "julia_bb_4477")
    start = act.metric_by_name("launch__function_pcs").as_uint64()
    by_offset: dict[int, float] = defaultdict(float)
    for s in range(len(profile)):
        frames = profile.stack_frames(int(profile.sample_stack[s]))
        if not frames[0].name.startswith("julia_bb_4477") or not profile.values[s, col]:
            continue  # the other kernel, or the launch's GPU time
        inst = next(f for f in frames if f.kind == FrameKind.GPU_INSTRUCTION)
        by_offset[inst.address] += profile.values[s, col]
        src = [f for f in frames if f.kind == FrameKind.GPU_SOURCE]
        info = act.source_info(start + inst.address)
        assert src[-1].line == info.line() and src[-1].file == info.file_name()
        assert inst.name == gpu.instruction_name(act.sass_by_pc(start + inst.address), inst.address)
        assert frames[-1].kind == FrameKind.GPU_STALL
    assert by_offset == {k: v for k, v in per_pc(act).items() if v}


def test_not_issued_subsets_are_not_added(report_path, actions):
    _, acts = actions
    profile = load(str(report_path))
    reasons = {
        profile.labels_of(s)[gpu.STALL_LABEL]
        for s in range(len(profile))
        if gpu.STALL_LABEL in profile.labels_of(s)
    }
    assert reasons and not any(r.endswith("_not_issued") for r in reasons)
    act = acts[1]
    # the report holds them: they would inflate the total if added
    not_issued = sum(
        act.metric_by_name(PREFIX + r + "_not_issued").as_double()
        for r in reasons
        if act.metric_by_name(PREFIX + r + "_not_issued") is not None
    )
    assert not_issued > 0.3 * act.metric_by_name("smsp__pcsamp_sample_count").as_double()


def test_gzipped_report(actions):
    profile = load(str(REPORT_GZ))
    assert profile.meta["format"] == "nsight-compute"
    assert profile.totals()[0] == 48_443 + 956_805


REASON_COLUMNS = {  # the CSV's short names (from real exports) -> the metric's reason
    "barrier": "barrier",
    "branch_resolving": "branch_resolving",
    "dispatch": "dispatch_stall",
    "drain": "drain",
    "imc": "imc_miss",
    "lg": "lg_throttle",
    "long_sb": "long_scoreboard",
    "math": "math_pipe_throttle",
    "membar": "membar",
    "mio": "mio_throttle",
    "misc": "misc",
    "no_inst": "no_instructions",
    "not_selected": "not_selected",
    "selected": "selected",
    "short_sb": "short_scoreboard",
    "sleep": "sleeping",
    "tex": "tex_throttle",
    "wait": "wait",
}


def write_source_csv(path: Path, acts) -> None:
    """The report's SASS source page as ``ncu --page source --csv`` lays it out."""
    header = [
        "Address",
        "Source",
        "Warp Stall Sampling (All Samples)",
        "Warp Stall Sampling (Not-issued Samples)",
        "Instructions Executed",
    ]
    header += [f"stall_{c}" for c in REASON_COLUMNS]
    header += [f"stall_{c} (Not Issued)" for c in REASON_COLUMNS]
    with open(path, "w", newline="") as f:
        w = csv.writer(f, quoting=csv.QUOTE_ALL)
        for act in acts:
            w.writerow(["Kernel Name", act.name(ncu_report.IAction.NameBase_DEMANGLED)])
            w.writerow(header)
            start = act.metric_by_name("launch__function_pcs").as_uint64()
            counts = per_pc(act)
            values = {}
            for c, r in REASON_COLUMNS.items():
                for suffix in ("", "_not_issued"):
                    m = act.metric_by_name(PREFIX + r + suffix)
                    ids = m.correlation_ids()
                    values[c + suffix] = {
                        ids.as_uint64(i) - start: m.as_uint64(i) for i in range(m.num_instances())
                    }
            for off in sorted(counts):
                row = [
                    hex(start + off),
                    "      " + act.sass_by_pc(start + off) + " ",
                    str(counts[off]),
                    "0",
                    "0",
                ]
                row += [str(values[c].get(off, 0)) for c in REASON_COLUMNS]
                row += [str(values[c + "_not_issued"].get(off, 0)) for c in REASON_COLUMNS]
                w.writerow(row)


def test_csv_export_gives_the_reports_samples(tmp_path, report_path, actions):
    _, acts = actions
    path = tmp_path / "source.csv"
    write_source_csv(path, acts)
    from_csv = load(str(path))
    from_report = load(str(report_path))
    assert from_csv.meta["format"] == "nsight-compute"

    def by_instruction(p):
        out = Counter()
        col = p.type_index("gpu-samples")
        for s in range(len(p)):
            if not p.values[s, col]:
                continue
            fr = p.stack_frames(int(p.sample_stack[s]))
            inst = next(f for f in fr if f.kind == FrameKind.GPU_INSTRUCTION)
            out[(fr[0].name, inst.name, gpu.stall_class(fr[-1].name))] += p.values[s, col]
        return out

    assert by_instruction(from_csv) == by_instruction(from_report)


def test_csv_without_stall_columns_is_one_clear_error(tmp_path):
    bad = tmp_path / "x.csv"
    bad.write_text(
        '"Kernel Name","k"\n"Address","Source","Instructions Executed"\n"0x10","EXIT","1"\n'
    )
    with pytest.raises(InputError, match="no warp stall sampling"):
        load(str(bad))


KEPT = Path(__file__).resolve().parents[1] / "data/gpu_instructions/nsight_compute/damaged"


@pytest.mark.parametrize("name", ["none-kernel-name-1", "none-kernel-name-2"])
def test_a_damaged_report_without_a_kernel_name_converts(name, tmp_path):
    pytest.importorskip("ncu_report")
    out = tmp_path / "x.pb.gz"
    assert main(["convert", str(KEPT / f"{name}.ncu-rep.gz"), "-f", "pprof", "-o", str(out)]) == 0
    assert out.stat().st_size > 0


def test_the_report_readers_own_log_lines_stay_off_the_terminal(tmp_path):
    pytest.importorskip("ncu_report")
    r = subprocess.run(
        [sys.executable, "-m", "aiflame", "info", str(KEPT / "native-log-lines.ncu-rep.gz")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0 and r.stderr == ""  # NVIDIA's absl/protobuf lines not passed on
