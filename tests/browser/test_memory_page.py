"""The GPU memory page in headless Chromium, on the real snapshot: the memory-over-time chart
is drawn with its peak labelled; a click on it shows the flame graph of what was live at that
instant, a drag what was live during a range, "Back to the peak" the peak again. Expected
values come from a replay of the raw trace written here, not from aiflame's. Also: hostile
names stay text, and the page asks the network for nothing."""

from __future__ import annotations

import gzip
import pickle
from functools import cached_property
from pathlib import Path

import numpy as np
import pytest

from aiflame.cli.main import main
from aiflame.sources.torch_memory.importer import PlainDataUnpickler

try:
    from flamepage import FlamePage
except ImportError:  # no selenium: the driver fixture skips, or fails when it is required
    FlamePage = None  # type: ignore[assignment, misc]

DATA = Path(__file__).resolve().parents[1] / "data" / "memory"
SNAPSHOT = DATA / "medium_128_inference_memory_snapshot.pickle.gz"


def raw_snapshot() -> dict:
    with gzip.open(SNAPSHOT, "rb") as f:
        return PlainDataUnpickler(f).load()


class Replay:
    """The raw trace replayed: one point per event that changes memory (alloc,
    free_completed), the bytes live after it, and each allocation's lifetime in points
    (blocks live at the snapshot but allocated before the trace: live throughout)."""

    def __init__(self, data: dict) -> None:
        trace = data["device_traces"][0]
        active = [
            b for s in data["segments"] for b in s["blocks"] if b["state"] == "active_allocated"
        ]
        self.time_us: list[int] = []
        self.lifetimes: list[tuple[int, float, int]] = []  # (from point, to point, bytes)
        opened: dict[int, tuple[int, int]] = {}  # addr -> (point, bytes)
        for e in trace:
            if e["action"] not in ("alloc", "free_completed"):
                continue
            point = len(self.time_us)
            self.time_us.append(e["time_us"])
            if e["action"] == "alloc":
                opened[e["addr"]] = (point, e["size"])
            elif e["addr"] in opened:
                start, size = opened.pop(e["addr"])
                self.lifetimes.append((start, point, size))
            else:  # allocated before the trace began
                self.lifetimes.append((-1, point, e["size"]))
        end = float("inf")
        self.lifetimes += [(start, end, size) for start, size in opened.values()]
        live_at_end = {addr for addr in opened}
        for b in active:
            if b["address"] not in live_at_end:
                self.lifetimes.append((-1, end, b["requested_size"]))

    def live(self, first: int, last: int | None = None) -> int:
        """Bytes of the allocations live at some point of first..last (an instant if
        ``last`` is None)."""
        last = first if last is None else last
        a, f, size = self.columns
        return int(size[(a <= last) & (f > first)].sum())

    @cached_property
    def columns(self) -> tuple[np.ndarray, ...]:
        return tuple(np.array(c, dtype=np.float64) for c in zip(*self.lifetimes, strict=True))

    def peak(self) -> tuple[int, int]:
        values = [self.live(k) for k in range(len(self.time_us))]
        best = max(values)
        return values.index(best), best


@pytest.fixture(scope="session")
def replayed() -> Replay:
    return Replay(raw_snapshot())


def memory_page(driver, tmp_path: Path, snapshot: Path, *args: str) -> FlamePage:
    out = tmp_path / "memory.html"
    assert main(["memory", str(snapshot), "-o", str(out), *args]) == 0
    page = FlamePage(driver, out.read_text(encoding="utf-8"), out)
    state = page.run_async(
        "aiflame.memoryReady.then((c) => done(c ? 'ok' : 'none'), (e) => done(String(e)));"
    )
    assert state == "ok", state
    return page


@pytest.fixture
def page(driver, tmp_path) -> FlamePage:
    return memory_page(driver, tmp_path, SNAPSHOT)


def shown_total(page: FlamePage) -> float:
    """The root of the flame graph now drawn, in the selected column."""
    return page.js("const a = aiflame.app; return a.tree.totals(a.metric)[0];")


def drawn(page: FlamePage) -> tuple[list[float], list[float]]:
    """Page x and y of every point of the chart."""
    xy = page.js(
        "const c = aiflame.memory, b = c.svg.getBoundingClientRect();"
        "return [Array.from(c.px, (x) => x + b.left), Array.from(c.py, (y) => y + b.top)];"
    )
    return xy[0], xy[1]


def drag(page: FlamePage, x0: float, x1: float, y: float) -> None:
    a = page._pointer()
    a.pointer_action.move_to_location(int(x0), int(y)).pointer_down()
    a.pointer_action.move_to_location(int((x0 + x1) / 2), int(y))
    a.pointer_action.move_to_location(int(x1), int(y)).pointer_up()
    a.perform()


def test_chart_is_drawn_with_the_peak_labelled(page, replayed):
    m = page.js("return aiflame.memory.m;")
    assert m == len(replayed.time_us) == 2560  # every point of this trace is drawn
    live_path = page.js("return document.getElementById('mem-live').getAttribute('d');")
    assert live_path.count("H") == m - 1  # one step per point
    box = page.js("return document.getElementById('mem-live').getBBox().width;")
    assert box > 1000  # spans the plot (window 1400 px wide)
    assert page.visible("memory") and page.visible("mem-legend")
    peak_k, peak_bytes = replayed.peak()
    assert peak_bytes == 1_736_962_048
    t = (replayed.time_us[peak_k] - replayed.time_us[0]) / 1000
    label = page.text("mem-peak-label")
    assert label == f"peak 1.62 GiB ({peak_bytes:,} bytes) at +{t:.3f} ms"
    # The marker sits on the highest point of the line, at the peak's time.
    peak_xy = page.js(
        "const c = document.getElementById('mem-peak');"
        "return [+c.getAttribute('cx'), +c.getAttribute('cy')];"
    )
    ys = page.js("return Array.from(aiflame.memory.py);")
    assert peak_xy[1] == min(ys)
    assert peak_xy[0] == pytest.approx(page.js("return aiflame.memory.px[arguments[0]];", peak_k))
    # What the page computes for each instant, from the data it carries: the replay's.
    sums = page.js(
        "const c = aiflame.memory;"
        "return Array.from({length: c.m}, (_, k) => c.liveColumn(k, k).reduce((a, b) => a + b));"
    )
    assert sums == [replayed.live(k) for k in range(m)]
    # The flame graph starts at the peak.
    assert shown_total(page) == peak_bytes
    assert page.text("mem-status").endswith(f"({peak_bytes:,} bytes)")
    # Self vs total and the reading legend are on the page, above the fold.
    legend = page.text("mem-legend")
    assert "widest leaf is the allocation site" in legend and "no self bytes is a path" in legend
    assert "self" in legend and "total" in legend
    bottom = "return document.getElementById('mem-legend').getBoundingClientRect().bottom;"
    assert page.js(bottom) < page.js("return window.innerHeight;") / 2
    # Another metric shown: the status line no longer claims the peak view.
    page.js(
        "const s = document.getElementById('metric'); s.value = '1';"
        "s.dispatchEvent(new Event('change'));"
    )
    assert page.text("mem-status").startswith("Click the chart for what was live")
    assert page.console_errors() == []


def test_click_before_the_peak_shows_what_was_live_then(page, replayed):
    peak_k, peak_bytes = replayed.peak()
    xs, ys = drawn(page)
    # Several points share a pixel here (2,560 points, 1,300 px): the page picks the one
    # nearest in x, then in y. Whichever it picks, it must be at the click and the graph
    # must show what the replay says was live at it.
    target = peak_k // 2
    x, y = round(xs[target]), round(ys[target])
    page.click_at(x, y)
    sel = page.js("return aiflame.memory.sel;")
    k = sel["from"]
    assert sel["to"] == k and abs(xs[k] - x) <= 1 and k < peak_k
    expected = replayed.live(k)
    assert expected != peak_bytes  # a different moment, a different flame graph
    assert shown_total(page) == expected
    t = (replayed.time_us[k] - replayed.time_us[0]) / 1000
    status = f"live at +{t:.3f} ms: {expected / 2**30:.2f} GiB ({expected:,} bytes)"
    assert page.text("mem-status").endswith(status)
    metric = "return document.getElementById('metric').selectedOptions[0].textContent;"
    assert page.js(metric) == f"live at +{t:.3f} ms"
    # The graph itself was redrawn: the root box spans the canvas, its tooltip says so.
    root = page.rect(0)
    assert root is not None and root["w"] > 1000
    page.hover(root["x"] + 5, root["y"] + root["h"] / 2)
    assert f"{expected / 2**30:.2f} GiB" in page.text("tooltip")
    # Back to the peak.
    page.button("mem-clear")
    assert page.js("return aiflame.memory.sel;") is None
    assert shown_total(page) == peak_bytes
    assert page.js("return aiflame.app.baseTree === aiflame.memory.peakTree;")
    assert page.js(metric) == "peak-bytes (bytes)"


def test_drag_shows_everything_live_during_the_range(page, replayed):
    xs, ys = drawn(page)
    x0, x1 = round(xs[300]), round(xs[900])
    drag(page, x0, x1, ys[300] + 20)
    sel = page.js("return aiflame.memory.sel;")
    inside = [k for k, x in enumerate(xs) if x0 - 0.5 <= x <= x1 + 0.5]
    assert abs(sel["from"] - inside[0]) <= 1 and abs(sel["to"] - inside[-1]) <= 1
    expected = replayed.live(sel["from"], sel["to"])
    most = max(replayed.live(i) for i in range(sel["from"], sel["to"] + 1))
    assert expected > most  # more than was live at any one instant of the range
    assert shown_total(page) == expected
    assert f"({expected:,} bytes)" in page.text("mem-status")


def test_a_selection_keeps_the_users_filters(page, replayed):
    peak_k, _ = replayed.peak()
    page.menu(1, "hide")  # the root's first child
    assert page.js("return aiflame.app.filters.length;") == 1
    xs, ys = drawn(page)
    page.click_at(round(xs[peak_k // 2]), round(ys[peak_k // 2]))
    k = page.js("return aiflame.memory.sel.from;")
    assert page.js("return aiflame.app.filters.length;") == 1
    assert page.js("return aiflame.app.tree !== aiflame.app.baseTree;")  # filtered
    # Hiding a frame moves its bytes to its parent: the total is unchanged.
    assert shown_total(page) == replayed.live(k)


def test_hover_shows_time_and_bytes_under_a_crosshair(page, replayed):
    peak_k, peak_bytes = replayed.peak()
    raw = raw_snapshot()
    # This trace allocates no segment: reserved is the snapshot's segments all along.
    assert not any(e["action"].startswith("segment") for e in raw["device_traces"][0])
    reserved = sum(s["total_size"] for s in raw["segments"])
    xs, ys = drawn(page)
    target = peak_k // 3
    x, y = round(xs[target]), round(ys[target])
    page.hover(x, y)
    k = page.js("return aiflame.memory.hoverK;")
    assert abs(xs[k] - x) <= 1  # the point under the pointer (several share a pixel)
    assert page.visible("mem-tip")
    t = (replayed.time_us[k] - replayed.time_us[0]) / 1000
    live = replayed.live(k)
    rows = page.text("mem-tip").splitlines()
    assert rows[:3] == [
        f"time +{t:.3f} ms",
        f"allocated {live / 2**30:.2f} GiB ({live:,} bytes)",
        f"reserved {reserved / 2**30:.2f} GiB ({reserved:,} bytes)",
    ]
    tip = page.js("return document.getElementById('mem-tip').getBoundingClientRect().toJSON();")
    assert 0 < tip["left"] - x <= 30 and 0 < tip["top"] - y <= 30  # beside the pointer
    # The crosshair: a vertical line at the point's time, a horizontal one at its bytes.
    lines = page.js(
        "return Array.from(document.querySelectorAll('#mem-hover line'),"
        " (l) => ['x1', 'x2', 'y1', 'y2'].map((a) => +l.getAttribute(a)));"
    )
    px, py = page.js(
        "const c = aiflame.memory; return [c.px[arguments[0]], c.py[arguments[0]]];", k
    )
    assert lines[0][:2] == [px, px] and lines[1][2:] == [py, py]
    # A click there selects the point the tooltip described.
    page.click_at(x, y)
    assert page.js("return aiflame.memory.sel;") == {"from": k, "to": k}
    assert shown_total(page) == live
    # At the peak the tooltip says so; off the chart it goes.
    page.hover(round(xs[peak_k]), round(ys[peak_k]))
    assert page.js("return aiflame.memory.hoverK;") == peak_k
    text = page.text("mem-tip")
    assert f"({peak_bytes:,} bytes)" in text and "the peak" in text
    root = page.rect(0)
    page.hover(root["x"] + 5, root["y"] + root["h"] / 2)
    assert not page.visible("mem-tip")
    assert page.js("return document.querySelectorAll('#mem-hover *').length;") == 0
    assert page.console_errors() == []


EVIL = "</script><script>alert(1)</script><img src=x onerror=alert(2)>"
EVIL_FILE = '/x/"><svg onload=alert(3)>.py'


def test_hostile_names_stay_text_and_nothing_is_fetched(driver, tmp_path):
    def ev(action: str, addr: int, size: int, t: int, name: str) -> dict:
        frames = [{"name": name, "filename": EVIL_FILE, "line": 7}]
        return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t,
                "frames": frames}  # fmt: skip

    trace = [
        ev("alloc", 4096, 1000, 10, EVIL),
        ev("alloc", 8192, 3000, 20, "fine"),
        ev("free_completed", 4096, 1000, 30, EVIL),
        ev("free_completed", 8192, 3000, 40, "fine"),
    ]
    snap = tmp_path / "evil.pickle"
    snap.write_bytes(pickle.dumps({"segments": [], "device_traces": [trace]}, protocol=4))
    page = memory_page(driver, tmp_path, snap, "--title", EVIL)
    assert page.requests() == [page.url]
    xs, ys = drawn(page)  # four points far apart
    page.click_at(round(xs[1]), round(ys[1]))  # both allocations live
    assert shown_total(page) == 4000
    node = page.find(f"{EVIL} ({EVIL_FILE}:7)")  # a Python frame: its file and line too
    assert page.js("return aiflame.app.tree.self[aiflame.app.metric][arguments[0]];", node) == 1000
    page.hover(*page.centre(node))
    assert page.text("tooltip").startswith(EVIL)
    page.click_at(round(xs[2]), round(ys[2]))  # the evil one freed
    assert shown_total(page) == 3000
    assert page.alerts() == []
    assert page.js("return document.querySelectorAll('img, svg svg, script[src]').length;") == 0
    assert EVIL in page.driver.title
    assert page.requests() == []
    assert page.console_errors() == []


def test_page_without_memory_data_has_no_chart(driver, tmp_path, data_dir):
    out = tmp_path / "plain.html"
    src = data_dir / "html/perf-iperf-stacks-pidtid-01-collapsed-all.txt"
    assert main(["flamegraph", str(src), "-o", str(out)]) == 0
    page = FlamePage(driver, out.read_text(encoding="utf-8"), out)
    assert page.run_async("aiflame.memoryReady.then((c) => done(c === null));") is True
    assert not page.visible("memory")


def test_chart_of_a_profiler_trace_with_memory_events(driver, tmp_path):
    """profile_memory=True: the GPU's Total Allocated over time, its peak labelled, and a
    click on the chart shows the trace's allocations live then, charged to operators."""
    import gzip
    import json

    trace = DATA.parent / "kineto/tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"
    page = memory_page(driver, tmp_path, trace)
    assert page.visible("memory")
    assert page.text("mem-device") == "(cuda:0)"
    assert page.text("mem-peak-label").startswith("peak 96.61 MiB (101,305,344 bytes) at +")
    with gzip.open(trace) as f:
        events = json.load(f)["traceEvents"]
    cuda = sorted(
        (e for e in events if e.get("name") == "[memory]" and e["args"]["Device Type"] == 1),
        key=lambda e: e["ts"],
    )
    xs, ys = drawn(page)
    page.click_at(round(xs[len(xs) // 3]), round(ys[len(xs) // 3]))
    k = page.js("return aiflame.memory.sel.from;")
    live: dict[int, int] = {}
    for e in cuda[: k + 1]:
        if e["args"]["Bytes"] > 0:
            live[e["args"]["Addr"]] = e["args"]["Bytes"]
        else:
            live.pop(e["args"]["Addr"], None)
    assert shown_total(page) == sum(live.values()) > 0
