"""The streaming Chrome-trace reader: batches of whole events whatever the chunk size."""

from __future__ import annotations

import gzip
import io
import json

import pytest

from aiflame.errors import InputError
from aiflame.sources.kineto.events import Args, Event, coerce_event
from aiflame.sources.kineto.json_stream import TraceStream

TRICKY = {
    "schemaVersion": 1,
    "deviceProperties": [{"id": 0, "name": "GPU }]"}],
    "traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "a}, {b", "ts": 1, "dur": 2},
        {"ph": "X", "cat": "cpu_op", "name": 'q"}],[{', "args": {"x": [{"y": "}"}]}},
        {"ph": "i", "name": "\\", "ts": 3},
        {"ph": "X", "cat": "kernel", "name": "k<int>(x)", "ts": 4.5, "dur": 0.25},
    ],
    "traceName": "after the events",
    "displayTimeUnit": "ms",
}


def read(data: bytes, chunk: int, event_type=None) -> tuple[list, dict]:  # type: ignore[no-untyped-def]
    kwargs = {} if event_type is None else {"event_type": event_type}
    stream = TraceStream(io.BytesIO(data), "t.json", chunk=chunk, **kwargs)
    events = [e for batch in stream.batches() for e in batch]
    return events, stream.meta


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 16, 64, 1 << 20])
def test_any_chunk_size_gives_the_same_events(chunk: int) -> None:
    for text in (json.dumps(TRICKY), json.dumps(TRICKY, indent=2)):
        events, meta = read(text.encode(), chunk)
        assert events == TRICKY["traceEvents"]
        assert meta == {k: v for k, v in TRICKY.items() if k != "traceEvents"}


@pytest.mark.parametrize("chunk", [5, 1 << 20])
def test_bare_array_and_bom(chunk: int) -> None:
    data = b"\xef\xbb\xbf" + json.dumps(TRICKY["traceEvents"]).encode()
    events, meta = read(data, chunk)
    assert events == TRICKY["traceEvents"] and meta == {}


def test_typed_events_skip_unknown_fields_and_fall_back_on_odd_types() -> None:
    good = {"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2, "args": {"stream": 7}}
    odd = {"ph": "X", "cat": "cpu_op", "name": "o", "ts": 1, "dur": 2, "args": [1, 2]}
    data = json.dumps({"traceEvents": [good, odd, 5]}).encode()
    events, _ = read(data, 1 << 20, Event)
    assert events == [good, odd, 5]  # that batch falls back to plain values
    assert [coerce_event(e) for e in events] == [
        Event("X", "kernel", "k", None, None, 1, 2, None, Args(None, 7, None, None)),
        Event("X", "cpu_op", "o", None, None, 1, 2, None, None),
        None,
    ]
    typed, _ = read(json.dumps({"traceEvents": [good]}).encode(), 1 << 20, Event)
    assert typed == [coerce_event(good)]


def test_invalid_utf8_is_replaced_not_fatal() -> None:
    data = b'{"traceEvents": [{"ph": "X", "name": "bad \xff byte"}]}'
    events, _ = read(data, 1 << 20)
    assert events[0]["name"] == "bad \ufffd byte"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b'{"traceEvents": [{"a": 1}, {"b": 2', "truncated"),
        (b'{"traceEvents": [{"a": 1}, {"b": 2}', "truncated"),
        (b'{"traceEvents": [{"a": 1}]', "truncated"),
        (b'{"traceEvents": [{"a": 1}, {"b": nope}]}', "invalid JSON trace at byte"),
        (b'{"traceEvents": [{"a": 1} {"b": 2}]}', "invalid JSON trace"),
        (b"hello", "not a JSON object or array"),
        (b'{"schemaVersion": 1, "traceEvents"', "invalid JSON trace"),
    ],
)
@pytest.mark.parametrize("chunk", [4, 1 << 20])
def test_bad_json_is_one_clear_error(data: bytes, message: str, chunk: int) -> None:
    with pytest.raises(InputError, match=message) as e:
        read(data, chunk)
    assert str(e.value).startswith("t.json: ")


def test_empty_object_and_array() -> None:
    assert read(b"{}", 10) == ([], {})
    assert read(b'{"traceEvents": []}', 10) == ([], {})


def test_batches_bound_memory_on_a_long_array() -> None:
    events = [{"ph": "X", "name": f"e{i}", "ts": i, "dur": 1} for i in range(20000)]
    data = gzip.compress(json.dumps({"traceEvents": events}).encode())
    stream = TraceStream(gzip.GzipFile(fileobj=io.BytesIO(data)), "t", chunk=64 * 1024)
    sizes = [len(b) for b in stream.batches()]
    assert sum(sizes) == 20000
    assert len(sizes) > 5 and max(sizes) < 3000  # handed over in pieces, not whole


@pytest.mark.parametrize("chunk", [8, 1 << 20])
def test_objects_after_the_events_do_not_confuse_the_cuts(chunk: int) -> None:
    # Chrome traces may put 'samples' and 'stackFrames' after traceEvents: many "}," there.
    trace = {
        "traceEvents": [{"ph": "X", "name": f"e{i}", "ts": i, "dur": 1} for i in range(3)],
        "samples": [{"ts": i, "sf": i} for i in range(50)],
        "stackFrames": {str(i): {"name": f"f{i}"} for i in range(50)},
    }
    events, meta = read(json.dumps(trace, indent=1).encode(), chunk)
    assert events == trace["traceEvents"]
    assert meta == {"samples": trace["samples"], "stackFrames": trace["stackFrames"]}


def test_bad_text_early_in_a_big_file_fails_without_reading_on() -> None:
    events = ",\n".join(json.dumps({"ph": "X", "name": f"e{i}", "ts": i}) for i in range(20000))
    data = ('{"traceEvents": [{"ph": "X", "ts": 1,, "dur": 2},\n' + events + "]}").encode()

    class Counting(io.BytesIO):
        read_bytes = 0

        def read(self, n: int = -1) -> bytes:  # type: ignore[override]
            out = super().read(n)
            Counting.read_bytes += len(out)
            return out

    with pytest.raises(InputError, match="invalid JSON trace at byte 37"):
        for _ in TraceStream(Counting(data), "t", chunk=4096).batches():
            pass
    assert Counting.read_bytes < len(data) // 10
