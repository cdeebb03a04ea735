"""aiflame analyze on Nsight Systems exports, checked against the export's own tables and
against pipit's independent reading of the same run's GPU trace."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
import sys
from pathlib import Path

import numpy as np
import pytest

from aiflame.analysis.report import analyze
from aiflame.analysis.schema import to_builtins
from aiflame.cli.main import main
from aiflame.model.trace import Kind
from aiflame.sources.registry import load_trace

DATA = Path(__file__).resolve().parents[1] / "data" / "nsys"
CLOVER = DATA / "cloverleaf" / "perlmutter-cloverleaf-cuda.sqlite"
SAXPY = DATA / "saxpy-mpi-cuda_nsys_perlmutter0.sqlite"
_cache: dict[Path, tuple] = {}


def report_of(path: Path) -> tuple:
    """(trace, the reader's notes, the rank's report as the CLI writes it)."""
    if path not in _cache:
        trace = load_trace(str(path))
        r = to_builtins(analyze([trace]).ranks[0])
        _cache[path] = (trace, list(trace.notes), r)
    return _cache[path]


def union_us(intervals: list[tuple[int, int]]) -> float:
    """Length of a union of [start, end) intervals, by a plain sweep (independent code)."""
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total / 1e3


def pipit_intervals() -> dict[str, list[tuple[int, int]]]:
    out: dict[str, list[tuple[int, int]]] = {}
    with (DATA / "cloverleaf" / "cloverleaf_gpu_trace.csv").open(encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if row["Event Type"] == "Enter":
                span = (int(row["Timestamp (ns)"]), int(row["_matching_timestamp"]))
                out.setdefault(row["type"], []).append(span)
    return out


def test_breakdown_equals_pipits_gpu_trace():
    _, _, r = report_of(CLOVER)
    ref = pipit_intervals()
    kernels = ref["kernel"]
    copies = ref["CUDA_MEMCPY_KIND_HTOD"] + ref["CUDA_MEMCPY_KIND_DTOH"]
    everything = kernels + copies
    tb = r["time_breakdown"]
    assert tb["computation"] == pytest.approx(union_us(kernels), abs=1e-3)
    assert tb["memcpy"] == pytest.approx(union_us(copies), abs=1e-3)
    assert tb["busy"] == pytest.approx(union_us(everything), abs=1e-3)
    first, last = min(s for s, _ in everything), max(e for _, e in everything)
    assert tb["total"] == pytest.approx((last - first) / 1e3, abs=1e-3)
    assert tb["idle"] == pytest.approx(tb["total"] - tb["busy"], abs=1e-3)
    assert r["short_kernels"]["kernels"] == len(kernels)


def test_kernel_times_by_name_equal_pipits():
    trace, _, r = report_of(CLOVER)
    ref: dict[str, list[int]] = {}
    with (DATA / "cloverleaf" / "cloverleaf_gpu_trace.csv").open(encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if row["Event Type"] == "Enter" and row["type"] == "kernel":
                d = int(row["_matching_timestamp"]) - int(row["Timestamp (ns)"])
                ref.setdefault(row["Name"], []).append(d)
    ours: dict[str, list[int]] = {}
    kernels = np.nonzero(trace.gpu_kind == Kind.COMPUTE)[0]
    for j in kernels.tolist():
        # nsys' gpu_trace report names a kernel by its short name; ours is demangled.
        name = trace.names[int(trace.gpu_name[j])]
        short = name.split("(")[0].split("<")[0].rsplit("::", 1)[-1]
        ours.setdefault(short, []).append(int(trace.gpu_dur[j]))
    assert {k: (len(v), sum(v)) for k, v in ours.items()} == {
        k: (len(v), sum(v)) for k, v in ref.items()
    }
    top = r["top_kernels"][0]
    assert top["total_us"] == pytest.approx(
        max(
            sum(int(trace.gpu_dur[j]) for j in kernels if trace.gpu_name[j] == n) / 1e3
            for n in set(trace.gpu_name[kernels].tolist())
        )
    )


def test_sync_and_pageable_findings_count_what_the_export_records():
    trace, _, r = report_of(CLOVER)
    db = sqlite3.connect(CLOVER)
    syncs = db.execute(
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId "
        "WHERE s.value LIKE 'cudaDeviceSynchronize%'"
    ).fetchone()[0]
    pageable = db.execute(
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY m JOIN ENUM_CUDA_MEM_KIND k "
        "ON k.id = m.srcKind WHERE k.name LIKE '%PAGEABLE' AND m.copyKind = 1"
    ).fetchone()[0]
    found = {f["rule"]: f for f in r["findings"]}
    # The blocking calls, from the report's sync section (or the sync finding's evidence).
    calls = r["sync"]["by_call"]
    assert calls["cudaDeviceSynchronize"]["count"] == syncs == 1312
    copies = {x["label"]: x["value"] for x in found["pageable_copies"]["figures"]}
    assert copies["copies"] == pageable == 254
    # Every GPU activity is linked to the API call that issued it.
    assert np.all(trace.gpu_launch >= 0)
    assert set(trace.gpu_kind.tolist()) == {Kind.COMPUTE, Kind.MEMCPY}


def test_notes_say_what_an_export_cannot_give():
    _, _, r = report_of(CLOVER)
    notes = " | ".join(r["notes"])
    assert "no operator input shapes" in r["unavailable"]["efficiency"]
    assert "MFU" in r["unavailable"]["efficiency"]
    assert "no NVTX ranges" in notes and "--cudabacktrace" in notes
    assert "synchronization records" in notes
    assert r["gemm"] == [] and r["top_ops"] == []


def test_devices_are_the_gpus_with_activity():
    trace, _, r = report_of(CLOVER)
    (dev,) = trace.device_info  # the node has 4 GPUs; the run used device 0
    assert dev["id"] == 0 and dev["name"] == "NVIDIA A100-SXM4-80GB"
    assert dev["numSms"] == 108 and dev["memoryBandwidthBytesPerS"] > 1e12
    assert r["devices"] == ["NVIDIA A100-SXM4-80GB"]


def test_nvtx_ranges_are_ops_and_backtraces_are_stacks():
    trace, notes, r = report_of(SAXPY)
    assert trace.rank == "0"
    (op,) = r["top_ops"]
    assert op["name"] == "saxpy" and op["count"] == 5  # five NVTX 'saxpy' ranges, one kernel each
    assert op["total_us"] == pytest.approx(r["time_breakdown"]["computation"])
    found = {f["rule"]: f for f in r["findings"]}
    stack = r["sync"]["top_stacks"][0]["stack"]
    # The backtrace of the blocking cudaMemcpy: _start > __libc_start_main > main (> the call)
    assert "main" in stack[-2:] and stack[:2] == ["_start", "__libc_start_main"]
    assert "cudaMemcpy" in r["sync"]["by_call"]
    copies = {x["label"]: x["value"] for x in found["pageable_copies"]["figures"]}
    assert copies["copies"] == 10  # the HtoD copies
    assert not any("backtraces" in n for n in notes)


def test_cli_reads_an_export(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["analyze", str(CLOVER), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "par_ranged2d_kernel" in text and "cudaDeviceSynchronize" in text
    rank = json.loads(out.read_text())["ranks"][0]
    assert rank["format"] == "nsys"
    assert not any(n.startswith("no CPU operators") for n in rank["notes"])


def test_cli_sqlite_that_is_not_an_export_is_one_line(tmp_path, capsys):
    bad = tmp_path / "other.sqlite"
    db = sqlite3.connect(bad)
    db.execute("CREATE TABLE t (x)")
    db.commit()
    db.close()
    assert main(["analyze", str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "other.sqlite" in err and "Nsight" in err


def test_copy_bytes_streams_and_threads_come_from_the_export():
    trace, _, _ = report_of(CLOVER)
    db = sqlite3.connect(CLOVER)
    nbytes, streams = db.execute(
        "SELECT sum(bytes), count(DISTINCT streamId) FROM CUPTI_ACTIVITY_KIND_MEMCPY"
    ).fetchone()
    copies = trace.gpu_kind == Kind.MEMCPY
    assert int(trace.gpu_bytes[copies].sum()) == nbytes == 225116952
    assert np.all(trace.gpu_bytes[~copies] == -1)  # kernels move no counted bytes
    assert len({trace.names[s] for s in trace.gpu_stream[copies]}) == streams
    threads = db.execute("SELECT count(DISTINCT globalTid) FROM CUPTI_ACTIVITY_KIND_RUNTIME")
    assert len(set(trace.cpu_thread.tolist())) == threads.fetchone()[0]


def test_export_on_stdin_gives_the_report_and_its_flame_graph(tmp_path, monkeypatch, capsys):
    data = SAXPY.read_bytes()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    out = tmp_path / "r.html"
    assert main(["analyze", "-", "-o", str(out), "--json", str(tmp_path / "r.json")]) == 0
    rank = json.loads((tmp_path / "r.json").read_text())["ranks"][0]
    assert rank["format"] == "nsys" and rank["rank"] == "0"
    assert rank["time_breakdown"] == report_of(SAXPY)[2]["time_breakdown"]
    assert (tmp_path / "r.flame.html").stat().st_size > 0


def test_an_export_of_several_processes_says_it_is_analysed_as_one(tmp_path):
    path = tmp_path / "two.sqlite"
    path.write_bytes(SAXPY.read_bytes())
    db = sqlite3.connect(path)
    # Move the kernels to another process id (the pid bits of globalPid), as if a second
    # rank had run them.
    db.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET globalPid = globalPid + (1 << 24)")
    db.commit()
    db.close()
    trace = load_trace(str(path))
    assert any(n.startswith("2 processes ran GPU work") for n in trace.notes)
    assert np.count_nonzero(trace.gpu_launch < 0) == 5  # their launches are in the other process
