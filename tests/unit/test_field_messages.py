"""Numbers at the edges and fields of the wrong type: each is a message for a person that
names the field and what was wrong with it, never a Python exception's text (nor an
internal error): times and ids beyond int64, a base time that pushes a trace past the
year 2262, a metric the profile lacks, blobs where Nsight keeps names, reals where it keeps
integers, an iaprof offset that is not hexadecimal, snapshot events of the wrong types, an
HPCToolkit pointer beyond any file."""

from __future__ import annotations

import gzip
import io
import json
import pickle
import shutil
import sqlite3
import sys
from pathlib import Path

import pytest
from hostile_inputs import KINETO, NSYS, SNAPSHOT, aiflame, one_error_line

from aiflame.errors import InputError
from aiflame.sources import registry
from aiflame.sources.torch_memory.importer import PlainDataUnpickler

sys.path.insert(0, str(Path(__file__).parents[2] / "tools"))
from fuzz_commands import PYTHON_TEXT

DATA = Path(__file__).parents[1] / "data"


def for_a_person(r, *fragments: str) -> str:
    """One error line naming ``fragments``, in words of its own."""
    line = one_error_line(r, *fragments)
    assert not PYTHON_TEXT.search(line), line
    return line


def kineto(tmp_path: Path, change) -> Path:  # type: ignore[no-untyped-def]
    doc = json.loads(gzip.decompress(KINETO.read_bytes()))
    change(doc)
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(doc))
    return path


def test_a_base_time_near_the_int64_limit(tmp_path):
    """Kineto's baseTimeNanoseconds near 2**63: the pprof writer once failed on the
    profile's start time with an internal error."""
    path = kineto(tmp_path, lambda d: d.update(baseTimeNanoseconds=2**63 - 1000))
    out = tmp_path / "out.pb.gz"
    for_a_person(
        aiflame("convert", str(path), "-f", "pprof", "-o", str(out)),
        "baseTimeNanoseconds is 9223372036854774808",
        "beyond 64-bit nanoseconds",
    )
    assert not out.exists()


def test_event_times_whose_start_is_beyond_int64_nanoseconds(tmp_path):
    def far(doc: dict) -> None:
        for e in doc["traceEvents"]:
            if "ts" in e:
                e["ts"] = 2**64

    path = kineto(tmp_path, far)
    for_a_person(aiflame("analyze", str(path)), "an event's time is 1.84467e+19 us")
    chrome = tmp_path / "chrome.json"
    chrome.write_text(json.dumps([{"ph": "X", "name": "a", "ts": 1e18, "dur": 1}]))
    out = tmp_path / "out.pb.gz"
    for_a_person(
        aiflame("convert", str(chrome), "-f", "pprof", "-o", str(out)), "an event's time is 1e+18"
    )


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("correlation", 2**64 + 3, "an event's args.correlation is 18446744073709551619"),
        ("correlation", -(2**70), "args.correlation is -1180591620717411303424"),
        ("bytes", 10**30, "an event's args.bytes is 1000000000000000000000000000000"),
    ],
)
def test_analyze_of_integers_beyond_int64(tmp_path, field, value, says):
    def beyond(doc: dict) -> None:
        for e in doc["traceEvents"]:
            if field in e.get("args", {}):
                e["args"][field] = value

    for_a_person(aiflame("analyze", str(kineto(tmp_path, beyond))), says, "beyond 64-bit")


def test_chrome_timeline_of_a_memory_snapshot_with_a_metric_it_lacks(tmp_path):
    out = tmp_path / "out.json"
    r = aiflame("convert", str(SNAPSHOT), "-f", "chrome", "--metric", "X", "-o", str(out))
    for_a_person(r, "no metric 'X' in this profile (it has: peak-bytes")
    assert not out.exists()


def _nsys(tmp_path: Path, sql: str) -> Path:
    path = tmp_path / "export.sqlite"
    shutil.copy(NSYS, path)
    conn = sqlite3.connect(path)
    conn.execute(sql)
    conn.commit()
    conn.close()
    return path


def test_an_nsight_export_with_blobs_where_names_are(tmp_path):
    """A blob (or a number) in StringIds' text column is read as text, as names are."""
    path = _nsys(tmp_path, "UPDATE StringIds SET value = X'00ff41' WHERE id % 3 = 0")
    r = aiflame("analyze", str(path))
    assert r.returncode == 0, r.stderr.decode()
    out = tmp_path / "out.folded"
    r = aiflame("convert", str(path), "-f", "folded", "-o", str(out))
    assert r.returncode == 0, r.stderr.decode()
    assert "\ufffdA" in out.read_text()
    r = aiflame("convert", str(path), "-f", "chrome", "-o", str(tmp_path / "out.json"))
    assert r.returncode == 0, r.stderr.decode()
    json.loads((tmp_path / "out.json").read_text())


def test_an_nsight_export_with_a_real_number_where_an_integer_belongs(tmp_path):
    path = _nsys(tmp_path, "UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET bytes = 9.3e18")
    for_a_person(
        aiflame("analyze", str(path)),
        'column "bytes" of CUPTI_ACTIVITY_KIND_MEMCPY holds the real number 9.3e+18',
    )


def test_an_iaprof_offset_that_is_not_hexadecimal(tmp_path):
    text = (DATA / "gpu_instructions" / "iaprof" / "record.tsv").read_text()
    path = tmp_path / "record.tsv"
    path.write_text(text.replace("eustall\t0x1a0\t", "eustall\t0x-92233720368\t", 1))
    for_a_person(
        aiflame("info", str(path)), "line 13: instruction offset '0x-92233720368'", "hexadecimal"
    )


def _snapshot(tmp_path: Path, key: str, value: object) -> Path:
    snap = PlainDataUnpickler(io.BytesIO(gzip.decompress(SNAPSHOT.read_bytes()))).load()
    event = next(e for t in snap["device_traces"] for e in t if e.get("action") == "alloc")
    event[key] = value
    path = tmp_path / "snapshot.pickle"
    path.write_bytes(pickle.dumps(snap, protocol=4))
    return path


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("stream", "", "an allocator event's stream is '', not a 64-bit integer"),
        ("size", 2**70, "an allocator event's size is 1180591620717411303424"),
        ("action", [1, 2], "an allocator event's action is [1, 2], not an action's name"),
    ],
)
def test_memory_snapshot_events_of_the_wrong_type(tmp_path, key, value, says):
    for_a_person(aiflame("info", str(_snapshot(tmp_path, key, value))), says)


def test_an_hpctoolkit_pointer_beyond_any_file(tmp_path):
    database = tmp_path / "database.d"
    shutil.copytree(DATA / "gpu_instructions" / "hpctoolkit" / "loops-cuda-nvidiapc-t.d", database)
    meta = bytearray((database / "meta.db").read_bytes())
    meta[0x18:0x20] = (2**64 - 1).to_bytes(8, "little")  # the first section's pointer
    (database / "meta.db").write_bytes(bytes(meta))
    for_a_person(aiflame("info", str(database)), "meta.db: field at", "beyond the end of the file")


def test_a_readers_unnamed_failure_is_not_spelled_as_a_python_exception():
    class Reader:
        FORMAT = "kineto"

    def read() -> None:
        raise OverflowError("int too big to convert")

    with pytest.raises(InputError) as e:
        registry._guarded(Reader, "trace.json", read)
    assert "OverflowError" not in str(e.value)
    assert str(e.value).startswith("trace.json: cannot read as kineto: damaged in a way")


@pytest.mark.parametrize("dim", [2**64 + 1, -(2**70), 1e300])
def test_analyze_of_recorded_shapes_beyond_int64(tmp_path, dim):
    """Input Dims of a damaged trace model no operator (no FLOPs from them); the report is
    whole."""
    trace = DATA / "kineto" / "tracelens" / "torch_compile_triton" / "trace.json.gz"
    doc = json.loads(gzip.decompress(trace.read_bytes()))
    for e in doc["traceEvents"]:
        args = e.get("args", {})
        if "Input Dims" in args:
            args["Input Dims"] = [[dim, dim] if d else d for d in args["Input Dims"]]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(doc))
    r = aiflame("analyze", str(path), "--batch-size", "4", "--json", str(tmp_path / "a.json"))
    assert r.returncode == 0, r.stderr.decode()
    rank = json.loads((tmp_path / "a.json").read_text())["ranks"][0]
    assert not rank["gemm"]  # every GEMM's shapes damaged: none modelled


def test_a_flow_event_whose_category_is_a_list(tmp_path):
    def odd(doc: dict) -> None:
        for e in doc["traceEvents"]:
            if e.get("ph") in ("s", "f"):
                e["cat"] = ["ac2g", 1]

    r = aiflame("analyze", str(kineto(tmp_path, odd)))
    assert r.returncode == 0, r.stderr.decode()


def test_a_gpu_binary_whose_sections_lie_outside_it(tmp_path):
    """An HPCToolkit measurement directory whose gpubin's section header points past its
    end: its PCs go unnamed, the rest is read."""
    measurements = tmp_path / "m.m"
    shutil.copytree(
        DATA / "gpu_instructions" / "hpctoolkit" / "loops-cuda-nvidiapc-t.m", measurements
    )
    (binary,) = (measurements / "gpubins").iterdir()
    data = bytearray(binary.read_bytes())
    shoff = int.from_bytes(data[0x28:0x30], "little")  # ELF64 e_shoff
    shstrndx = int.from_bytes(data[0x3E:0x40], "little")
    entry = shoff + 64 * shstrndx  # the section names' header: its offset past the end
    data[entry + 0x18 : entry + 0x20] = (len(data) * 4).to_bytes(8, "little")
    binary.write_bytes(bytes(data))
    r = aiflame("analyze", str(measurements))
    assert r.returncode == 0, r.stderr.decode()


@pytest.mark.parametrize(
    "sql, says",
    [
        (
            'ALTER TABLE CUPTI_ACTIVITY_KIND_MEMCPY RENAME COLUMN "end" TO "stop"',
            'table CUPTI_ACTIVITY_KIND_MEMCPY has no column "end"',
        ),
        (
            'ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL RENAME COLUMN "start" TO "begin"',
            'table CUPTI_ACTIVITY_KIND_KERNEL has no column "start"',
        ),
    ],
)
def test_an_nsight_export_whose_gpu_table_lacks_its_times(tmp_path, sql, says):
    """A GPU activity table without the times every release writes (found by the fuzzer:
    arithmetic on NULL in both readers)."""
    path = _nsys(tmp_path, sql)
    for_a_person(aiflame("analyze", str(path)), says)
    out = tmp_path / "out.folded"
    for_a_person(aiflame("convert", str(path), "-f", "folded", "-o", str(out)), says)
    assert not out.exists()


def test_an_hpcstruct_whose_deflate_stream_is_corrupt(tmp_path):
    """A gzipped hpcstruct that zlib cannot inflate: named as corrupt gzip data, without
    zlib's error number (found by the fuzzer)."""
    measurements = tmp_path / "m.m"
    shutil.copytree(
        DATA / "gpu_instructions" / "hpctoolkit" / "loops-cuda-nvidiapc-t.m", measurements
    )
    (struct,) = (measurements / "structs").glob("*.hpcstruct.gz")
    data = bytearray(struct.read_bytes())
    data[20:60] = b"\xff" * 40  # inside the deflate stream, past gzip's header
    struct.write_bytes(bytes(data))
    line = for_a_person(aiflame("analyze", str(measurements)), "corrupt gzip data")
    assert "Error -3" not in line


def test_a_pickle_that_appends_to_a_dict(tmp_path):
    """An APPEND opcode onto a dict (a chunk of a snapshot's pickle deleted, found by the
    fuzzer): a corrupt pickle, not Python's own words."""
    # {"segments": []}, then an item APPENDed to the dict: what a list's opcode does to it
    hostile = b"\x80\x02}X\x08\x00\x00\x00segments]sK\x01a."
    assert pickle.loads(hostile[:-4] + b".") == {"segments": []}  # the rest is well formed
    path = tmp_path / "snapshot.pickle"
    path.write_bytes(hostile)
    for_a_person(aiflame("memory", str(path), "-o", str(tmp_path / "out.html")), "corrupt pickle")
    assert not (tmp_path / "out.html").exists()
