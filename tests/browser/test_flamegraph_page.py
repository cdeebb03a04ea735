"""The HTML flame graph in headless Chromium: hover, zoom, search, views, sandwich, table,
metric switch, differential colours, hostile names, and no network access."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from aiflame.model import FrameKind, Profile, ProfileBuilder, SampleType
from aiflame.render.html import SCRIPTS, render_html
from aiflame.sources.folded import importer as folded
from aiflame.sources.inputs import Input

try:
    from flamepage import FlamePage
except ImportError:  # no selenium: the driver fixture skips, or fails when it is required
    FlamePage = None  # type: ignore[assignment, misc]

K = FrameKind
APP = {  # stack -> samples; total 100
    "main;run;compute;matmul": 40,
    "main;run;compute;relu": 10,
    "main;run;io;read": 20,
    "main;run;io;read;memcpy": 5,
    "main;idle": 25,
}
APP_KINDS = {
    "main": K.NATIVE,
    "run": K.PYTHON,
    "compute": K.CPP,
    "matmul": K.GPU_KERNEL,
    "relu": K.GPU_KERNEL,
    "io": K.PYTHON,
    "read": K.KERNEL,
    "memcpy": K.NATIVE,
    "idle": K.RUNTIME,
}
DATA = Path(__file__).parents[1] / "data"
RECURSIVE = {"main;a;b;a;c": 10, "main;a;d": 5, "main;x;a": 3}


def profile_of(stacks: dict, types=(("samples", "count"),), kinds=None, meta=None) -> Profile:
    b = ProfileBuilder([SampleType(n, u) for n, u in types])
    for stack, values in stacks.items():
        ids = [
            b.frame(
                name,
                (kinds or {}).get(name, K.NATIVE),
                file="src/x.c" if name == "read" else "",
                line=42 if name == "read" else 0,
            )
            for name in stack.split(";")
        ]
        b.add(b.stack(ids), values)
    p = b.build()
    p.meta.update(meta or {})
    return p


@pytest.fixture
def open_page(driver, tmp_path):
    def opener(profile: Profile, name: str = "page.html", **kw) -> FlamePage:
        return FlamePage(driver, render_html(profile, **kw), tmp_path / name)

    return opener


@pytest.fixture
def app(open_page) -> FlamePage:
    return open_page(profile_of(APP, kinds=APP_KINDS), title="App profile")


# -- opening ------------------------------------------------------------------------------


def test_real_profile_opens_offline_with_no_request(open_page, data_dir):
    src = data_dir / "html/perf-iperf-stacks-pidtid-01-collapsed-all.txt"
    page = open_page(folded.load(Input(str(src))))
    assert page.requests() == [page.url]
    assert page.console_errors() == []
    assert page.text("total") == "Total: 200 samples"
    x, y = page.centre(0)
    assert page.pixel(x, y) != [251, 251, 248]  # the root is painted, not background
    node = page.find("entry_SYSCALL_64_fastpath_[k]")
    page.hover(*page.centre(node))
    tip = page.text("tooltip")
    assert tip.startswith("entry_SYSCALL_64_fastpath\n")  # drawn without the _[k] annotation
    assert "Linux kernel" in tip


def test_perf_script_kernel_frames_are_drawn_as_kernel(open_page, data_dir, tmp_path):
    """Real ``perf script`` text, no option: vmlinux frames orange, libc's red."""
    from aiflame.sources import load

    profile = load(str(data_dir / "perf/flamegraph/inputs/perf-dd-stacks-01.txt.gz"))
    page = open_page(profile)
    node = page.find("sys_write")
    page.hover(*page.centre(node))
    assert "kind Linux kernel" in page.text("tooltip")
    page.hover(*page.centre(page.find("write")))
    assert "kind C (native)" in page.text("tooltip")
    # format.js's palette: kernel orange (230, 130..190, 30..60), C red (215.., 70..140, 60..)
    r, g, b = page.pixel(*page.centre(node))[:3]
    assert r >= 230 and 130 <= g < 190 and 30 <= b < 60, (r, g, b)
    r, g, b = page.pixel(*page.centre(page.find("write")))[:3]
    assert r >= 215 and 70 <= g < 140 and 60 <= b < 120, (r, g, b)


# -- hover, zoom, views ---------------------------------------------------------------------


def test_hover_shows_name_kind_values_and_location(app):
    app.hover(*app.centre(app.find("read")))
    tip = app.text("tooltip")
    assert tip.splitlines()[0] == "read"
    assert "kind Linux kernel" in tip
    assert "total 25 samples (25.0% of all)" in tip
    assert "self 20 samples (20.0% of all)" in tip
    assert "file src/x.c:42" in tip
    app.hover(5, 5)  # off the canvas
    assert not app.visible("tooltip")


def test_click_zooms_with_breadcrumbs_and_resets(app):
    compute = app.find("compute")
    app.click(compute)
    assert app.zoom() == compute
    assert app.crumbs() == ["all", "main", "run", "compute"]
    width = app.js("return aiflame.app.view.cssWidth;")
    assert app.rect(compute)["w"] == pytest.approx(width)
    assert app.rect(app.find("matmul"))["w"] == pytest.approx(width * 40 / 50)
    assert app.rect(app.find("read")) is None  # outside the zoomed subtree
    app.button("reset")
    assert app.zoom() == 0
    assert app.crumbs() == ["all"]
    app.click(compute)
    app.escape()
    assert app.zoom() == 0
    app.click(compute)
    app.driver.find_elements("css selector", "#crumbs .crumb")[2].click()  # "run"
    assert app.zoom() == app.find("run")


def test_icicle_toggle_moves_the_root_to_the_top(app, open_page):
    flame_root_y = app.rect(0)["y"]
    leaf_y = app.rect(app.find("memcpy"))["y"]
    assert flame_root_y > leaf_y  # flame: root at the bottom
    assert app.text("invert") == "Icicle view"
    app.button("invert")
    assert app.rect(0)["y"] < app.rect(app.find("memcpy"))["y"]
    assert app.text("invert") == "Flame view"
    icicle = open_page(profile_of(APP), name="icicle.html", inverted=True)
    assert icicle.rect(0)["y"] < icicle.rect(icicle.find("memcpy"))["y"]


# -- search and filters ---------------------------------------------------------------------


def test_search_highlights_and_counts_nested_matches_once(app):
    app.search("^(relu|read)$")
    assert app.text("matched") == "matched: 35.0% (35 samples)"
    x, y = app.centre(app.find("relu"))
    assert app.pixel(x, y) == [230, 0, 230]
    x, y = app.centre(app.find("matmul"))
    assert app.pixel(x, y) != [230, 0, 230]
    app.search("run|compute")  # compute (50) is inside run (75): 75%, not 125%
    assert app.text("matched") == "matched: 75.0% (75 samples)"
    app.search("(")  # not a regex: literal search, no error
    assert "literal" in app.text("search-status")
    app.search("")
    assert not app.visible("matched")


KERNELS = {  # stack -> samples; total 100
    "forward;softmax;cunn_SoftMaxForward": 30,
    "forward;attention;softmax_warp_forward": 20,
    "forward;all_reduce;ncclDevKernel_AllReduce_Sum_f32_RING_LL": 10,
    "forward;mm;ampere_sgemm_128x64_nn": 40,
}


def test_search_ignores_case_as_editors_do(open_page, driver, tmp_path):
    """A query in lower case ignores case; one with a capital matches case; "(?i)" (which
    JavaScript's RegExp rejects) and the "Aa" button ignore it always."""
    page = open_page(profile_of(KERNELS))
    # "softmax" frames (20 + 30), "cunn_SoftMaxForward" (30), "softmax_warp_forward" (20)
    page.search("softmax")
    assert page.text("matched") == "matched: 50.0% (50 samples)"
    page.search("(?i)softmax")
    assert page.text("matched") == "matched: 50.0% (50 samples)"
    assert page.text("search-status") == ""
    page.search("SoftMax")  # a capital letter: case matters
    assert page.text("matched") == "matched: 30.0% (30 samples)"
    page.search("SOFTMAX")
    assert page.text("matched") == "matched: 0.0% (0 samples)"
    page.button("search-case")  # ignore case: the same query matches
    assert page.js("return document.getElementById('search-case').getAttribute('aria-pressed')")
    assert page.text("matched") == "matched: 50.0% (50 samples)"
    page.button("search-case")
    assert page.text("matched") == "matched: 0.0% (0 samples)"
    # deep links: a lower-case search, "(?i)", and case=i
    for fragment, search, ignore, share in (
        ("search=nccl", "nccl", "false", "10.0%"),
        ("search=%28%3Fi%29NCCL", "(?i)NCCL", "false", "10.0%"),
        ("search=NCCL&case=i", "NCCL", "true", "10.0%"),
        ("search=NCCL", "NCCL", "false", "0.0%"),
    ):
        driver.get(page.url + "#" + fragment)
        applied = page.run_async(  # the hashchange handler has run: the box shows the link's
            "const [search, ignore] = arguments; let n = 0; const t = setInterval(() => {"
            " const box = document.getElementById('search').value;"
            " const pressed = document.getElementById('search-case').getAttribute('aria-pressed');"
            " if ((box === search && pressed === ignore) || ++n > 100) {"
            "  clearInterval(t); done(box === search && pressed === ignore); } }, 20);",
            search,
            ignore,
        )
        assert applied, fragment
        assert page.text("matched").startswith(f"matched: {share}"), fragment
    assert page.console_errors() == []


def test_hide_and_focus_from_the_context_menu(app):
    app.menu(app.find("io"), "hide")
    assert app.js("return aiflame.test.find('io');") == -1
    read = app.find("read")
    parent = "return aiflame.app.tree.nameOf(aiflame.app.tree.parent[arguments[0]]);"
    assert app.js(parent, read) == "run"
    assert app.text("filters").startswith("hidden:")
    assert "io" in app.text("filters")
    assert app.js("return aiflame.app.tree.totals(0)[0];") == 100
    app.driver.find_element("css selector", "#filters .chip button").click()
    assert app.find("io") > 0
    app.menu(app.find("compute"), "focus")
    assert app.js("return aiflame.app.tree.nameOf(0);") == "compute"
    assert app.js("return aiflame.app.tree.totals(0)[0];") == 50
    assert "shown: 50 samples" in app.text("total")
    assert app.crumbs() == ["compute"]


def test_hiding_merges_the_children_that_meet(open_page):
    page = open_page(profile_of({"m;a;x;y": 1, "m;b;x;y": 2, "m;b;x;z": 3, "m;x": 4}))
    page.menu(page.find("a"), "hide")
    page.menu(page.find("b"), "hide")
    nodes = page.js(
        "const t = aiflame.app.tree; return [...Array(t.n).keys()].map("
        "i => [t.depth[i], t.nameOf(i), t.totals(0)[i], t.self[0][i]]);"
    )
    assert nodes == [
        [0, "all", 10, 0],
        [1, "m", 10, 0],
        [2, "x", 10, 4],
        [3, "y", 3, 3],
        [3, "z", 3, 3],
    ]


# -- sandwich and top functions -------------------------------------------------------------


def test_sandwich_merges_callers_and_callees(open_page):
    page = open_page(profile_of(RECURSIVE))
    page.menu(page.find("a"), "sandwich")
    assert page.visible("sw-body")
    assert page.text("sw-title") == "a"
    callers = page.js(
        "const t = aiflame.app.swCallers.tree; return [...Array(t.n).keys()].map("
        "i => [t.depth[i], t.nameOf(i), t.totals(0)[i]]);"
    )
    assert callers == [[0, "a", 18], [1, "main", 15], [1, "x", 3], [2, "main", 3]]
    callees = page.js(
        "const t = aiflame.app.swCallees.tree; return [...Array(t.n).keys()].map("
        "i => [t.depth[i], t.nameOf(i), t.totals(0)[i], t.self[0][i]]);"
    )
    assert callees == [
        [0, "a", 18, 3],
        [1, "b", 10, 0],
        [2, "a", 10, 0],
        [3, "c", 10, 10],
        [1, "d", 5, 5],
    ]
    assert page.text("sw-values") == "total 18 samples (100.0%), self 3 samples (16.7%)"
    # Both halves are drawn and answer the pointer.
    page.hover(*page.centre(1, "swCallees"))
    assert page.text("tooltip").splitlines()[0] == "b"


def _table(page: FlamePage) -> list[list[str]]:
    rows = page.driver.find_elements("css selector", "#top-body tr")
    return [[td.text for td in r.find_elements("css selector", "td")] for r in rows]


def test_top_functions_table_counts_recursion_once_and_sorts(open_page):
    page = open_page(profile_of(RECURSIVE))
    page.tab("top")
    rows = {r[0]: r[1:] for r in _table(page)}
    assert rows["a"] == ["3", "16.7%", "18", "100.0%"]  # total once per stack, not 28
    assert rows["c"] == ["10", "55.6%", "10", "55.6%"]
    assert [r[0] for r in _table(page)][:3] == ["c", "d", "a"]  # by self, descending
    header = page.driver.find_element("css selector", '#top-table th[data-key="name"]')
    header.click()
    assert [r[0] for r in _table(page)] == ["a", "b", "c", "d", "main", "x"]
    header.click()
    assert [r[0] for r in _table(page)] == ["x", "main", "d", "c", "b", "a"]
    page.driver.find_element("css selector", '#top-table th[data-key="total"]').click()
    assert [r[3] for r in _table(page)][:2] == ["18", "18"]
    assert [r[0] for r in _table(page)][2:4] in (["b", "c"], ["c", "b"])
    _table_row = page.driver.find_elements("css selector", "#top-body tr")[0]
    _table_row.click()  # a row opens its sandwich
    assert page.visible("sw-body")


# -- metrics and units ----------------------------------------------------------------------


def test_metric_switch_changes_widths_and_units(open_page):
    stacks = {"main;f": [10, 0], "main;g": [2, 3 * 2**20], "main;h": [0, 2**20]}
    page = open_page(profile_of(stacks, types=(("cpu", "count"), ("alloc", "bytes"))))
    assert page.text("total") == "Total: 12 cpu"
    g = page.find("g")
    width = page.js("return aiflame.app.view.cssWidth;")
    assert page.rect(g)["w"] == pytest.approx(width * 2 / 12)
    assert page.rect(page.find("h")) is None  # no cpu samples: nothing to draw
    select = page.driver.find_element("id", "metric")
    select.find_element("css selector", 'option[value="1"]').click()
    assert page.text("total") == "Total: 4.00 MiB"
    assert page.rect(g)["w"] == pytest.approx(width * 3 / 4)
    page.hover(*page.centre(g))
    assert "total 3.00 MiB (75.0% of all)" in page.text("tooltip")


def test_metrics_without_data_are_not_offered(open_page):
    # A CPU-only recording: gpu-time and kernel-count hold nothing. The page opens on a
    # metric with data even where the profile's default is an empty one.
    types = (("gpu-time", "nanoseconds"), ("kernel-count", "count"))
    types += (("cpu-samples", "count"), ("wall-time", "nanoseconds"))
    stacks = {"main;f": [0, 0, 10, 5e6], "main;g": [0, 0, 3, 1e6]}
    page = open_page(profile_of(stacks, types=types, meta={"default_type": 0}))
    options = page.js(
        "return [...document.querySelectorAll('#metric option')].map(o => o.textContent);"
    )
    assert options == ["cpu-samples (count)", "wall-time (nanoseconds)"]
    assert page.visible("metric-box") and page.text("total") == "Total: 13 cpu-samples"
    # one metric with data: no choice to offer
    one = {stack: values[:3] for stack, values in stacks.items()}
    page = open_page(profile_of(one, types=types[:3]), name="one.html")
    assert not page.visible("metric-box") and page.text("total") == "Total: 13 cpu-samples"
    # a link naming the metric's former name still opens it
    page = open_page(profile_of(stacks, types=types), name="link.html")
    page.driver.get(page.url + "#metric=cpu-time")
    shown = page.run_async(  # applied on hashchange, without a reload
        "aiflame.fragmentApplied.then(() => setTimeout(() =>"
        " done(aiflame.app.types[aiflame.app.metric].name), 100));"
    )
    assert shown == "wall-time"


def test_the_only_metric_is_named_beside_its_total(open_page):
    # A CPU-only PyTorch profiler trace offers wall-time alone: the page showed
    # "Total: 219.373 ms" and nothing said it was the wall time of CPU slices.
    from aiflame.sources import load

    trace = DATA / "kineto" / "dtu_mlops" / "resnet_cpu_profile_memory.json.gz"
    page = open_page(load(str(trace)), name="cpu-only.html")
    assert not page.visible("metric-box")
    assert page.text("total") == "Total wall-time: 219.373 ms"
    # with a choice, the select names it; counts name themselves ("13 cpu-samples")
    stacks = {"main;f": [10, 5e6], "main;g": [3, 1e6]}
    page = open_page(
        profile_of(stacks, types=(("cpu-samples", "count"), ("wall-time", "nanoseconds"))),
        name="two.html",
    )
    assert page.visible("metric-box") and page.text("total") == "Total: 13 cpu-samples"


def test_nanoseconds_are_shown_as_durations(open_page):
    stacks = {"main;step": 1.5e9, "main;io": 2500}
    page = open_page(profile_of(stacks, types=(("wall", "nanoseconds"),)))
    assert page.text("total") == "Total wall: 1.500 s"  # the only metric: named
    page.hover(*page.centre(page.find("step")))
    assert "total 1.500 s" in page.text("tooltip")


# -- differential ---------------------------------------------------------------------------


def test_diff_colours_and_tooltip(open_page):
    stacks = {"main;grow": [10, 30], "main;shrink": [30, 10], "main;same": [20, 20]}
    meta = {"diff": {"base": 0, "test": 1, "normalized": False}}
    page = open_page(profile_of(stacks, types=(("base", "count"), ("test", "count")), meta=meta))
    red = page.pixel(*page.centre(page.find("grow")))
    blue = page.pixel(*page.centre(page.find("shrink")))
    white = page.pixel(*page.centre(page.find("same")))
    assert red[0] == 255 and red[1] < 60 and red[2] < 60
    assert blue[2] == 255 and blue[0] < 60 and blue[1] < 60
    assert white == [255, 255, 255]
    # Widths follow the test values.
    width = page.js("return aiflame.app.view.cssWidth;")
    assert page.rect(page.find("grow"))["w"] == pytest.approx(width * 30 / 60)
    page.hover(*page.centre(page.find("grow")))
    tip = page.text("tooltip")
    assert "total 30 samples (50.0% of all)" in tip
    assert "base 10 samples" in tip and "test 30 samples" in tip
    assert "delta +20 (+200.0%)" in tip
    assert "base 60 samples → test 60 samples (+0.0%)" in page.text("total")
    # The colour by total change: main did not change in total, so it is white.
    select = page.driver.find_element("id", "colormode")
    select.find_element("css selector", 'option[value="diff-total"]').click()
    assert page.pixel(*page.centre(page.find("main"))) == [255, 255, 255]
    assert page.js("return aiflame.test.color(aiflame.test.find('grow'));") == "rgb(255,0,0)"


# -- hostile input --------------------------------------------------------------------------

EVIL_IMG = "<img src=x onerror=alert(1)>"
EVIL_SCRIPT = "</script><script>alert(2)</script>"


def test_hostile_names_are_text_and_run_nothing(open_page):
    stacks = {f"main;{EVIL_IMG}": 3, f"main;{EVIL_SCRIPT};x": 2}
    page = open_page(profile_of(stacks), title=EVIL_SCRIPT + EVIL_IMG, subtitle=EVIL_IMG)
    assert page.alerts() == []
    assert page.js("return document.images.length;") == 0
    assert page.js("return document.scripts.length;") == 3 + len(SCRIPTS)  # data + code
    assert page.js("return document.title;") == EVIL_SCRIPT + EVIL_IMG
    assert page.text("subtitle") == EVIL_IMG
    node = page.find(EVIL_IMG)
    page.hover(*page.centre(node))
    assert page.text("tooltip").splitlines()[0] == EVIL_IMG
    page.click(page.find(EVIL_SCRIPT))
    assert page.crumbs()[-1] == EVIL_SCRIPT
    page.tab("top")
    names = [r[0] for r in _table(page)]
    assert EVIL_IMG in names and EVIL_SCRIPT in names
    page.search(re.escape(EVIL_IMG))
    assert page.alerts() == [] and page.js("return document.images.length;") == 0
