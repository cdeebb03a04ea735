"""Bad Kineto traces: a clear one-line error or a counted warning, never a crash or a hang."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from aiflame.cli.main import main
from aiflame.errors import InputError
from aiflame.sources.inputs import Input
from aiflame.sources.kineto import importer as kineto

DATA = Path(__file__).resolve().parents[1] / "data" / "kineto"
TRITON = DATA / "hta" / "triton_example" / "triton_example.json.gz"


def write(tmp_path: Path, events: list, name: str = "t.json", **top: object) -> str:
    path = tmp_path / name
    path.write_text(json.dumps({"schemaVersion": 1, **top, "traceEvents": events}))
    return str(path)


def load(path: str):  # type: ignore[no-untyped-def]
    return kineto.load(Input(path))


def kernel(corr: int, ts: float, dur: float, name: str = "k", **args: object) -> dict:
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "pid": 0,
        "tid": 7,
        "ts": ts,
        "dur": dur,
        "args": {"correlation": corr, "device": 0, "stream": 7, **args},
    }


def launch(corr: int, ts: float, dur: float = 5, name: str = "cudaLaunchKernel") -> dict:
    return {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": name,
        "pid": 1,
        "tid": 1,
        "ts": ts,
        "dur": dur,
        "args": {"correlation": corr},
    }


def op(name: str, ts: float, dur: float) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}


def test_truncated_gzip(tmp_path: Path) -> None:
    data = TRITON.read_bytes()
    path = tmp_path / "cut.json.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="truncated gzip"):
        load(str(path))


def test_truncated_json(tmp_path: Path) -> None:
    text = gzip.decompress(TRITON.read_bytes())
    path = tmp_path / "cut.json"
    path.write_bytes(text[: int(len(text) * 0.7)])
    with pytest.raises(InputError, match=r"truncated|invalid JSON"):
        load(str(path))


def test_invalid_json(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"traceEvents": [{"ph": "X", "ts": 1,, "dur": 2}]}')
    with pytest.raises(InputError, match="invalid JSON trace at byte"):
        load(str(path))


@pytest.mark.parametrize("events", [[], [{"ph": "M", "name": "process_name"}]])
def test_empty_trace(tmp_path: Path, events: list) -> None:
    with pytest.raises(InputError, match="no profiler events"):
        load(write(tmp_path, events))


def test_events_missing_fields_are_counted(tmp_path: Path) -> None:
    events = [
        launch(1, 10),
        kernel(1, 20, 3),
        {"ph": "X", "cat": "cpu_op", "name": "no ts", "dur": 3},
        {"ph": "X", "cat": "kernel", "name": "no dur", "ts": 3, "args": {"correlation": 1}},
        {"ph": "X", "cat": "cpu_op", "name": "no args", "ts": 1, "dur": 50, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "kernel", "name": "no args", "ts": 40, "dur": 2},
        {"ph": "X", "name": "no category", "ts": 1, "dur": 1},
        {"ph": "X", "cat": "cpu_op", "name": "bad ts", "ts": "soon", "dur": 1},
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "string ts",
            "ts": "5",
            "dur": "1",
            "pid": 1,
            "tid": 1,
        },
        "not an event",
    ]
    profile = load(write(tmp_path, events))
    warnings = str(profile.meta["info:warnings"])
    assert "3 events without ts or dur" in warnings
    assert "1 events that are not JSON objects" in warnings
    assert "1 GPU activities without a correlation id" in warnings
    assert "(no category) 1" in str(profile.meta["info:not used"])
    # The kernel without args has no correlation: kept, under the unlinked root.
    assert profile.meta["unlinked_gpu_ns"] == 2000
    assert profile.totals()[profile.type_index("gpu-time")] == 5000


def test_negative_duration_is_counted(tmp_path: Path) -> None:
    profile = load(write(tmp_path, [launch(1, 10), kernel(1, 20, 3), kernel(2, 30, -4)]))
    assert "1 events with a negative duration" in str(profile.meta["info:warnings"])
    assert profile.totals()[profile.type_index("gpu-time")] == 3000


def test_duplicate_and_dangling_correlation_ids(tmp_path: Path) -> None:
    events = [
        op("aten::first", 0, 20),
        launch(5, 10),
        op("aten::second", 100, 20),
        launch(5, 110),  # the same id again: the earliest launch wins, counted
        kernel(5, 200, 4),
        kernel(99, 300, 6),  # no launch with id 99 in the trace
    ]
    profile = load(write(tmp_path, events))
    assert "1 duplicate correlation ids" in str(profile.meta["info:warnings"])
    assert "1 GPU activities whose correlation id matches no launch" in str(
        profile.meta["info:warnings"]
    )
    lines = dict(
        (s.rsplit(" ", 1)[0], int(s.rsplit(" ", 1)[1]))
        for s in __import__("aiflame.render.folded", fromlist=["x"]).folded_lines(profile)
    )
    assert lines == {
        "aten::first;cudaLaunchKernel;-;k": 4000,
        "[launch not in trace];-;k": 6000,
    }
    assert "6.000 us (60.0%) in 1 activities" in str(profile.meta["info:unlinked gpu time"])


def test_graph_launch_fans_out_to_its_stack(tmp_path: Path) -> None:
    events = [
        op("graph_replay", 0, 50),
        launch(7, 10, name="cudaGraphLaunch"),
        *(kernel(7, 100 + 10 * i, 2, name=f"k{i}") for i in range(3)),
    ]
    from aiflame.render.folded import render_folded

    # The replayed kernels hang under the launch, marked: their captured ops are not known.
    assert render_folded(load(write(tmp_path, events))) == "".join(
        f"graph_replay;cudaGraphLaunch;[graph replay: no operator known];-;k{i} 2000\n"
        for i in range(3)
    )


def test_flow_arrows_link_activity_without_correlation(tmp_path: Path) -> None:
    gpu = kernel(-1, 200, 4)
    del gpu["args"]["correlation"]
    events = [
        op("aten::mm", 0, 50),
        launch(-1, 10),
        gpu,
        {"ph": "s", "cat": "ac2g", "id": 42, "pid": 1, "tid": 1, "ts": 10},
        {"ph": "f", "cat": "ac2g", "id": 42, "pid": 0, "tid": 7, "ts": 200, "bp": "e"},
    ]
    del events[1]["args"]["correlation"]
    from aiflame.render.folded import render_folded

    assert render_folded(load(write(tmp_path, events))) == "aten::mm;cudaLaunchKernel;-;k 4000\n"


def test_cli_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "broken.json.gz"
    bad.write_bytes(TRITON.read_bytes()[:300])
    out = tmp_path / "out.html"
    assert main(["flamegraph", str(bad), "-o", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(bad) in err and "gzip" in err
    assert not out.exists()
    empty = tmp_path / "empty.json"
    empty.write_text('{"traceEvents": []}')
    assert main(["convert", str(empty), "-f", "folded", "-o", "-"]) == 1
    assert "no profiler events" in capsys.readouterr().err


def test_directory_without_traces(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    assert main(["convert", str(tmp_path), "-f", "folded", "-o", "-"]) == 1
    assert "no trace files" in capsys.readouterr().err
