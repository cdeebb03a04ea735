"""The static SVG flame graph in headless Chromium: legible labels, click to zoom, Reset
Zoom, search with the matched share, the details line: what FlameGraph's SVGs do."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from aiflame.cli.main import main

DATA = Path(__file__).parents[1] / "data"
PERF = DATA / "speedscope" / "stackcollapse" / "perf-vertx-stacks-01-collapsed-all.txt.gz"
INNER = 1180.0

FRAMES = """
return aiflameSvg.frames.map((f) => ({
  name: f.name, depth: f.depth, hidden: f.g.classList.contains('hide'),
  parent: f.g.classList.contains('parent'),
  x: +f.rect.getAttribute('x'), w: +f.rect.getAttribute('width'),
  fill: f.rect.getAttribute('fill'),
  text: f.text ? f.text.textContent : '',
  textWidth: f.text && f.text.textContent ? f.text.getComputedTextLength() : 0,
  fontSize: f.text ? parseFloat(getComputedStyle(f.text).fontSize) : 0,
}));
"""


@pytest.fixture
def graph(driver, tmp_path):
    out = tmp_path / "vertx.svg"
    assert main(["flamegraph", str(PERF), "-o", str(out)]) == 0
    driver.get(out.resolve().as_uri())
    assert driver.execute_script("return document.documentElement.tagName") == "svg"
    assert driver.execute_script("return aiflameSvg.frames.length") > 300
    yield driver
    errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors


def within(inner: dict, outer: dict) -> bool:
    left, right = outer["x"] - 1e-3, outer["x"] + outer["w"] + 1e-3
    return inner["x"] >= left and inner["x"] + inner["w"] <= right


def frames(driver) -> list[dict]:
    return driver.execute_script(FRAMES)


def element(driver, index: int):
    return driver.find_elements(By.CSS_SELECTOR, "#frames > g")[index].find_element(
        By.TAG_NAME, "rect"
    )


def test_labels_are_legible_and_fit_their_frame(graph):
    shown = [f for f in frames(graph) if f["text"]]
    assert len(shown) > 100
    for f in shown:
        assert f["fontSize"] >= 12
        assert f["textWidth"] <= f["w"] - 2, f  # inside the box, with its 3 px margin
    colours = {f["fill"] for f in frames(graph)}
    assert len(colours) > 20  # by kind and name, not one flat colour


def test_click_zooms_into_the_frame_and_reset_zoom_restores(graph):
    before = frames(graph)

    # a frame of a fifth of the width or less with the largest subtree
    def subtree(t: dict) -> int:
        return sum(f["depth"] > t["depth"] and within(f, t) for f in before)

    narrow = [i for i, f in enumerate(before) if 20 < f["w"] < INNER / 5]
    target = max(narrow, key=lambda i: subtree(before[i]))
    assert subtree(before[target]) > 10
    ActionChains(graph).move_to_element(element(graph, target)).perform()
    assert graph.find_element(By.ID, "details").text.startswith(before[target]["name"] + " (")
    ActionChains(graph).move_to_element(element(graph, target)).click().perform()
    after = frames(graph)
    assert after[target]["w"] == pytest.approx(INNER, abs=0.01)
    assert graph.find_element(By.ID, "unzoom").is_displayed()
    t = before[target]
    for b, a in zip(before, after, strict=True):
        if b is t:
            assert not a["hidden"] and not a["parent"]
        elif b["depth"] > t["depth"] and within(b, t):  # the subtree, scaled to the full width
            assert not a["hidden"]
            assert a["w"] == pytest.approx(b["w"] * INNER / t["w"], rel=1e-3, abs=1e-3)
        elif b["depth"] < t["depth"] and within(t, b):
            assert a["parent"] and a["w"] == pytest.approx(INNER)  # ancestors, faded
        else:
            assert a["hidden"]
    grown = [a for b, a in zip(before, after, strict=True) if len(a["text"]) > len(b["text"])]
    assert grown, "labels are redrawn for the new widths"
    for a in after:
        if a["text"] and not a["hidden"]:
            assert a["textWidth"] <= a["w"] - 2
    graph.find_element(By.ID, "unzoom").click()
    restored = frames(graph)
    assert [(f["x"], f["w"], f["hidden"]) for f in restored] == [
        (f["x"], f["w"], f["hidden"]) for f in before
    ]
    assert not graph.find_element(By.ID, "unzoom").is_displayed()


def test_search_highlights_and_gives_the_matched_share(graph):
    before = frames(graph)
    graph.execute_script("window.prompt = () => 'Interpreter';")
    ActionChains(graph).key_down(Keys.CONTROL).send_keys("f").key_up(Keys.CONTROL).perform()
    after = frames(graph)
    hits = [i for i, f in enumerate(before) if "Interpreter" in f["name"]]
    assert hits and all(after[i]["fill"] == "rgb(230,0,230)" for i in hits)
    assert all(
        a["fill"] == b["fill"]
        for i, (a, b) in enumerate(zip(after, before, strict=True))
        if i not in hits
    )
    # the outermost matches' share of the whole (nested matches counted once)
    spans = sorted((before[i]["x"], before[i]["x"] + before[i]["w"]) for i in hits)
    covered, end = 0.0, float("-inf")
    for s, e in spans:
        if e > end:
            covered += e - max(s, end)
            end = e
    expected = f"Matched: {100 * covered / INNER:.1f}%"
    assert graph.find_element(By.ID, "matched").text == expected
    ActionChains(graph).send_keys(Keys.ESCAPE).perform()
    assert [f["fill"] for f in frames(graph)] == [f["fill"] for f in before]
    assert graph.find_element(By.ID, "matched").text == ""


def test_the_script_cuts_labels_as_the_python_side(graph):
    # Zooming relabels frames in the browser: the same rules as the labels written by
    # render/svg.py, so a label does not change its shape when the view does.
    from aiflame.render.svg import elide

    names = [
        "void dpsk::ep::internode::combine<__nv_bfloat16, 16, 24>(int*, void*)",
        "forward (torch/nn/modules/linear.py:125)",
        "Qwen2DecoderLayer_10",
        "Memcpy DtoH (Device -> Pinned)",
        "at::native::vectorized_elementwise_kernel",
    ]
    cases = [(n, w) for n in names for w in range(0, len(n) + 2)]
    got = graph.execute_script(
        "return arguments[0].map((c) => elide(c[0], c[1]));", [list(c) for c in cases]
    )
    assert got == [elide(n, w) for n, w in cases]


CLOVERLEAF = DATA / "nsys" / "cloverleaf" / "perlmutter-cloverleaf-cuda.sqlite"
LABEL_NAMES = [
    "clover::par_ranged1d_kernel<update_halo_kernel::[lambda(int) (instance 13)]>",
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>,"
    " std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)",
    "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<"
    "at::native::(anonymous namespace)::masked_fill_kernel(at::TensorIterator&, c10::Scalar"
    " const&)::{lambda()#1}::operator()() const::{lambda(bool, bool)#1}>(at::TensorIteratorBase"
    "&, at::native::(anonymous namespace)::masked_fill_kernel(at::TensorIterator&, c10::Scalar"
    " const&)::{lambda()#1}::operator()() const::{lambda(bool, bool)#1} const&)::"
    "{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast)",
    "void dpsk::ep::internode::combine<__nv_bfloat16, 16, 24>(int*, void*)",
    "forward (torch/nn/modules/linear.py:125)",
    "Qwen2DecoderLayer_10",
    "Memcpy DtoH (Device -> Pinned)",
    "std::vector<int>",
    "a<b",
]


def test_labels_are_the_same_in_the_page_the_svg_and_python(driver, tmp_path):
    """The three label fitters (format.js, the SVG's script, render/svg.py) agree, and a
    CloverLeaf lambda kernel keeps its function and instance where the middle cut of the
    whole name left `clove…1)]>`."""
    from aiflame.render.svg import elide

    page, svg = tmp_path / "g.html", tmp_path / "g.svg"
    assert main(["flamegraph", str(CLOVERLEAF), "-o", str(page)]) == 0
    assert main(["flamegraph", str(CLOVERLEAF), "-o", str(svg), "--kernel-names", "short"]) == 0
    rooms = list(range(3, 90, 3))
    driver.get(page.resolve().as_uri())
    in_page = driver.execute_async_script(
        """const [names, rooms, done] = arguments;
        const fit = (n) => rooms.map((r) => aiflame.fitLabel(n, r));
        aiflame.ready.then(() => done(names.map(fit)));""",
        LABEL_NAMES, rooms,
    )  # fmt: skip
    driver.get(svg.resolve().as_uri())
    in_svg = driver.execute_script(
        "return arguments[0].map((n) => arguments[1].map((r) => elide(n, r)));", LABEL_NAMES, rooms
    )
    in_python = [[elide(n, r) for r in rooms] for n in LABEL_NAMES]
    assert in_svg == in_python
    assert in_page == in_python
    for labels in in_python:
        assert all(len(label) <= r for label, r in zip(labels, rooms, strict=True))
    clover = dict(zip(rooms, in_python[0], strict=True))
    assert clover[45] == "par_ranged1d_kernel<update_halo_kernel::λ13>"
    assert clover[30] == "par_r…ernel<update_h…nel::λ13>"
    assert clover[21] == "par…nel<update…::λ13>"
    # the SVG's own labels of CloverLeaf's lambda kernels: the function that defines the
    # lambda and its instance, never the namespace's first letters and the name's last
    drawn = [f for f in frames(driver) if "lambda" in f["name"] and len(f["text"]) >= 6]
    assert len(drawn) >= 5
    for f in drawn:
        instance = re.search(r"\(instance (\d+)\)", f["name"]).group(1)
        assert f["text"].endswith(instance) and not f["text"].startswith("clove…"), f
        defined_in = f["name"].split("<", 1)[1].split("::[lambda", 1)[0]
        assert defined_in.startswith(f["text"].split("…")[0].split("<")[-1]), f
