"""rocprofv3 PC sampling importer, on rocprofiler-sdk's own published CSV outputs.

Expected counts are read from the CSVs with the csv module here, row by row.
"""

from __future__ import annotations

import csv
import gzip
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from aiflame.errors import InputError
from aiflame.model import FrameKind, gpu
from aiflame.sources import load
from aiflame.sources.inputs import Input
from aiflame.sources.registry import detect

DATA = Path(__file__).parents[1] / "data" / "gpu_instructions" / "rocprofiler_sdk"
HOST_TRAP = DATA / "pc_sampling_host_trap.csv"
HOST_TRAP_DEBUG = DATA / "pc_sampling_host_trap_debug.csv"
STOCHASTIC = DATA / "pc_sampling_stochastic_debug.csv"
PREFIX = "ROCPROFILER_PC_SAMPLING_INSTRUCTION_NOT_ISSUED_REASON_"


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def expected_reason(row: dict[str, str]) -> str:
    if row["Wave_Issued_Instruction"] == "1":
        return "issued"
    return row["Stall_Reason"].removeprefix(PREFIX)


def leaf_counts(profile, leaf_kind: FrameKind) -> Counter:
    out: Counter = Counter()
    col = profile.type_index("gpu-samples")
    for s in range(len(profile)):
        frames = profile.stack_frames(int(profile.sample_stack[s]))
        leaf = [f for f in frames if f.kind == leaf_kind]
        out[leaf[-1].name if leaf else None] += profile.values[s, col]
    return out


@pytest.mark.parametrize("path", [HOST_TRAP, HOST_TRAP_DEBUG, STOCHASTIC])
def test_every_row_is_one_sample(path):
    profile = load(str(path))
    assert profile.meta["format"] == "rocprofv3-pc"
    assert profile.totals()[0] == len(rows(path))
    expected = Counter(" ".join(r["Instruction"].split()) for r in rows(path))
    assert leaf_counts(profile, FrameKind.GPU_INSTRUCTION) == expected


def test_stochastic_reasons_and_issued_flag():
    profile = load(str(STOCHASTIC))
    expected = Counter(expected_reason(r) for r in rows(STOCHASTIC))
    assert expected == {
        "WAITCNT": 71,
        "issued": 20,
        "ALU_DEPENDENCY": 5,
        "NO_INSTRUCTION_AVAILABLE": 1,
    }
    assert leaf_counts(profile, FrameKind.GPU_STALL) == expected
    classes = {
        profile.labels_of(s)["stall"]: profile.labels_of(s)["stall_class"]
        for s in range(len(profile))
    }
    assert classes["WAITCNT"] == gpu.MEMORY
    assert classes["issued"] == gpu.ISSUED
    assert classes["ALU_DEPENDENCY"] == gpu.SHORT_DEPENDENCY


def test_samples_under_their_line_and_dispatch():
    profile = load(str(STOCHASTIC))
    got: Counter = Counter()
    for s in range(len(profile)):
        names = profile.stack_names(int(profile.sample_stack[s]))
        got[(names[0], names[1], names[2])] += profile.values[s, 0]
    expected = Counter(
        (
            f"dispatch {r['Dispatch_Id']}",
            r["Instruction_Comment"].rsplit("/", 1)[1],
            " ".join(r["Instruction"].split()),
        )
        for r in rows(STOCHASTIC)
    )
    assert got == expected


def test_host_trap_without_reasons_ends_at_the_instruction():
    profile = load(str(HOST_TRAP_DEBUG))
    for s in range(len(profile)):
        frames = profile.stack_frames(int(profile.sample_stack[s]))
        assert frames[-1].kind == FrameKind.GPU_INSTRUCTION
        assert "stall" not in profile.labels_of(s)
    lines = {
        f.name
        for s in range(len(profile))
        for f in profile.stack_frames(int(profile.sample_stack[s]))
        if f.kind == FrameKind.GPU_SOURCE
    }
    assert lines == {"MatrixTranspose.cpp:44", "MatrixTranspose.cpp:45", "amd_hip_runtime.h:275"}


def test_kernel_names_from_the_kernel_trace_beside(tmp_path):
    samples = tmp_path / "1234_pc_sampling_stochastic.csv"
    samples.write_bytes(STOCHASTIC.read_bytes())
    dispatches = sorted({r["Dispatch_Id"] for r in rows(STOCHASTIC)}, key=int)
    with open(tmp_path / "1234_kernel_trace.csv", "w", newline="") as f:
        w = csv.writer(f, quoting=csv.QUOTE_ALL)
        w.writerow(["Kind", "Dispatch_Id", "Kernel_Name", "Correlation_Id"])
        for d in dispatches:
            w.writerow(["KERNEL_DISPATCH", d, f"vector_op_{int(d) % 3}(float*)", d])
    profile = load(str(samples))
    kernels = Counter()
    for s in range(len(profile)):
        kernels[profile.stack_names(int(profile.sample_stack[s]))[0]] += profile.values[s, 0]
    expected = Counter(f"vector_op_{int(r['Dispatch_Id']) % 3}(float*)" for r in rows(STOCHASTIC))
    assert kernels == expected


def rocprofv3_json(path: Path) -> dict:
    """The stochastic CSV in rocprofv3's JSON layout (the same samples)."""
    data = rows(path)
    insts = sorted({(r["Instruction"], r["Instruction_Comment"]) for r in data})
    index = {k: i for i, k in enumerate(insts)}
    dispatches = sorted({int(r["Dispatch_Id"]) for r in data})
    return {
        "rocprofiler-sdk-tool": [
            {
                "metadata": {"pid": 1234},
                "strings": {
                    "pc_sample_instructions": [i for i, _ in insts],
                    "pc_sample_comments": [c for _, c in insts],
                },
                "kernel_symbols": [
                    {"kernel_id": d, "kernel_name": f"k{d}.kd", "formatted_kernel_name": f"k{d}"}
                    for d in dispatches
                ],
                "buffer_records": {
                    "kernel_dispatch": [
                        {"dispatch_info": {"dispatch_id": d, "kernel_id": d}} for d in dispatches
                    ],
                    "pc_sample_stochastic": [
                        {
                            "inst_index": index[(r["Instruction"], r["Instruction_Comment"])],
                            "record": {
                                "pc": {
                                    "code_object_id": 1,
                                    "code_object_offset": 0x1000
                                    + 4 * index[(r["Instruction"], r["Instruction_Comment"])],
                                },
                                "dispatch_id": int(r["Dispatch_Id"]),
                                "correlation_id": {
                                    "internal": int(r["Correlation_Id"]),
                                    "external": 0,
                                },
                                "wave_issued": r["Wave_Issued_Instruction"] == "1",
                                "inst_type": r["Instruction_Type"],
                                "snapshot": {"stall_reason": r["Stall_Reason"]},
                            },
                        }
                        for r in data
                    ],
                },
            }
        ]
    }


def test_json_output_gives_the_csv_counts(tmp_path):
    out = tmp_path / "results.json.gz"
    with gzip.open(out, "wt") as f:
        json.dump(rocprofv3_json(STOCHASTIC), f)
    assert detect(Input(str(out))).FORMAT == "rocprofv3-pc"
    profile = load(str(out))
    assert profile.totals()[0] == 97
    assert leaf_counts(profile, FrameKind.GPU_STALL) == Counter(
        expected_reason(r) for r in rows(STOCHASTIC)
    )
    kernels = {profile.stack_names(int(s))[0] for s in np.unique(profile.sample_stack)}
    assert kernels == {f"k{r['Dispatch_Id']}" for r in rows(STOCHASTIC)}
    inst = next(
        f
        for f in profile.stack_frames(int(profile.sample_stack[0]))
        if f.kind == FrameKind.GPU_INSTRUCTION
    )
    assert " @ +0x1" in inst.name and inst.address >= 0x1000


def test_bad_csv_is_one_clear_error(tmp_path):
    bad = tmp_path / "pc.csv"
    bad.write_text('"Sample_Timestamp","Exec_Mask","Dispatch_Id","Instruction"\n')
    with pytest.raises(InputError, match="no samples"):
        load(str(bad))


def test_crlf_and_quoted_leading_fields_read_the_same(tmp_path):
    text = STOCHASTIC.read_text()
    lines = text.splitlines()
    crlf = tmp_path / "crlf.csv"
    crlf.write_bytes(("\r\n".join(lines) + "\r\n").encode())
    quoted = tmp_path / "quoted.csv"
    rows = [lines[0]] + ['"' + ln.replace(",", '",', 1) for ln in lines[1:]]  # "ts",mask,...
    quoted.write_text("\n".join(rows) + "\n")
    want = leaf_counts(load(str(STOCHASTIC)), FrameKind.GPU_STALL)
    for path in (crlf, quoted):
        assert leaf_counts(load(str(path)), FrameKind.GPU_STALL) == want, path.name
