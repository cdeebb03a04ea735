"""Nsight Systems importer, on a real export (saxpy, MPI + CUDA, A100, nsys 2022.2).

Expected numbers are computed here with plain SQL on the same file, independently of the
importer's joins, NVTX sweep and backtrace handling.
"""

from __future__ import annotations

import gzip
import io
import shutil
import sqlite3
import sys
from collections import Counter
from pathlib import Path

import pytest

from aiflame.cli.main import main
from aiflame.errors import AiflameError, InputError
from aiflame.model import FrameKind, Profile
from aiflame.sources import load
from aiflame.sources.inputs import Input
from aiflame.sources.nsys import importer as nsys_source
from aiflame.sources.nsys.stacks import callchain_offset

DATA = Path(__file__).parents[1] / "data" / "nsys"
EXPORT = DATA / "saxpy-mpi-cuda_nsys_perlmutter0.sqlite"
GPU_TABLES = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
)


def query(sql: str, path: Path = EXPORT) -> list[tuple]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    conn.text_factory = lambda b: b.decode("utf-8", "replace")
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def sql_gpu_time(path: Path = EXPORT) -> int:
    """Total GPU activity time of the export, straight from the tables."""
    sql = 'SELECT coalesce(sum("end" - start), 0) FROM {}'
    return sum(query(sql.format(t), path)[0][0] for t in GPU_TABLES)


@pytest.fixture(scope="module")
def profile() -> Profile:
    return load(str(EXPORT))


def gpu_samples(p: Profile) -> list[tuple[list, float, dict]]:
    """(frames, gpu ns, labels) of every sample with GPU time or a GPU activity count."""
    gt, kc = p.type_index("gpu-time"), p.type_index("kernel-count")
    out = []
    for i in range(len(p)):
        if p.values[i, kc]:
            out.append((p.stack_frames(int(p.sample_stack[i])), p.values[i, gt], p.labels_of(i)))
    return out


# -- totals ---------------------------------------------------------------------------------
def test_gpu_time_total_equals_sum_of_activity_durations(profile: Profile) -> None:
    expected = sql_gpu_time()
    assert expected > 0
    assert profile.totals()[profile.type_index("gpu-time")] == expected
    assert profile.type_index(None) == profile.type_index("gpu-time")


def test_activity_count_bytes_and_cpu_samples(profile: Profile) -> None:
    count = sum(query(f"SELECT count(*) FROM {t}")[0][0] for t in GPU_TABLES)
    nbytes = sum(query(f"SELECT coalesce(sum(bytes), 0) FROM {t}")[0][0] for t in GPU_TABLES[1:])
    samples = query("SELECT count(*) FROM COMPOSITE_EVENTS")[0][0]
    totals = profile.totals()
    assert totals[profile.type_index("kernel-count")] == count == 20
    assert totals[profile.type_index("gpu-bytes")] == nbytes
    assert totals[profile.type_index("cpu-samples")] == samples == 5451
    assert profile.meta["info:unlinked gpu time"].startswith("0 ns (0 of 20")


# -- stacks ---------------------------------------------------------------------------------
def test_every_gpu_activity_ends_with_api_call_delimiter_and_activity(profile: Profile) -> None:
    # What each activity should hang under, by a join of the tables on correlationId
    # (the API row is the one without a backtrace attached: eventClass 0, not 67).
    expected = Counter()
    rows = query(
        """SELECT api.value, kn.value, k."end" - k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k
           JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId
           JOIN StringIds api ON api.id = r.nameId JOIN StringIds kn ON kn.id = k.demangledName
           WHERE r.eventClass = 0"""
    )
    rows += query(
        """SELECT api.value, CASE m.copyKind WHEN 1 THEN '[memcpy HtoD]'
                  WHEN 2 THEN '[memcpy DtoH]' END, m."end" - m.start
           FROM CUPTI_ACTIVITY_KIND_MEMCPY m
           JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = m.correlationId
           JOIN StringIds api ON api.id = r.nameId WHERE r.eventClass = 0"""
    )
    expected.update((api, leaf, dur) for api, leaf, dur in rows)
    got = Counter()
    for frames, ns, _ in gpu_samples(profile):
        api, delim, leaf = frames[-3:]
        assert api.kind == FrameKind.RUNTIME
        assert (delim.name, delim.kind) == ("-", FrameKind.DELIMITER)
        assert leaf.kind == FrameKind.GPU_KERNEL
        got[(api.name, leaf.name, ns)] += 1
    assert got == expected
    assert {api for api, _, _ in expected} == {"cudaLaunchKernel_v7000", "cudaMemcpy_v3020"}


def test_nvtx_ranges_open_at_launch_are_root_frames(profile: Profile) -> None:
    # The program wraps each saxpy launch in nvtxRangePush("saxpy"); its memcpys are outside.
    inside = query(
        """SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN NVTX_EVENTS n
           ON n.globalTid = r.globalTid AND n.start <= r.start AND r.start < n."end"
           WHERE n.text = 'saxpy' AND r.eventClass = 0 AND r.correlationId IN
           (SELECT correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL)"""
    )[0][0]
    assert inside == 5
    for frames, _, _ in gpu_samples(profile):
        labels = [f.name for f in frames if f.kind == FrameKind.LABEL]
        if frames[-1].kind == FrameKind.GPU_KERNEL and frames[-1].name.startswith("saxpy("):
            assert (frames[0].name, frames[0].kind) == ("saxpy", FrameKind.LABEL)
            assert labels == ["saxpy"]
        else:
            assert labels == []


def test_cpu_backtraces_sit_between_nvtx_and_the_api_call(profile: Profile) -> None:
    # The export numbers callchainId from 0 and CUDA_CALLCHAINS from 1: a naive join gives
    # each call the stack of the call before it (cudaMalloc above a cudaMemcpy).
    for frames, _, _ in gpu_samples(profile):
        names = [f.name for f in frames]
        cpu = names[names.index("_start") : -3]
        assert cpu[:3] == ["_start", "__libc_start_main", "main"]
        api = names[-3]
        if api == "cudaLaunchKernel_v7000":
            assert cpu[-1].startswith("cudaError cudaLaunchKernel<char>")
        else:
            assert cpu == ["_start", "__libc_start_main", "main"]
        assert not any(n.startswith(("cudaMalloc", "cudaMemcpy")) for n in cpu)


def test_callchain_offset_is_detected_by_name() -> None:
    chains = {1: ((0, "cudaMalloc", "libcudart.so"),), 2: ((1, "cudaMemcpy", "libcudart.so"),)}
    calls = [(0, ["cudaMalloc"]), (1, ["cudaMemcpy_v3020"])]
    assert callchain_offset(chains.get, calls) == 1
    assert callchain_offset(chains.get, [(1, ["cudaMalloc"]), (2, ["cudaMemcpy"])]) == 0
    assert callchain_offset(chains.get, [(5, ["cudaFree"])]) == 0


def test_labels(profile: Profile) -> None:
    (pid,) = query(
        "SELECT DISTINCT globalPid / 16777216 % 16777216 FROM CUPTI_ACTIVITY_KIND_KERNEL"
    )[0]
    for _, _, labels in gpu_samples(profile):
        assert labels["rank"] == "0"  # the main thread is named "MPI Rank 0"
        assert labels["device"] == "0"
        assert labels["stream"] == "7"
        assert labels["pid"] == str(pid)
        assert labels["thread"] == "MPI Rank 0"
    assert profile.meta["info:ranks"] == "0"


def test_cpu_sample_stacks_match_the_sampled_callchains(profile: Profile) -> None:
    cs = profile.type_index("cpu-samples")
    sampled = [i for i in range(len(profile)) if profile.values[i, cs]]
    rows = query(
        """SELECT c.id, group_concat(s.value, ';') FROM
           (SELECT * FROM SAMPLING_CALLCHAINS ORDER BY id, stackDepth DESC) c
           JOIN StringIds s ON s.id = c.symbol WHERE c.unresolved IS NULL GROUP BY c.id"""
    )
    complete = {
        cid
        for (cid,) in query(
            "SELECT id FROM SAMPLING_CALLCHAINS GROUP BY id HAVING sum(unresolved) IS NULL"
        )
    }
    # Unresolved frames are renamed after their module, and nsys' own "[Broken backtraces]"
    # marker is kept; compare the stacks made of resolved symbols only.
    want = Counter(s for cid, s in rows if cid in complete and ";[" not in ";" + s)
    got = Counter()
    for i in sampled:
        frames = profile.stack_frames(int(profile.sample_stack[i]))
        nvtx = [f for f in frames if f.kind == FrameKind.LABEL and not f.module]
        names = [f.name for f in frames[len(nvtx) :]]  # the NVTX ranges are at the root
        if not any(n.startswith("[") for n in names):
            got[";".join(names)] += 1
    assert got == want
    # Samples taken inside nsys' MPI_Send ranges are under an MPI_Send root.
    in_send = query(
        """SELECT count(*) FROM COMPOSITE_EVENTS c JOIN NVTX_EVENTS n ON n.globalTid = c.globalTid
           AND n.start <= c.start AND c.start < n."end" JOIN StringIds s ON s.id = n.textId
           WHERE s.value = 'MPI_Send'"""
    )[0][0]
    roots = Counter(profile.stack_frames(int(profile.sample_stack[i]))[0].name for i in sampled)
    assert roots["MPI_Send"] == in_send > 0


def test_options_short_kernel_names_and_no_nvtx() -> None:
    p = load(str(EXPORT), kernel_names="short", nvtx=False)
    leaves = {frames[-1].name for frames, _, _ in gpu_samples(p)}
    assert leaves == {"saxpy", "[memcpy HtoD]", "[memcpy DtoH]"}
    assert all(f.kind != FrameKind.LABEL for frames, _, _ in gpu_samples(p) for f in frames)
    with pytest.raises(AiflameError, match="kernel_names"):
        load(str(EXPORT), kernel_names="mangled")


# -- variants of the export -------------------------------------------------------------------
@pytest.fixture
def writable_copy(tmp_path: Path) -> Path:
    dst = tmp_path / "copy.sqlite"
    shutil.copyfile(EXPORT, dst)
    return dst


def test_launch_outside_the_trace_is_kept_and_reported(writable_copy: Path) -> None:
    conn = sqlite3.connect(writable_copy)
    (corr, dur), *_ = conn.execute(
        'SELECT correlationId, "end" - start FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start'
    ).fetchall()
    conn.execute("DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE correlationId = ?", (corr,))
    conn.commit()
    conn.close()
    p = load(str(writable_copy))
    assert p.totals()[p.type_index("gpu-time")] == sql_gpu_time(writable_copy)
    unlinked = [(f, ns) for f, ns, _ in gpu_samples(p) if f[0].name == "[launch not in trace]"]
    assert len(unlinked) == 1
    frames, ns = unlinked[0]
    assert ns == dur
    assert [f.name for f in frames[1:]] == ["-", "saxpy(double *, double *, double *, double, int)"]
    assert p.meta["info:unlinked gpu time"].startswith(f"{dur / 1e6:.3f} ms (1 of 20")


def test_degrades_without_nvtx_backtraces_or_samples(writable_copy: Path) -> None:
    conn = sqlite3.connect(writable_copy)
    for table in ("NVTX_EVENTS", "CUDA_CALLCHAINS", "COMPOSITE_EVENTS", "SAMPLING_CALLCHAINS"):
        conn.execute(f"DROP TABLE {table}")
    for table in GPU_TABLES[:2]:  # as in exports older than process ids on GPU rows
        conn.execute(f"ALTER TABLE {table} DROP COLUMN globalPid")
    # A newer export names memcpy kinds in an ENUM table.
    conn.execute("CREATE TABLE ENUM_CUDA_MEMCPY_OPER (id INTEGER, name TEXT, label TEXT)")
    conn.execute("INSERT INTO ENUM_CUDA_MEMCPY_OPER VALUES (1, 'CUDA_MEMCPY_KIND_HTOD', 'H2D')")
    conn.commit()
    conn.close()
    p = load(str(writable_copy))
    assert [t.name for t in p.sample_types] == ["gpu-time", "kernel-count", "gpu-bytes", "gpu-idle"]
    stacks = {tuple(f.name for f in frames) for frames, _, _ in gpu_samples(p)}
    (pid,) = query("SELECT DISTINCT pid FROM PROCESSES WHERE name = './saxpy-mpi-cuda'")[0]
    assert {labels["pid"] for _, _, labels in gpu_samples(p)} == {str(pid)}
    assert stacks == {
        ("cudaLaunchKernel_v7000", "-", "saxpy(double *, double *, double *, double, int)"),
        ("cudaMemcpy_v3020", "-", "[memcpy HtoD]"),
        ("cudaMemcpy_v3020", "-", "[memcpy DtoH]"),
    }


def test_two_processes_with_the_same_correlation_ids(writable_copy: Path) -> None:
    # A second rank: every GPU row, API call, NVTX range and the thread name copied into
    # process pid + 1. CUPTI correlation ids are per process, so they repeat.
    shift = 1 << 24
    conn = sqlite3.connect(writable_copy)
    copies = [(t, "globalPid") for t in GPU_TABLES]
    copies += [("CUPTI_ACTIVITY_KIND_RUNTIME", "globalTid"), ("NVTX_EVENTS", "globalTid")]
    for table, column in copies:
        n = conn.execute(f"SELECT coalesce(max(rowid), 0) FROM {table}").fetchone()[0]
        conn.execute(f"INSERT INTO {table} SELECT * FROM {table}")
        conn.execute(f"UPDATE {table} SET {column} = {column} + ? WHERE rowid > ?", (shift, n))
    conn.execute("INSERT INTO StringIds VALUES (100000, 'MPI Rank 1')")
    conn.execute(
        "INSERT INTO ThreadNames SELECT 100000, priority, globalTid + ? FROM ThreadNames "
        "WHERE nameId = (SELECT id FROM StringIds WHERE value = 'MPI Rank 0')",
        (shift,),
    )
    conn.commit()
    conn.close()
    p = load(str(writable_copy))
    assert p.totals()[p.type_index("gpu-time")] == sql_gpu_time(writable_copy)
    assert p.meta["info:ranks"] == "0, 1"
    assert p.meta["info:unlinked gpu time"].startswith("0 ns (0 of 40")
    seen = Counter()
    for frames, _, labels in gpu_samples(p):
        # The launching thread (tid, thread name) belongs to the activity's own process.
        assert labels["thread"] == f"MPI Rank {labels['rank']}"
        seen[labels["rank"]] += 1
        if frames[-1].name.startswith("saxpy("):
            assert frames[0].name == "saxpy"
    assert seen == {"0": 20, "1": 20}


def test_gzip_and_stdin_inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = EXPORT.read_bytes()
    gz = tmp_path / "export.sqlite.gz"
    gz.write_bytes(gzip.compress(data, compresslevel=1))
    total = load(str(EXPORT)).totals()
    assert (load(str(gz)).totals() == total).all()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    assert (load("-").totals() == total).all()


# -- bad input --------------------------------------------------------------------------------
@pytest.mark.parametrize("size", [16, 100, 4096, 50_000, 400_000, 1_000_000])
def test_truncated_export_is_a_clean_input_error(tmp_path: Path, size: int) -> None:
    bad = tmp_path / "truncated.sqlite"
    bad.write_bytes(EXPORT.read_bytes()[:size])
    for fmt in (None, "nsys"):
        try:
            load(str(bad), fmt)
        except InputError as e:
            assert str(bad) in str(e)
        else:
            pytest.fail(f"a {size}-byte prefix of the export loaded without error")


def test_damaged_header_is_reported_as_damage_not_unknown_format(tmp_path: Path) -> None:
    bad = tmp_path / "header.sqlite"
    bad.write_bytes(b"SQLite format 3\x00" + bytes(200))
    with pytest.raises(InputError, match="corrupt or truncated SQLite database"):
        load(str(bad))


def test_truncated_gzip_export(tmp_path: Path) -> None:
    bad = tmp_path / "export.sqlite.gz"
    bad.write_bytes(gzip.compress(EXPORT.read_bytes(), compresslevel=1)[:300_000])
    with pytest.raises(InputError, match="truncated gzip"):
        load(str(bad))


def test_corrupt_pages_are_a_clean_input_error(tmp_path: Path) -> None:
    data = bytearray(EXPORT.read_bytes())
    data[4096:] = bytes(len(data) - 4096)  # keep the header page, zero the rest
    bad = tmp_path / "zeroed.sqlite"
    bad.write_bytes(bytes(data))
    with pytest.raises(InputError, match=r"zeroed\.sqlite"):
        load(str(bad), "nsys")


def test_sqlite_that_is_not_an_nsys_export(tmp_path: Path) -> None:
    other = tmp_path / "other.sqlite"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE t (x INTEGER)")
    conn.commit()
    conn.close()
    assert not nsys_source.sniff(Input(str(other)).head(), str(other))
    with pytest.raises(InputError, match="unknown format"):
        load(str(other))
    with pytest.raises(InputError, match="not an Nsight Systems export"):
        load(str(other), "nsys")
    assert nsys_source.sniff(Input(str(EXPORT)).head(), str(EXPORT))


def test_export_without_gpu_activity_or_samples(writable_copy: Path) -> None:
    conn = sqlite3.connect(writable_copy)
    for table in (*GPU_TABLES, "COMPOSITE_EVENTS"):
        conn.execute(f"DELETE FROM {table}")
    conn.commit()
    conn.close()
    with pytest.raises(InputError, match="no GPU activity and no CPU samples"):
        load(str(writable_copy))


# -- command line ---------------------------------------------------------------------------
def test_cli_convert_to_folded(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["convert", str(EXPORT), "-f", "folded", "-o", "-"]) == 0
    lines = capsys.readouterr().out.splitlines()
    total = sum(int(line.rpartition(" ")[2]) for line in lines)
    assert total == sql_gpu_time()
    launch = ";cudaLaunchKernel_v7000;-;saxpy("
    assert any(line.startswith("saxpy;_start;") and launch in line for line in lines)


def test_cli_info_prints_metrics(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", str(EXPORT)]) == 0
    out = capsys.readouterr().out
    assert "metric:      gpu-time [nanoseconds] total 373.273 ms  (default)" in out
    assert "cpu-samples [count] total 5,451" in out
    assert "unlinked gpu time: 0 ns" in out
    assert "(nsys)" in out


def test_cli_bad_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "cut.sqlite"
    bad.write_bytes(EXPORT.read_bytes()[:50_000])
    assert main(["info", str(bad), "--format", "nsys"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(bad) in err and "Traceback" not in err
