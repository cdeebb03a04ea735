"""``aiflame convert -f chrome``: a Chrome / Perfetto trace (Trace Event Format JSON) of the
timeline of PyTorch profiler traces, Nsight Systems exports, Chrome traces and timed profiles.

Checked by reading the written trace back: with aiflame's Kineto importer (the flame graphs
are the same as the input's, to the byte), with its generic Chrome-trace importer (slices
per thread as written), with Meta's HTA where installed (same numbers as on the input), and
against the inputs' own events, read here without aiflame (JSON, SQLite)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sqlite3
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from aiflame.cli.main import main
from aiflame.render.folded import render_folded
from aiflame.sources import load
from aiflame.sources.inputs import Input
from aiflame.sources.kineto import trace_events

DATA = Path(__file__).resolve().parents[1] / "data"
BERT = DATA / "kineto" / "tracelens" / "h100" / "gaunernst_bert-small-uncased__1016001.json.gz"
RANKS = DATA / "kineto" / "hta" / "trace_filter"
SAXPY = DATA / "nsys" / "saxpy-mpi-cuda_nsys_perlmutter0.sqlite"
CLOVERLEAF = DATA / "nsys" / "cloverleaf" / "perlmutter-cloverleaf-cuda.sqlite"
PYINSTRUMENT = DATA / "speedscope" / "pyinstrument" / "pyinstrument.speedscope.json"
KEPT = {"python_function", "cpu_op", "user_annotation", "cuda_runtime", "cuda_driver", "kernel",
        "gpu_memcpy", "gpu_memset"}  # fmt: skip


def convert(*args: str) -> None:
    assert main(["convert", *args]) == 0


def events_of(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)["traceEvents"]


def flows(events: list[dict]) -> list[tuple[dict, dict]]:
    """(s, f) pairs by id, checking each id has exactly one of each."""
    by_id: dict[int, dict[str, dict]] = defaultdict(dict)
    for e in events:
        if e["ph"] in ("s", "f"):
            assert e["ph"] not in by_id[e["id"]], e
            by_id[e["id"]][e["ph"]] = e
    assert all(set(pair) == {"s", "f"} for pair in by_id.values())
    return [(pair["s"], pair["f"]) for pair in by_id.values()]


def slice_at(events: list[dict], pid: object, tid: object, ts: float) -> dict:
    """The X slice a flow end binds to: the innermost one open at ``ts`` on the thread."""
    open_ = [e for e in events if e["ph"] == "X" and e["pid"] == pid and e["tid"] == tid
             and e["ts"] <= ts <= e["ts"] + e["dur"]]  # fmt: skip
    assert open_, (pid, tid, ts)
    return min(open_, key=lambda e: e["dur"])


@pytest.fixture(scope="module")
def bert(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("chrome") / "bert.trace.json"
    convert(str(BERT), "-o", str(out))
    return out


def test_kineto_trace_reads_back_as_the_same_flame_graphs(bert):
    original, written = load(str(BERT)), load(str(bert))
    for metric in ("gpu-time", "cpu-time", "kernel-count"):
        assert render_folded(written, metric) == render_folded(original, metric), metric
    assert written.meta["time_range_ns"] == original.meta["time_range_ns"]


@pytest.mark.parametrize(
    "name",
    [
        "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",  # HIP names
        "kineto_tb_plugin/resnet50_num_workers_4_worker0.step6.pt.trace.json.gz",  # 2021
        "param/resnet_kineto.iteration.json.gz",  # Call stack strings, no python_function
        "hta/mtia_inference_trace/mtia_inference_rank_0.json.gz",  # not a GPU: mtia_*
        "hta/triton_example/triton_example.json.gz",  # cuda_driver launches
        "tracelens/mi210/gpu_only_trace.json.gz",
        "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
    ],
)
def test_every_kineto_layout_reads_back_the_same(name, tmp_path):
    path = DATA / "kineto" / name
    out = tmp_path / "back.json.gz"
    convert(str(path), "-o", str(out))
    original, written = load(str(path)), load(str(out))
    assert [t.name for t in written.sample_types] == [t.name for t in original.sample_types]
    for t in original.sample_types:
        assert render_folded(written, t.name) == render_folded(original, t.name), t.name
    raw = [e for e in events_of(path) if isinstance(e, dict) and e.get("ph") == "X"]
    cats = Counter(e.get("cat") for e in raw)
    mine = Counter(e["cat"] for e in events_of(out) if e["ph"] == "X")
    assert {c: n for c, n in cats.items() if c in mine} == mine  # categories as written


def test_kineto_events_keep_their_times_and_launches_are_flows(bert):
    raw = [e for e in events_of(BERT) if e.get("ph") == "X" and e.get("cat") in KEPT]
    out = events_of(bert)
    written = [e for e in out if e["ph"] == "X"]
    key = lambda e: (e["cat"], e["name"], e["pid"], e["tid"], e["ts"], e["dur"])  # noqa: E731
    assert Counter(map(key, written)) == Counter(map(key, raw))  # every slice, to the ns
    text = bert.read_text()
    assert '"ts":1419247333430.849,"dur":3.136' in text  # written as the trace wrote it
    # One flow per GPU activity, from the runtime call with its correlation id.
    gpu = [e for e in raw if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset")]
    pairs = flows(out)
    assert len(pairs) == len(gpu) == 61
    for s, f in pairs:
        assert s["cat"] == f["cat"] == "ac2g" and f["bp"] == "e" and "bp" not in s
        launch = slice_at(out, s["pid"], s["tid"], s["ts"])
        work = slice_at(out, f["pid"], f["tid"], f["ts"])
        assert launch["ts"] == s["ts"] and work["ts"] == f["ts"]
        assert launch["cat"] in ("cuda_runtime", "cuda_driver")
        assert work["cat"] in ("kernel", "gpu_memcpy")
        assert launch["args"]["correlation"] == work["args"]["correlation"]
    # Names of processes and threads, and the trace's own top-level keys.
    names = {(e["name"], e["pid"], e["tid"]): e["args"] for e in out if e["ph"] == "M"}
    assert names[("process_labels", 0, 0)] == {"labels": "GPU 0"}
    assert names[("thread_name", 0, 7)] == {"name": "stream 7"}
    top = json.loads(text)
    assert top["deviceProperties"][0]["name"] == "NVIDIA H100 80GB HBM3"
    assert top["baseTimeNanoseconds"] == 1751410836000000000


def test_generic_chrome_trace_reader_sees_every_slice_on_its_thread(bert, tmp_path):
    raw = events_of(BERT)
    kept = [e for e in raw if e.get("ph") == "X" and e.get("cat") in KEPT]
    profile = trace_events.load(Input(str(bert)))
    assert profile.meta["info:slices"].startswith(f"{len(kept):,} complete (X), 0 begin/end")
    assert f"flow events {2 * 61}" in profile.meta["info:not used"]
    # The same reader on the input's own events of those categories (and its names of
    # processes and threads): the same wall time per stack, thread and process.
    names = [e for e in raw if e.get("ph") == "M" and e["name"] in ("process_name", "thread_name")]
    for e in names:
        e["args"]["name"] = e["args"]["name"].strip()  # Kineto pads 'stream 7 '
    same = tmp_path / "same-events.json"
    same.write_text(json.dumps({"traceEvents": names + kept}))
    expected = trace_events.load(Input(str(same)))
    assert render_folded(profile) == render_folded(expected)
    assert len(render_folded(profile).splitlines()) > 300


def test_hta_reads_the_written_trace_as_it_reads_the_input(bert, tmp_path, monkeypatch):
    pytest.importorskip("hta", reason="needs HTA (pip install -e '.[compare]')")
    import logging
    import warnings

    from hta.trace_analysis import TraceAnalysis

    monkeypatch.setenv("HTA_DISABLE_NS_ROUNDING", "1")
    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    results = []
    try:
        for name, path in (("input", BERT), ("written", bert)):
            d = tmp_path / name
            d.mkdir()
            shutil.copy(path, d / (path.name if name == "input" else "bert.json"))
            ta = TraceAnalysis(trace_dir=str(d))
            temporal = ta.get_temporal_breakdown(visualize=False).to_dict("records")
            idle, _ = ta.get_idle_time_breakdown(ranks=ta.t.get_ranks(), visualize=False)
            kernels = ta.get_gpu_kernel_breakdown(visualize=False)[1]
            results.append((temporal, idle.to_dict("records"), kernels.to_dict("records")))
    finally:
        logging.disable(logging.NOTSET)
    assert results[0] == results[1]
    assert results[0][0][0]["compute_time(us)"] == pytest.approx(307.197)


def gpu_rows(db: Path) -> list[tuple[int, int, int]]:
    """(start, end, correlationId) of every kernel, memcpy and memset, read with sqlite3."""
    con = sqlite3.connect(db)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
    rows = []
    for t in (
        "CUPTI_ACTIVITY_KIND_KERNEL",
        "CUPTI_ACTIVITY_KIND_MEMCPY",
        "CUPTI_ACTIVITY_KIND_MEMSET",
    ):
        if t in tables:
            rows += con.execute(f'SELECT start, "end", correlationId FROM {t}').fetchall()
    return rows


@pytest.mark.parametrize("db", [SAXPY, CLOVERLEAF], ids=["saxpy", "cloverleaf"])
def test_nsys_export_becomes_a_pytorch_style_trace(db, tmp_path):
    out = tmp_path / "nsys.trace.json"
    convert(str(db), "-o", str(out))
    events = events_of(out)
    rows = gpu_rows(db)
    con = sqlite3.connect(db)
    calls = con.execute(
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE eventClass != 67"
    ).fetchone()[0]
    cats = Counter(e.get("cat") for e in events if e["ph"] == "X")
    assert cats["kernel"] + cats["gpu_memcpy"] + cats["gpu_memset"] == len(rows)
    assert cats["cuda_runtime"] + cats["cuda_driver"] == calls
    pairs = flows(events)
    assert len(pairs) == len(rows)  # every launch of these exports is in them
    for s, f in pairs:
        launch = slice_at(events, s["pid"], s["tid"], s["ts"])
        work = slice_at(events, f["pid"], f["tid"], f["ts"])
        assert launch["args"]["correlation"] == work["args"]["correlation"]
    # Read back as a PyTorch profiler trace: the export's GPU time, every launch linked.
    profile = load(str(out))
    assert profile.meta["format"] == "kineto"
    total = sum(end - start for start, end, _ in rows)
    assert profile.values[:, profile.type_index("gpu-time")].sum() == total
    assert profile.values[:, profile.type_index("kernel-count")].sum() == len(rows)
    assert profile.meta["info:unlinked gpu time"].startswith("0 ns")
    nsys = load(str(db))
    assert nsys.values[:, nsys.type_index("gpu-time")].sum() == total


def test_nsys_ranges_push_pop_nest_and_start_end_are_async(tmp_path):
    db = tmp_path / "ranges.sqlite"
    shutil.copy(SAXPY, db)
    con = sqlite3.connect(db)
    ((gtid, first, last),) = con.execute(
        'SELECT globalTid, min(start), max("end") FROM NVTX_EVENTS WHERE eventType = 59'
    ).fetchall()
    # A start/end range (eventType 60) across the push/pop ones, as nsys writes them.
    con.execute(
        'INSERT INTO NVTX_EVENTS (start, "end", eventType, text, globalTid)'
        " VALUES (?, ?, 60, ?, ?)",
        (first + 500, last - 500, "epoch (start/end)", gtid),
    )
    con.commit()
    con.close()
    out = tmp_path / "ranges.trace.json"
    convert(str(db), "-o", str(out))
    events = events_of(out)
    pushed = [e for e in events if e["ph"] == "X" and e["cat"] == "user_annotation"]
    assert len(pushed) == 22  # the push/pop ranges: saxpy, its phases
    assert Counter(e["name"] for e in pushed)["saxpy"] == 5
    begin = [e for e in events if e["ph"] == "b"]
    end = [e for e in events if e["ph"] == "e"]
    assert len(begin) == len(end) == 1 and begin[0]["id"] == end[0]["id"]
    assert begin[0]["name"] == end[0]["name"] == "epoch (start/end)"
    assert round(begin[0]["ts"] * 1000) == first + 500 and round(end[0]["ts"] * 1000) == last - 500


def test_timed_profile_becomes_nested_slices(tmp_path):
    out = tmp_path / "pyinstrument.trace.json"
    convert(str(PYINSTRUMENT), "-o", str(out))
    back = trace_events.load(Input(str(out)))
    lines = render_folded(back).splitlines()
    root = lines[0].split(";")[0]
    assert root.startswith("CPU profile for 'Program: workload.py'")  # the process: its title
    assert [ln.split(";", 1)[1] for ln in lines] == render_folded(
        load(str(PYINSTRUMENT))
    ).splitlines()
    events = [e for e in events_of(out) if e["ph"] == "X"]
    assert Counter(e["cat"] for e in events)["python"] > 10
    mains = [e for e in events if e["name"] == "main"]
    assert len(mains) == 1 and mains[0]["dur"] == pytest.approx(324480.467)


PERF_SCRIPT = DATA / "perf" / "flamegraph" / "inputs" / "perf-iperf-stacks-pidtid-01.txt.gz"


def perf_samples(path: Path) -> dict[str, list[float]]:
    """tid -> its sample times (us), read from the event lines of a ``perf script`` file."""
    import re

    header = re.compile(r"^\S.*?\s(\d+)(?:/(\d+))?\s+(?:\[\d+\]\s+)?(\d+)\.(\d+):")
    times: dict[str, list[float]] = defaultdict(list)
    with gzip.open(path, "rt", encoding="latin-1") as f:
        for line in f:
            m = header.match(line)
            if m and not line.startswith("#"):
                tid = m.group(2) or m.group(1)
                times[tid].append(int(m.group(3)) * 1e6 + int(m.group(4).ljust(9, "0")) / 1e3)
    return times


def test_perf_script_samples_become_slices_on_their_threads(tmp_path):
    out = tmp_path / "perf.trace.json"
    convert(str(PERF_SCRIPT), "-o", str(out), "-f", "chrome")
    events = [e for e in events_of(out) if e["ph"] == "X"]
    samples = perf_samples(PERF_SCRIPT)
    assert len(samples) > 1
    by_tid: dict[str, list[dict]] = defaultdict(list)
    for e in events:
        by_tid[str(e["tid"])].append(e)
    assert set(by_tid) == set(samples)  # one track per thread of the input
    for tid, times in samples.items():
        slices = by_tid[tid]
        # the thread's first slice opens at its first sample, none before or after its samples
        assert min(e["ts"] for e in slices) == pytest.approx(min(times), abs=0.001)
        assert max(e["ts"] for e in slices) <= max(times) + 0.001
    names = {e["args"]["name"] for e in events_of(out) if e.get("name") == "thread_name"}
    assert "iperf" in names  # the comm names the thread


def test_perf_script_without_times_has_no_timeline(tmp_path, capsys):
    import re

    with gzip.open(PERF_SCRIPT, "rt", encoding="latin-1") as f:
        text = f.read()
    untimed = tmp_path / "untimed.perf.txt"  # as `perf script -F comm,tid,event,ip,sym,dso`
    untimed.write_text(re.sub(r"(?m)^(\S.*?) \d+\.\d+: ", r"\1 ", text), encoding="latin-1")
    assert main(["flamegraph", str(untimed), "-o", str(tmp_path / "f.html")]) == 0
    capsys.readouterr()
    out = tmp_path / "x.json"
    assert main(["convert", str(untimed), "-o", str(out), "-f", "chrome"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "without sample times" in err[0] and not out.exists()


def test_several_ranks_stay_apart(tmp_path):
    out = tmp_path / "ranks.json.gz"
    convert(str(RANKS), "-o", str(out))
    events = events_of(out)
    alone = [events_of_converted(p, tmp_path) for p in sorted(RANKS.glob("*.json.gz"))]
    assert sum(len(a) for a in alone) == len(events)
    assert len(flows(events)) == sum(len(flows(a)) for a in alone)
    # Their processes differ: pids as written, names prefixed with the file's.
    pids = [{e["pid"] for e in a if e["ph"] == "X"} for a in alone]
    assert {e["pid"] for e in events if e["ph"] == "X"} == pids[0] | pids[1]
    names = {e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert any(n.startswith("sampled_rank-0.json.gz: ") for n in names)
    assert any(n.startswith("sampled_rank-1.json.gz: ") for n in names)


def test_inputs_with_the_same_pids_get_tracks_of_their_own(bert, tmp_path):
    for run in ("a", "b"):  # one trace twice, as two runs of a program would give
        (tmp_path / run).mkdir()
        shutil.copy(BERT, tmp_path / run / "trace.json.gz")
    out = tmp_path / "both.json"
    convert(
        str(tmp_path / "a" / "trace.json.gz"), str(tmp_path / "b" / "trace.json.gz"), "-o", str(out)
    )
    events, one = events_of(out), events_of(bert)
    tracks = {(e["pid"], e["tid"]) for e in events if e["ph"] == "X"}
    alone = {(e["pid"], e["tid"]) for e in one if e["ph"] == "X"}
    assert len(tracks) == 2 * len(alone)
    moved = {(pid + 10_000_000, tid) for pid, tid in alone}
    assert tracks == alone | moved
    assert len(flows(events)) == 2 * len(flows(one))
    labels = {e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert {"a/trace.json.gz: python3", "b/trace.json.gz: python3"} <= labels


def events_of_converted(path: Path, tmp_path: Path) -> list[dict]:
    out = tmp_path / (path.name + ".trace.json")
    convert(str(path), "-o", str(out))
    return events_of(out)


def test_gzip_output_is_the_same_trace(bert, tmp_path):
    out = tmp_path / "bert.json.gz"
    convert(str(BERT), "-o", str(out), "-f", "chrome")
    with gzip.open(out, "rb") as f:
        assert f.read() == bert.read_bytes()
    again = tmp_path / "again.json.gz"
    convert(str(BERT), "-o", str(again))
    assert again.read_bytes() == out.read_bytes()  # no timestamp in the gzip header


@pytest.mark.parametrize(
    ("path", "fragment"),
    [
        (DATA / "diff" / "before.txt", "folded stacks input has no timeline"),
        (DATA / "speedscope" / "profiles" / "simple-sampled-0.1.2.speedscope.json", "no timeline"),
        (DATA / "memory" / "medium_128_inference_memory_snapshot.pickle.gz", "not time"),
    ],
)
def test_inputs_without_a_timeline_are_refused(path, fragment, tmp_path, capsys):
    out = tmp_path / "x.json"
    assert main(["convert", str(path), "-o", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("aiflame: error: ") and fragment in err[0]
    assert str(path) in err[0]
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_group_by_is_refused_for_chrome(tmp_path, capsys):
    assert main(["convert", str(BERT), "-o", str(tmp_path / "x.json"), "--group-by", "rank"]) == 1
    assert "--group-by does not apply to -f chrome" in capsys.readouterr().err


def test_perfetto_trace_processor_reads_it(bert):
    """Perfetto's own importer, where its trace_processor_shell binary is at hand: the
    ``perfetto`` package downloads it on first use, so give its path in
    AIFLAME_TRACE_PROCESSOR on machines without network access."""
    shell = os.environ.get("AIFLAME_TRACE_PROCESSOR")
    if not shell:
        pytest.skip("set AIFLAME_TRACE_PROCESSOR to a trace_processor_shell binary")
    tp_mod = pytest.importorskip("perfetto.trace_processor")
    tp = tp_mod.TraceProcessor(trace=str(bert), config=tp_mod.TraceProcessorConfig(bin_path=shell))
    try:
        n = tp.query("select count(*) as n from slice").as_pandas_dataframe()["n"][0]
        links = tp.query("select count(*) as n from flow").as_pandas_dataframe()["n"][0]
    finally:
        tp.close()
    raw = [e for e in events_of(BERT) if e.get("ph") == "X" and e.get("cat") in KEPT]
    assert n == len(raw) and links == 61
