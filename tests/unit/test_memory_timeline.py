"""The memory-over-time data of a GPU memory page (render/memtimeline.py): the lifetimes the
page gets, quantized to the points it draws, give exactly what was live at every point and
during every range, on the real snapshot and on a longer (decimated) one; the page stays
small when the trace grows."""

from __future__ import annotations

import gzip
import pickle
from pathlib import Path

import numpy as np
import pytest

from aiflame.model import Profile
from aiflame.render.flamedata import unpack
from aiflame.render.html import extract_data, render_html
from aiflame.render.memtimeline import unpack_memory
from aiflame.sources.inputs import Input
from aiflame.sources.torch_memory import importer as tm
from aiflame.sources.torch_memory.replay import decimate, replay

DATA = Path(__file__).resolve().parents[1] / "data" / "memory"
SNAPSHOT = DATA / "medium_128_inference_memory_snapshot.pickle.gz"


def read_raw() -> dict:
    with gzip.open(SNAPSHOT, "rb") as f:
        return tm.PlainDataUnpickler(f).load()


def replicated(data: dict, times: int) -> dict:
    """The trace ``times`` over, each copy later by the trace's span (all its allocations are
    freed inside the trace, so each copy replays like the first)."""
    trace = data["device_traces"][0]
    span = trace[-1]["time_us"] - trace[0]["time_us"] + 1
    data["device_traces"][0] = [
        dict(e, time_us=e["time_us"] + k * span) for k in range(times) for e in trace
    ]
    return data


def page_of(profile: Profile) -> tuple[str, dict, dict, dict]:
    """The page, its header, its flame data and its memory columns."""
    import base64
    import re

    page = render_html(profile, metric="peak-bytes")
    header, payload = extract_data(page)
    body = re.search(r'<script id="aiflame-memory"[^>]*>(.*?)</script>', page, re.S)
    assert body is not None
    memory = unpack_memory(header["memory"], base64.b64decode(body.group(1)))
    return page, header, unpack(header, payload), memory


def live_by_events(data: dict) -> tuple[list[int], np.ndarray]:
    """Independent replay of the raw trace: the index (in the trace) of each event that
    changes memory, and the bytes live right after it. Starts from the snapshot's end state
    (its active blocks) and undoes the trace; frees are paired with allocations by address."""
    trace = data["device_traces"][0]
    at_end = sum(
        b["requested_size"]
        for s in data["segments"]
        for b in s["blocks"]
        if b["state"] == "active_allocated"
    )
    size_at: dict[int, int] = {}
    idx, delta = [], []
    for i, e in enumerate(trace):
        if e["action"] == "alloc":
            size_at[e["addr"]] = e["size"]
            idx.append(i)
            delta.append(e["size"])
        elif e["action"] == "free_completed":
            idx.append(i)
            delta.append(-size_at.pop(e["addr"], e["size"]))
    steps = np.cumsum(delta)
    return idx, steps - steps[-1] + at_end


@pytest.fixture(scope="module")
def real() -> tuple[dict, Profile]:
    data = read_raw()
    return data, tm.build_profile(read_raw(), resolve_classes=False)


def test_every_point_of_the_real_snapshot_sums_to_the_replayed_live_bytes(real):
    data, profile = real
    _, header, _, mem = page_of(profile)
    _, expected = live_by_events(data)
    assert header["memory"]["points"] == len(expected) == 2560  # nothing decimated
    assert mem["live"].tolist() == expected.tolist()
    m = len(mem["time"])
    sums = np.array([mem["size"][(mem["alloc"] <= k) & (mem["free"] > k)].sum() for k in range(m)])
    assert sums.tolist() == expected.tolist()
    assert header["memory"]["peakBytes"] == expected.max() == profile.meta["peak_bytes"]


def test_the_peak_point_gives_the_importers_peak_flame_graph(real):
    _, profile = real
    _, header, flame, mem = page_of(profile)
    p = header["memory"]["peakIndex"]
    live = (mem["alloc"] <= p) & (mem["free"] > p)
    col = np.bincount(mem["node"][live], weights=mem["size"][live], minlength=header["nodes"])
    peak = flame["self"][profile.type_index("peak-bytes")]
    assert np.array_equal(col, peak)  # node by node, the same bytes as the peak-bytes view


def test_decimated_timeline_is_exact_at_every_point_and_range():
    data = replicated(read_raw(), 2)  # 5,120 points: decimated to about 4,096
    _, expected = live_by_events(data)
    r = replay(data["device_traces"][0], data["segments"])
    keep = decimate(len(r.time_us), r.live, r.peak_point, tm.TIMELINE_POINTS)
    assert len(keep) < len(expected)
    profile = tm.build_profile(data, resolve_classes=False)
    mem = page_of(profile)[3]
    assert mem["live"].tolist() == expected[keep].tolist()
    a, f, s = mem["alloc"], mem["free"], mem["size"]
    for k in range(len(keep)):
        assert s[(a <= k) & (f > k)].sum() == expected[keep[k]], k
    # Ranges of points j..k: every allocation live at some event between them, brute force
    # over the allocations and events of the replay.
    rng = np.random.default_rng(7)
    alive_from = r.alloc_point
    alive_to = np.where(r.free_point < 0, np.iinfo(np.int64).max, r.free_point)
    for j, k in sorted(rng.integers(0, len(keep), size=(40, 2)).tolist()):
        j, k = min(j, k), max(j, k)
        lo, hi = keep[j], keep[k]
        want = r.size[(alive_from <= hi) & (alive_to > lo)].sum()
        assert s[(a <= k) & (f > j)].sum() == want, (j, k)


def test_page_stays_small_when_the_trace_grows_tenfold(real):
    _, profile = real
    small = len(page_of(profile)[0])
    big_profile = tm.build_profile(replicated(read_raw(), 10), resolve_classes=False)
    page, header, _, mem = page_of(big_profile)
    assert header["memory"]["allocations"] == 10 * 1280 + 223
    assert len(mem["time"]) <= tm.TIMELINE_POINTS + 3
    assert len(page) < 1.5 * small, (len(page), small)


def frame(name: str, filename: str = "/x/m.py", line: int = 1) -> dict:
    return {"name": name, "filename": filename, "line": line}


def event(action: str, addr: int, size: int, t: int, frames=()) -> dict:
    return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t,
            "frames": list(frames)}  # fmt: skip


def test_allocation_with_no_value_of_its_own_is_kept_for_earlier_moments(tmp_path):
    """Freed before the peak, allocated before recording: no peak, alloc or reserved bytes,
    yet live at the first point; its stack must be in the page for the chart to show it."""
    trace = [
        event("alloc", 1000, 512, 1, [frame("a")]),
        event("free_completed", 9000, 100, 2, [frame("gone_early")]),
        event("alloc", 2000, 1024, 3, [frame("b")]),
        event("free_completed", 1000, 512, 4, [frame("a")]),
    ]
    seg = {"device": 0, "address": 1000, "total_size": 4096, "stream": 0, "blocks": [
        {"address": 2000, "size": 1024, "requested_size": 1024, "state": "active_allocated",
         "frames": [frame("b")]}]}  # fmt: skip
    path = tmp_path / "s.pickle"
    path.write_bytes(pickle.dumps({"segments": [seg], "device_traces": [trace]}, protocol=4))
    profile = tm.load(Input(str(path)), resolve_classes=False)
    assert profile.meta["peak_bytes"] == 1536  # after the third event, without it
    _, _, flame, mem = page_of(profile)
    assert mem["live"].tolist() == [612, 512, 1536, 1024]  # after each event
    names = [flame["strings"][flame["frame_name"][f]] for f in flame["frame"][1:]]
    assert tm.FREED_ONLY in names  # kept, though every metric gives it 0
    node = 1 + names.index("gone_early (/x/m.py:1)")
    (row,) = np.nonzero(mem["node"] == node)[0]
    assert (mem["alloc"][row], mem["free"][row], mem["size"][row]) == (0, 1, 100)
    assert all(v[node] == 0 for v in flame["self"])


def test_other_profiles_have_no_chart():
    from aiflame.model import ProfileBuilder, SampleType

    b = ProfileBuilder([SampleType("samples", "count")])
    b.add(b.stack([b.frame("main")]), [3.0])
    page = render_html(b.build())
    assert "memory" not in extract_data(page)[0]
    assert '<script id="aiflame-memory" type="application/octet-stream"></script>' in page
