"""The streaming reader of memory snapshots (sources/torch_memory/stream.py): the same
profile and replay as the restricted unpickler on the real snapshot, on longer traces, on
other pickle protocols and on odd layouts; code-running pickles still refused; truncated or
garbled files one clear error (the same the unpickler gives); and memory that does not hold
the trace's events."""

from __future__ import annotations

import gzip
import io
import os
import pickle
import random
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from aiflame.errors import InputError
from aiflame.model import Profile
from aiflame.sources.inputs import Input
from aiflame.sources.torch_memory import importer as tm
from aiflame.sources.torch_memory.events import decode_heads, learn_shape
from aiflame.sources.torch_memory.replay import Trace, replay
from aiflame.sources.torch_memory.stream import Fallback, Truncated, read_plain_data

DATA = Path(__file__).resolve().parents[1] / "data" / "memory"
SNAPSHOT = DATA / "medium_128_inference_memory_snapshot.pickle.gz"
RAW = gzip.decompress(SNAPSHOT.read_bytes())


def plain(data: bytes) -> dict:
    return tm.PlainDataUnpickler(io.BytesIO(data)).load()


def replicated(data: dict, times: int) -> dict:
    """The trace ``times`` over as a longer recording has it: each copy later in time,
    higher in address, with its own frame lists (their frame dicts shared), as
    benchmarks/gen_big_snapshot.py makes it."""
    trace = data["device_traces"][0]
    span = trace[-1]["time_us"] - trace[0]["time_us"] + 1
    stride = 1 << 40
    events = []
    for k in range(times):
        lists: dict[int, list] = {}
        for e in trace:
            c = dict(e, time_us=e["time_us"] + k * span, addr=e["addr"] + (times - 1 - k) * stride)
            c["frames"] = lists.setdefault(id(e["frames"]), list(e["frames"]))
            events.append(c)
    data["device_traces"][0] = events
    return data


def both(path: Path) -> tuple[Profile, Profile, dict[str, int]]:
    """The profile read by the streaming reader and by the unpickler, and the stream's
    stats (it must not have fallen back)."""
    stats: dict[str, int] = {}
    with Input(str(path)).open_binary() as f:
        read_plain_data(f, stats)  # raises Fallback if it cannot read it itself
    streamed = tm.load(Input(str(path)), resolve_classes=False)
    data = tm.read_snapshot(Input(str(path)), stream=False)
    with tm._gc_paused():
        unpickled = tm.build_profile(data, resolve_classes=False)
    return streamed, unpickled, stats


def assert_same_profile(a: Profile, b: Profile) -> None:
    assert a.strings.strings == b.strings.strings
    for col in ("name", "kind", "file", "line", "module", "address"):
        assert list(getattr(a.frames, col)) == list(getattr(b.frames, col)), col
    assert list(a.stacks.parent) == list(b.stacks.parent)
    assert list(a.stacks.frame) == list(b.stacks.frame)
    assert a.sample_types == b.sample_types
    for col in ("sample_stack", "values", "sample_labels", "timestamps"):
        x, y = getattr(a, col), getattr(b, col)
        assert (x is None) == (y is None) and (x is None or np.array_equal(x, y)), col
    assert a.label_sets == b.label_sets
    assert a.meta.keys() == b.meta.keys()
    for key in a.meta:
        assert a.meta[key] == b.meta[key], key


def write(tmp_path: Path, data: object, protocol: int = 4, name: str = "s.pickle") -> Path:
    path = tmp_path / name
    path.write_bytes(pickle.dumps(data, protocol=protocol))
    return path


# -- the same results -------------------------------------------------------------------------


def test_real_snapshot_same_profile_and_replay(tmp_path):
    path = tmp_path / "real.pickle"
    path.write_bytes(RAW)
    streamed, unpickled, stats = both(path)
    assert_same_profile(streamed, unpickled)
    assert streamed.meta["peak_bytes"] == 1_736_962_048
    assert stats["events"] == 3840 and stats["read_slowly"] < 3840 // 10  # patterns did it
    data = tm.read_snapshot(Input(str(path)))
    trace = data["device_traces"][0]
    assert isinstance(trace, Trace) and len(trace) == 2560  # alloc + free_completed
    mine = replay(trace, data["segments"])
    theirs = replay(plain(RAW)["device_traces"][0], plain(RAW)["segments"])
    for col in ("size", "stream", "addr", "origin", "alloc_point", "free_point", "time_us"):
        assert np.array_equal(getattr(mine, col), getattr(theirs, col)), col
    assert np.array_equal(mine.live, theirs.live) and mine.peak_point == theirs.peak_point
    assert mine.live_at_end == theirs.live_at_end
    assert [list(f) for f in mine.frames] == [list(f) for f in theirs.frames]


def test_longer_trace_same_profile_and_read_by_patterns(tmp_path):
    path = write(tmp_path, replicated(plain(RAW), 4))
    streamed, unpickled, stats = both(path)
    assert_same_profile(streamed, unpickled)
    assert streamed.meta["peak_bytes"] == 1_736_962_048
    assert stats["events"] == 4 * 3840 and stats["read_slowly"] < 3840 // 10


def test_pickle_protocol_5_streamed_2_and_3_unpickled(tmp_path):
    path = write(tmp_path, replicated(plain(RAW), 2), protocol=5)
    streamed, unpickled, stats = both(path)
    assert_same_profile(streamed, unpickled)
    assert stats["events"] == 2 * 3840 and stats["read_slowly"] < 3840 // 10
    for protocol in (2, 3):  # memo stores by BINPUT: handed to the unpickler, as before
        path = write(tmp_path, plain(RAW), protocol=protocol, name=f"p{protocol}.pickle")
        with pytest.raises(Fallback), open(path, "rb") as f:
            read_plain_data(f)
        streamed = tm.load(Input(str(path)), resolve_classes=False)
        assert_same_profile(streamed, tm.build_profile(plain(RAW), resolve_classes=False))


def test_gzip_and_stdin(tmp_path, monkeypatch):
    streamed = tm.load(Input(str(SNAPSHOT)), resolve_classes=False)

    class Stdin:
        buffer = io.BytesIO(RAW)

    monkeypatch.setattr("sys.stdin", Stdin)
    assert_same_profile(tm.load(Input("-"), resolve_classes=False), streamed)


# -- odd layouts: read by the stream, or handed to the unpickler, the same profile ------------


def frame(name: str, line: int = 1) -> dict:
    return {"name": name, "filename": "/x/m.py", "line": line}


def event(action: str, addr: int, size: int, t: int | None, frames=None, **extra) -> dict:
    e = {"action": action, "addr": addr, "size": size, "stream": 0}
    if t is not None:
        e["time_us"] = t
    e.update(extra)
    if frames is not None:
        e["frames"] = frames
    return e


def odd_snapshot(n: int = 2500) -> dict:
    """Events of several layouts: OOMs, no time, no stream, key orders, frames absent, empty,
    one, shared between events and with a block, huge and negative integers, strings."""
    fa, fb = [frame("a"), frame("b", 2)], [frame("c", 3)]
    shared = [frame("s", 9), *fa]
    trace = []
    for i in range(n):
        base = 1 << (20 + (i % 7) * 3)
        trace.append(event("alloc", base + i * 64, 64 + i % 5, 10 * i, fa if i % 3 else fb))
        trace.append(event("free_requested", base + i * 64, 64 + i % 5, 10 * i + 1, shared))
        trace.append(event("free_completed", base + i * 64, 64 + i % 5, 10 * i + 2, shared))
        if i % 97 == 0:
            trace.append(event("oom", 0, 1 << 40, 10 * i + 3, device_free=12345))
        if i % 101 == 0:
            trace.append(event("segment_alloc", 7 << 40, 1 << 21, 10 * i + 4, [frame("seg")]))
            trace.append(event("snapshot", 0, 0, 10 * i + 5, compile_context="x" * 80))
        if i % 89 == 0:  # other key orders, absent keys, values of every scalar kind
            trace.append({"size": 32, "action": "alloc", "addr": (9 << 40) + i, "frames": []})
            trace.append(
                {
                    "action": "free_completed",
                    "addr": (9 << 40) + i,
                    "size": 32,
                    "stream": -5,
                    "time_us": -(1 << 62),
                    "user_metadata": None,
                    "flag": True,
                    "f": 1.5,
                    "frames": [fb[0]],
                }
            )
        if i % 113 == 0:
            trace.append(event("alloc", 5 << 40, (1 << 63) - 1, 10 * i + 6, None))
    blocks = [{"address": 1 << 30, "size": 4096, "requested_size": 4000,
               "state": "active_allocated", "frames": shared}]  # fmt: skip
    seg = {"device": 0, "address": 1 << 30, "total_size": 1 << 21, "stream": 0,
           "segment_type": "large", "blocks": blocks}  # fmt: skip
    return {"segments": [seg], "device_traces": [trace, []], "other": [shared, "tail"]}


def test_odd_layouts_same_profile(tmp_path):
    streamed, unpickled, stats = both(write(tmp_path, odd_snapshot()))
    assert_same_profile(streamed, unpickled)
    assert stats["read_slowly"] < stats["events"] // 4
    assert len(streamed.meta["oom_events"]) == 26


def test_no_time_and_two_devices(tmp_path):
    data = odd_snapshot(300)
    for e in data["device_traces"][0][::50]:
        e.pop("time_us", None)
    data["device_traces"][1] = [dict(e, addr=e["addr"] + 1) for e in data["device_traces"][0]]
    data["segments"].append(dict(data["segments"][0], device=1))
    streamed, unpickled, _ = both(write(tmp_path, data))
    assert_same_profile(streamed, unpickled)
    assert streamed.meta["peak_time_unit"] == "event"


def test_large_strings_outside_frames(tmp_path):
    """A string of 64 KiB or more is written after its frame, not inside one."""
    data = odd_snapshot(1500)
    data["device_traces"][0][2000]["frames"] = [frame("f" * 70_000)]
    streamed, unpickled, _ = both(write(tmp_path, data))
    assert_same_profile(streamed, unpickled)


def test_what_the_stream_does_not_read_goes_to_the_unpickler(tmp_path):
    data = odd_snapshot(1200)
    trace = data["device_traces"][0]
    trace.append(trace[1000])  # the same event dict twice: a memo reference to it
    trace[1500]["addr"] = 1.5  # the unpickler's replay takes int(1.5)
    path = write(tmp_path, data)
    with pytest.raises(Fallback), open(path, "rb") as f:
        read_plain_data(f)
    streamed = tm.load(Input(str(path)), resolve_classes=False)
    unpickled = tm.build_profile(plain(path.read_bytes()), resolve_classes=False)
    assert_same_profile(streamed, unpickled)


# -- refusing code, bad files ----------------------------------------------------------------


class RunsCode:
    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


def test_code_deep_in_a_long_trace_is_refused_and_nothing_runs(tmp_path):
    marker = tmp_path / "marker"
    data = replicated(plain(RAW), 2)
    data["device_traces"][0][6000]["frames"] = RunsCode(f"touch {marker}")
    path = write(tmp_path, data)
    with pytest.raises(Fallback), open(path, "rb") as f:  # read by patterns up to there
        read_plain_data(f)
    with pytest.raises(InputError, match=r"refused to load.*system"):
        tm.load(Input(str(path)))
    assert not marker.exists()


@pytest.mark.parametrize("cut", [0.001, 0.3, 0.77, 0.999])
def test_truncated_is_one_clear_error(tmp_path, cut):
    path = tmp_path / "cut.pickle"
    path.write_bytes(RAW[: int(len(RAW) * cut)])
    with pytest.raises(InputError, match="truncated pickle") as err:
        tm.load(Input(str(path)))
    assert str(path) in str(err.value)
    with pytest.raises(Truncated), open(path, "rb") as f:
        read_plain_data(f)


def outcome(path: Path, stream: bool) -> object:
    """The profile's values and meta, or the error, whichever the file gives."""
    try:
        data = tm.read_snapshot(Input(str(path)), stream=stream)
        with tm._gc_paused():
            p = tm.build_profile(data, resolve_classes=False)
    except InputError as e:
        return str(e)
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as e:
        return f"invalid: {type(e).__name__}"
    return (p.values.tolist(), p.sample_stack.tolist(), repr(sorted(p.meta.items())))


def test_garbled_files_read_as_the_unpickler_reads_them(tmp_path):
    """Bytes changed at random in the trace: the stream gives what the unpickler gives, the
    same profile or the same error."""
    rng = random.Random(5)
    small = pickle.dumps(replicated(plain(RAW), 1), protocol=4)
    start = small.index(b"device_traces")
    errors = 0
    for k in range(30):
        garbled = bytearray(small)
        for _ in range(1 + k % 3):
            garbled[rng.randrange(start, len(small))] = rng.randrange(256)
        path = tmp_path / f"g{k}.pickle"
        path.write_bytes(bytes(garbled))
        mine, theirs = outcome(path, True), outcome(path, False)
        assert mine == theirs, k
        errors += isinstance(mine, str)
    assert errors  # some of them are errors, not all read the same by chance


# -- memory -----------------------------------------------------------------------------------


def traced_peak(path: Path, stream: bool) -> int:
    tracemalloc.start()
    try:
        tm.read_snapshot(Input(str(path)), stream=stream)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_does_not_hold_the_events(tmp_path):
    """From 4 to 10 copies of the trace (23,040 more events), what the stream holds grows by
    a memo slot or two and a few numbers per event (its buffers, patterns and batches are
    the same at any length): several times less than what the unpickler needs per event."""
    short = write(tmp_path, replicated(plain(RAW), 4), name="short.pickle")
    long = write(tmp_path, replicated(plain(RAW), 10), name="long.pickle")
    per_event = (traced_peak(long, True) - traced_peak(short, True)) / 23_040
    unpickled_per_event = traced_peak(short, False) / (4 * 3840)
    assert unpickled_per_event > 500
    assert per_event < 200 and per_event < unpickled_per_event / 4, per_event
    trace = tm.read_snapshot(Input(str(long)))["device_traces"][0]
    assert len({id(f) for f in trace.frames}) < 1000  # lists shared, not one an event (38,400)


# -- pieces -------------------------------------------------------------------------------------


def test_integers_decoded_from_every_opcode():
    values = [0, 1, 255, 256, 65535, 65536, -1, -129, 2**31 - 1, -(2**31), 2**31, 2**40 + 7,
              -(2**40), 2**63 - 1, -(2**63), 127, 128, -128, 32767, -32769]  # fmt: skip
    rng = random.Random(1)
    values += [rng.randrange(-(2**63), 2**63) for _ in range(300)]
    values += [rng.randrange(-(2**20), 2**20) for _ in range(300)]
    key = {"action": 0, "addr": 1}  # memo indices of the key strings
    strings = {id(k): i for k, i in zip(key, (3, 300), strict=True)}
    shape = learn_shape(dict.fromkeys(key), strings)
    assert shape is not None
    heads = []
    for v in values:
        token = pickle.dumps(v, protocol=2)[2:-1]  # PROTO ... STOP
        heads.append(b"}\x94(h\x03h\x07j\x2c\x01\x00\x00" + token)
    got, present = decode_heads(heads, shape.steps)
    assert got[:, 0].tolist() == values and present[:, 0].all() and not present[:, 1:].any()
