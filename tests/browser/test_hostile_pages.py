"""Pages of hostile profiles in headless Chromium: a stack 40,000 frames deep (beyond an
int16 depth) opens and zooms; names with bidirectional and control characters are shown
spelled out, so that one cannot pose as another."""

from __future__ import annotations

from aiflame.model import ProfileBuilder
from aiflame.render.html import render_html

try:
    from flamepage import FlamePage
except ImportError:  # no selenium: the driver fixture skips, or fails when it is required
    FlamePage = None  # type: ignore[assignment, misc]

DEPTH = 40_000


def test_a_stack_deeper_than_int16_opens_and_zooms(driver, tmp_path):
    b = ProfileBuilder()
    deep = [b.frame("main")] + [b.frame(f"f{i % 7}") for i in range(DEPTH - 2)]
    deep.append(b.frame("leaf"))
    b.add(b.stack(deep), 5)
    b.add(b.stack([b.frame("main"), b.frame("shallow")]), 3)
    page = FlamePage(driver, render_html(b.build()), tmp_path / "deep.html")
    leaf = page.find("leaf")
    depth = page.js("return aiflame.app.tree.depth[arguments[0]];", leaf)
    assert depth == DEPTH  # the root "all" is depth 0
    page.click(page.find("shallow"))
    assert page.crumbs()[-1] == "shallow"
    assert page.alerts() == []


def test_bidi_and_control_characters_are_spelled_out(driver, tmp_path):
    b = ProfileBuilder()
    main = b.frame("main")
    b.add(b.stack([main, b.frame("gnp\u202eexe.")]), 3)  # would display as "gnpexe." reversed
    b.add(b.stack([main, b.frame("title\x1b]0;x\x07")]), 2)
    page = FlamePage(driver, render_html(b.build()), tmp_path / "bidi.html")
    node = page.find("gnp<U+202E>exe.")
    page.hover(*page.centre(node))
    assert page.text("tooltip").splitlines()[0] == "gnp<U+202E>exe."
    assert page.find("title<U+001B>]0;x<U+0007>") >= 0
    names = page.js("return aiflame.app.tree.strings || null;")
    if names is not None:
        assert not any("\u202e" in s or "\x1b" in s for s in names)
