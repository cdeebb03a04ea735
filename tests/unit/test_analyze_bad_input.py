"""analyze reads its input through the sources registry, with the same error handling as
every other command: broken input is one error line and exit 1, never a traceback; a
GPU-only trace is valid input and is analysed."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from aiflame.cli.main import main

SAXPY = Path(__file__).resolve().parents[1] / "data/nsys/saxpy-mpi-cuda_nsys_perlmutter0.sqlite"


def kernel(name: str, ts: float, dur: object = 2, **args: object) -> dict:
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": 7,
            "args": {"stream": 7, "device": 0, **args}}  # fmt: skip


def run(tmp_path: Path, capsys: pytest.CaptureFixture[str], path: Path) -> tuple[int, str, str]:
    rc = main(["analyze", str(path), "--json", str(tmp_path / "r.json")])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return rc, out, err


def one_line(err: str, path: Path) -> bool:
    return err.count("\n") == 1 and err.startswith("aiflame: error: ") and path.name in err


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_gpu_only_trace_of_two_kernels_is_analysed(tmp_path, capsys):
    trace = {"traceEvents": [kernel("k1", 1, correlation=5), kernel("k2", 10, 3, correlation=6)]}
    path = write(tmp_path, "gpu.json", json.dumps(trace))
    rc, out, _ = run(tmp_path, capsys, path)
    assert rc == 0 and "GPU time breakdown" in out
    (r,) = json.loads((tmp_path / "r.json").read_text())["ranks"]
    assert r["time_breakdown"]["total"] == 12.0 and r["time_breakdown"]["idle"] == 7.0
    assert r["idle"]["causes"][0]["cause"] == "unlinked" and r["findings"] == []


@pytest.mark.parametrize(
    "name, text",
    [
        ("deep.json", '{"traceEvents": [' + "[" * 50_000 + "]" * 50_000 + "]}"),
        ("truncated.json", '{"traceEvents": [{"ph": "X", "cat": "kernel", "na'),
        ("not-json.json", '{"traceEvents": [nope]}'),
        ("no-events.json", '{"traceEvents": []}'),
    ],
)
def test_broken_json_is_one_line(tmp_path, capsys, name, text):
    path = write(tmp_path, name, text)
    rc, _, err = run(tmp_path, capsys, path)
    assert rc == 1 and one_line(err, path)
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize(
    "name, events",
    [
        ("bigint.json", [kernel("k", 10**30), kernel("k2", 10)]),
        ("list-cat.json", [{**kernel("k", 1), "cat": ["kernel"]}, kernel("k2", 5)]),
        ("huge-dur.json", [kernel("k", 1, 1e300), kernel("k2", 5)]),
        ("string-dur.json", [kernel("k", 1, "2"), kernel("k2", 5, {"x": 1})]),
    ],
)
def test_odd_values_never_crash(tmp_path, capsys, name, events):
    path = write(tmp_path, name, json.dumps({"traceEvents": events}))
    rc, _, err = run(tmp_path, capsys, path)
    assert rc in (0, 1)
    if rc == 1:
        assert one_line(err, path)
    else:
        json.loads((tmp_path / "r.json").read_text())  # valid JSON: no NaN tokens


def test_corrupt_sqlite_header_is_one_line(tmp_path, capsys):
    path = tmp_path / "bad.sqlite"
    path.write_bytes(b"SQLite format 3\x00" + b"\xff" * 200)
    rc, _, err = run(tmp_path, capsys, path)
    assert rc == 1 and one_line(err, path)


@pytest.mark.parametrize(
    "name, sql",
    [
        ("text-start.sqlite", "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'abc'"),
        ("blob-end.sqlite", "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET \"end\" = x'0102'"),
        ("text-bytes.sqlite", "UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET bytes = 'many'"),
        ("text-corr.sqlite", "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET correlationId = 'x'"),
        ("no-device.sqlite", "ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN deviceId"),
        ("no-name.sqlite", "ALTER TABLE CUPTI_ACTIVITY_KIND_RUNTIME DROP COLUMN nameId"),
        ("empty-runtime.sqlite", "DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME"),
    ],
)
def test_damaged_nsys_exports_never_crash(tmp_path, capsys, name, sql):
    path = tmp_path / name
    shutil.copy(SAXPY, path)
    db = sqlite3.connect(path)
    db.execute(sql)
    db.commit()
    db.close()
    rc, out, err = run(tmp_path, capsys, path)
    assert rc in (0, 1)
    if rc == 1:
        assert one_line(err, path)
    else:
        assert "GPU time breakdown" in out or "no GPU activity" in out


@pytest.mark.parametrize(
    "sql, column, table, stored",
    [
        ("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET callchainId = x'00ff' WHERE rowid % 7 = 0",
         "callchainId", "CUPTI_ACTIVITY_KIND_RUNTIME", "blob"),
        ("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET globalTid = 'text' WHERE rowid % 7 = 0",
         "globalTid", "CUPTI_ACTIVITY_KIND_RUNTIME", "text"),
        ("UPDATE NVTX_EVENTS SET \"end\" = 'text'", "end", "NVTX_EVENTS", "text"),
    ],
)  # fmt: skip
def test_text_in_a_numeric_column_is_named(tmp_path, capsys, sql, column, table, stored):
    path = tmp_path / "mistyped.sqlite"
    shutil.copy(SAXPY, path)
    db = sqlite3.connect(path)
    db.execute(sql)
    db.commit()
    db.close()
    rc, _, err = run(tmp_path, capsys, path)
    assert rc == 1 and one_line(err, path)
    assert f'column "{column}" of {table} holds {stored} where a number belongs' in err


def test_a_profile_without_a_timeline_is_one_line(tmp_path, capsys):
    path = write(tmp_path, "stacks.folded", "main;work 10\n")
    rc, _, err = run(tmp_path, capsys, path)
    assert rc == 1 and one_line(err, path) and "no GPU timeline" in err


# -- generic Chrome traces --------------------------------------------------------------

TRACE_EVENTS = Path(__file__).resolve().parents[1] / "data/trace_events"
BERT = Path(__file__).resolve().parents[1] / "data/kineto/tracelens/h100"
BERT = BERT / "gaunernst_bert-small-uncased__1016001.json.gz"


def test_generic_chrome_trace_without_gpu_tracks_is_said_so(tmp_path, capsys):
    rc, out, _ = run(tmp_path, capsys, TRACE_EVENTS / "multiprocess.json")
    assert rc == 0 and "no GPU activity" in out
    (r,) = json.loads((tmp_path / "r.json").read_text())["ranks"]
    assert r["format"] == "trace-events" and any("GPU stream tracks" in n for n in r["notes"])


def test_generic_chrome_trace_with_gpu_stream_tracks(tmp_path, capsys):
    """The kernels of a real trace written as JAX names its tracks (/device:GPU:0 and
    'Stream #7(Compute)' threads): the same breakdown as read from the Kineto trace."""
    import gzip

    events = json.loads(gzip.decompress(BERT.read_bytes()))["traceEvents"]
    gpu = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    cpu = [e for e in events if e.get("cat") == "python_function"]
    out = [
        {"ph": "M", "pid": 9, "name": "process_name", "args": {"name": "/device:GPU:0"}},
        {"ph": "M", "pid": 9, "tid": 7, "name": "thread_name", "args": {"name": "Stream #7"}},
        {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/host:CPU"}},
    ]
    out += [{"ph": "X", "pid": 9, "tid": 7, "name": e["name"], "ts": e["ts"], "dur": e["dur"]}
            for e in gpu]  # fmt: skip
    out += [{"ph": "X", "pid": 1, "tid": 1, "name": e["name"], "ts": e["ts"], "dur": e["dur"]}
            for e in cpu]  # fmt: skip
    path = write(tmp_path, "jax-like.json", json.dumps({"traceEvents": out}))
    rc, _, _ = run(tmp_path, capsys, path)
    assert rc == 0
    (r,) = json.loads((tmp_path / "r.json").read_text())["ranks"]
    assert main(["analyze", str(BERT), "--json", str(tmp_path / "k.json")]) == 0
    (k,) = json.loads((tmp_path / "k.json").read_text())["ranks"]
    for key in ("total", "busy", "idle", "memcpy"):
        assert r["time_breakdown"][key] == pytest.approx(k["time_breakdown"][key], abs=0.01)
    assert any("links no CPU launch" in n for n in r["notes"])
