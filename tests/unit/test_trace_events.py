"""Generic Chrome Trace Event Format files (speedscope's trace-event corpus and small cases).

Expected times are worked out by hand from each file's events (microseconds; the profile
holds nanoseconds). Where speedscope's snapshot has the same file, its self/total weights
agree with these.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from aiflame.cli.main import main
from aiflame.errors import InputError
from aiflame.model import FrameKind, Profile
from aiflame.render.folded import render_folded
from aiflame.sources.kineto import trace_events
from aiflame.sources.registry import load
from aiflame.transforms.correlate import OVERLAP_WARNING

DATA = Path(__file__).resolve().parents[1] / "data" / "trace_events"
US = 1000  # ns


def self_us(profile: Profile) -> dict[str, float]:
    """Self time per stack (``a;b;c``), in microseconds."""
    out: dict[str, float] = {}
    for line in render_folded(profile).splitlines():
        stack, value = line.rsplit(" ", 1)
        out[stack] = out.get(stack, 0) + int(value) / US
    return out


def totals_us(profile: Profile) -> Counter[str]:
    """Total time per frame name (counted once per stack even when recursive)."""
    out: Counter[str] = Counter()
    for stack, value in self_us(profile).items():
        for name in set(stack.split(";")):
            out[name] += value
    return out


def warnings(profile: Profile) -> str:
    return str(profile.meta.get("info:warnings", ""))


def read(name: str) -> Profile:
    profile = load(str(DATA / name))
    assert profile.meta["format"] == "trace-events"
    assert profile.sample_types[0].name == "wall-time"
    return profile


def test_sniff_takes_chrome_traces_kineto_leaves() -> None:
    head = (DATA / "simple.json").read_bytes()
    assert trace_events.sniff(head, "x.json")
    assert trace_events.sniff(b'{"traceEvents": []}', "x.json")
    assert not trace_events.sniff(b'[{"a": 1}]', "x.json")
    assert not trace_events.sniff(b"a;b 1\n", "x.txt")


def test_simple_b_e_and_x_mixed() -> None:
    # alpha B0-E14 > beta B1-E13 > gamma X 2+5, epsilon X 7 (tdur 4, no dur)
    p = read("simple.json")
    assert self_us(p) == {
        "alpha": 2,
        "alpha;beta": 3,
        "alpha;beta;gamma": 5,
        "alpha;beta;epsilon": 4,
    }
    assert totals_us(p) == {"alpha": 14, "beta": 12, "gamma": 5, "epsilon": 4}
    assert warnings(p) == ""


def test_object_form_goes_through_kineto_and_unnamed_slices() -> None:
    # {"traceEvents": ...} is sniffed by the Kineto importer, which hands it over.
    p = read("simple-object.json")
    assert self_us(p) == {"alpha": 2, "alpha;beta": 8, "alpha;beta;(unnamed)": 4}


def test_partial_array_with_trailing_comma() -> None:
    p = read("simple-partial-trailing-comma.json")
    assert totals_us(p) == {"alpha": 14, "beta": 12, "gamma": 5, "epsilon": 4}
    assert "1 truncated event arrays" in warnings(p)


def test_process_and_thread_names_root_the_stacks() -> None:
    p = read("multiprocess.json")
    assert self_us(p) == {
        "p0 (0);p0t0 (0);alpha": 1,
        "p0 (0);p0t1 (1);beta": 1,
        "p1 (1);p1t0 (0);gamma": 1,
        "p1 (1);p1t1 (1);delta": 1,
        "p2t0 (0);epsilon": 1,  # pid 2 has no process_name
        "p2t1 (1);phi": 1,
        "p3 (3);zeta": 1,  # pid 3's threads have no thread_name
        "p3 (3);eta": 1,
    }
    kinds = {p.frames.name_of(f): p.frames.get(f).kind for f in range(len(p.frames))}
    assert kinds["p0 (0)"] == FrameKind.LABEL and kinds["p0t1 (1)"] == FrameKind.LABEL
    labels = {dict(s)["pid"] + "/" + dict(s)["tid"] for s in p.label_sets if s}
    assert labels == {f"{pid}/{tid}" for pid in range(4) for tid in range(2)}


def test_equal_slices_nest_in_file_order() -> None:
    # A, B, C begin together at 0 and end at 3, 2, 1; later A 4-7 > B 5-7 > C 6-7; X 7-10.
    p = read("must-retain-original-order.json")
    assert self_us(p) == {"A": 2, "A;B": 2, "A;B;C": 2, "X": 3}
    assert totals_us(p) == {"A": 6, "B": 4, "C": 2, "X": 3}


def test_x_slices_starting_together() -> None:
    # alpha 0-10; beta and gamma both 1-2 (beta written first encloses), then gamma, beta 5-6
    p = read("matching-x.json")
    assert self_us(p) == {"alpha": 8, "alpha;beta;gamma": 1, "alpha;gamma;beta": 1}


def test_out_of_order_events_are_sorted_per_thread() -> None:
    # written B 1-9, A 0-10, C 2-8: by time A > B > C
    p = read("out-of-order.json")
    assert self_us(p) == {"A": 2, "A;B": 2, "A;B;C": 6}
    assert warnings(p) == ""


def test_extra_end_events_are_ignored_and_counted() -> None:
    # alpha 0-14 > beta 1-13, plus E gamma, E delta at 5 naming nothing open
    p = read("too-many-end-events.json")
    assert self_us(p) == {"alpha": 2, "alpha;beta": 12}
    assert "2 E events without a matching B (ignored)" in warnings(p)
    q = read("end-event-with-empty-stack.json")
    assert self_us(q) == {"alpha": 1}
    assert "1 E events without a matching B" in warnings(q)


def test_open_slices_close_at_the_threads_last_timestamp() -> None:
    # B A 0, B B 1, B C 2 and nothing else: all end at 2 (C has no time)
    p = read("only-begin-events.json")
    assert self_us(p) == {"A": 1, "A;B": 1}
    assert "3 B events never ended" in warnings(p)


def test_end_naming_an_enclosing_slice_closes_it_and_its_children() -> None:
    # B alpha 0, B beta 1, E alpha 9 (closes beta too), E beta 10 (nothing open by that name)
    p = read("unbalanced-name.json")
    assert self_us(p) == {"alpha": 1, "alpha;beta": 8}
    w = warnings(p)
    assert "1 E events that close an enclosing slice" in w
    assert "1 E events without a matching B" in w


def test_zero_duration_and_misordered_end() -> None:
    # A 0-10; B 1-1 (no time); E C at 2 before B C at 2: ignored; C 2-10 closed by E A at
    # 10, A then left open and closed at 10; D zero-length X at 3.
    p = read("zero-duration-events.json")
    assert self_us(p) == {"A": 2, "A;C": 8}


def test_overlapping_x_slices_are_counted_once() -> None:
    # alpha 0-10, beta 5-15: alpha ends where beta starts (beta its sibling), so the
    # thread's 15 us are counted once, not 20
    p = read("invalid-x-nesting.json")
    assert self_us(p) == {"alpha": 5, "beta": 10}
    assert f"1 {OVERLAP_WARNING}" in warnings(p)


def write(tmp_path: Path, events: object, name: str = "t.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(events))
    return str(path)


def test_other_phases_ignored_threads_kept_apart(tmp_path: Path) -> None:
    events = {
        "traceEvents": [
            {"ph": "M", "pid": 1, "tid": 7, "name": "thread_name", "args": {"name": "main"}},
            {"ph": "X", "pid": 1, "tid": 7, "name": "step", "ts": 100.5, "dur": 10},
            {"ph": "X", "pid": 1, "tid": 7, "name": "matmul", "ts": 101.5, "dur": 4.25},
            {"ph": "X", "pid": "1", "tid": "8", "name": "step", "ts": 100, "dur": 3},
            {"ph": "B", "pid": 1, "tid": 8, "name": "io", "ts": "104"},
            {"ph": "E", "pid": 1, "tid": 8, "ts": 106},
            {"ph": "C", "pid": 1, "name": "mem", "ts": 101, "args": {"bytes": 5}},
            {"ph": "i", "pid": 1, "tid": 7, "name": "mark", "ts": 101},
            {"ph": "s", "pid": 1, "tid": 7, "name": "f", "ts": 101, "id": 1},
            {"ph": "b", "pid": 1, "tid": 7, "name": "a", "ts": 101, "id": 2, "cat": "x"},
        ],
        "displayTimeUnit": "ns",
    }
    p = load(write(tmp_path, events))
    assert p.meta["format"] == "trace-events"
    assert self_us(p) == {"main (7);step": 5.75, "main (7);step;matmul": 4.25, "step": 3, "io": 2}
    assert (
        p.meta["info:not used"]
        == "counter events 1, instant events 1, flow events 1, async events 1"
    )
    assert p.meta["time_range_ns"] == (100_000, 110_500)


def test_kineto_traces_still_load_as_kineto(data_dir: Path) -> None:
    traces = sorted((data_dir / "kineto").rglob("*.json.gz"), key=lambda t: t.stat().st_size)
    assert traces
    assert load(str(traces[0])).meta["format"] == "kineto"


@pytest.mark.parametrize(
    ("events", "message"),
    [
        ({"traceEvents": [{"ph": "C", "name": "c", "ts": 1}]}, "no profiler events"),
        ([{"ph": "i", "name": "c", "ts": 1, "pid": 1, "tid": 1}], "no slices in this trace"),
    ],
)
def test_no_slices_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], events: object, message: str
) -> None:
    path = write(tmp_path, events)
    with pytest.raises(InputError, match=message):
        load(path)
    assert main(["flamegraph", path, "-o", str(tmp_path / "out.html")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and path in err and message in err


def test_corrupt_json_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.json"
    path.write_text('[{"ph": "X", "name": "a", "ts": 1, "dur": 2}, {"ph": "X",, }]')
    with pytest.raises(InputError, match="invalid JSON trace"):
        load(str(path))
    assert main(["flamegraph", str(path), "-o", str(tmp_path / "out.html")]) == 1
    assert capsys.readouterr().err.strip().count("\n") == 0


def test_cli_flamegraph(tmp_path: Path) -> None:
    html, folded = tmp_path / "f.html", tmp_path / "f.txt"
    assert main(["flamegraph", str(DATA / "multiprocess.json"), "-o", str(html)]) == 0
    assert html.stat().st_size > 0
    assert main(["convert", str(DATA / "simple.json"), "-f", "folded", "-o", str(folded)]) == 0
    assert folded.read_text().splitlines()[0] == "alpha 2000"


def test_odd_events_are_counted_not_fatal(tmp_path: Path) -> None:
    events = [
        {"ph": "X", "pid": [1], "tid": 1, "name": "listpid", "ts": 0, "dur": 2},
        {"ph": "X", "pid": 1, "tid": 1, "name": "ok", "ts": "0", "dur": "4", "args": [1]},
        {"ph": "X", "pid": 1, "tid": 1, "name": "no dur", "ts": 1},
        {"ph": "X", "pid": 1, "tid": 1, "name": "negative", "ts": 1, "dur": -1},
        {"ph": "B", "pid": 1, "tid": 1, "name": "no ts"},
        {"ph": "M", "pid": 1, "tid": 1, "name": "thread_name", "args": {"name": 5}},
        7,
    ]
    p = load(write(tmp_path, events, "odd.json"))
    assert self_us(p) == {"listpid": 2, "ok": 4}
    w = warnings(p)
    for what in (
        "1 X events without dur",
        "1 X events with a negative duration",
        "1 B events without ts",
        "1 events that are not JSON objects",
    ):
        assert what in w
