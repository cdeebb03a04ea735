"""Flame graphs of a real transformer trace (Qwen1.5-0.5B, 24 decoder layers) in headless
Chromium: the first screen (the launcher chain folded into one row, the model above it),
natural order of module instances, labels cut in the middle, breadcrumbs; and the
differential page of the same model on H100 and MI300X: its Top functions table."""

from __future__ import annotations

import re

import pytest

from aiflame.cli.main import main
from aiflame.model.strings import natural_key

try:
    from flamepage import FlamePage
except ImportError:  # no selenium: the driver fixture skips, or fails when it is required
    FlamePage = None  # type: ignore[assignment, misc]

QWEN = "kineto/tracelens/{}/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
MODEL = "Qwen2Model > forward (transformers/models/qwen2/modeling_qwen2.py:503)"
LAYER = "Qwen2DecoderLayer > forward (transformers/models/qwen2/modeling_qwen2.py:243)"
LAUNCHER = [  # the trace's chain from the interpreter to the model, as the page names it
    "<module> (<string>:1)",
    "spawn_main (multiprocessing/spawn.py:122)",
    "_main (multiprocessing/spawn.py:135)",
    "_bootstrap (multiprocessing/process.py:314)",
    "run (multiprocessing/process.py:108)",
    "_profile_model (moca/application/profile/profile_model.py:37)",
    "profile (moca/library/pipeline/profile_model_pipeline.py:102)",
    "wrapper (moca/shared/maybe/_decorator.py:90)",
    "profile_function (moca/library/profiling/profile.py:53)",
    "run_torch_profiler (moca/library/profiling/profile.py:34)",
    "ProfilerStep#6",  # the step's annotation encloses the step it times
    "run_action (moca/library/model_hub/entry_point.py:106)",
    "run_on_input (moca/library/model_hub/huggingface/model/adapters/text_base_model.py:28)",
]


def write(args: list[str]) -> None:
    assert main(args) == 0


@pytest.fixture
def flame(driver, data_dir, tmp_path):
    def opener(*options: str) -> FlamePage:
        out = tmp_path / "qwen.html"
        write(["flamegraph", str(data_dir / QWEN.format("h100")), "-o", str(out), *options])
        return FlamePage(driver, out.read_text(encoding="utf-8"), out)

    return opener


def row_of(page: FlamePage, node: int) -> int:
    """Row of a drawn node counted from the root's (0), in the flame (root at the bottom)."""
    root, r = page.rect(0), page.rect(node)
    assert r is not None, f"node {node} is not drawn"
    return round((root["y"] - r["y"]) / 18)


def test_first_screen_folds_the_launcher_and_shows_the_model(flame):
    page = flame()
    assert page.console_errors() == []
    head = page.find(LAUNCHER[0])
    assert row_of(page, head) == 1
    label = page.js("return aiflame.app.view.labelText(arguments[0]);", head)
    assert label.startswith("▸ 13 frames: <module> (<string>:1) › … › run_on_input")
    for name in LAUNCHER[1:]:  # folded into the head's row: not drawn on their own
        assert page.rect(page.find(name)) is None
    model = page.find(MODEL)
    assert row_of(page, model) == 2
    layer = page.find(LAYER)
    assert row_of(page, layer) == 3  # the 24 layers, one tower, right above the model
    width = page.js("return aiflame.app.view.cssWidth;")
    assert page.rect(layer)["w"] > 0.6 * width
    # Everything fits on the first screen: the deepest frame is drawn inside the box.
    box = page.js("return document.getElementById('flame-box').getBoundingClientRect().height;")
    assert page.js("return aiflame.app.view.rows;") * 18 < box
    # The fold's tooltip lists its frames; a click unfolds them.
    page.hover(*page.centre(head))
    tip = page.text("tooltip")
    assert tip.startswith("13 frames of one call chain, folded")
    assert "spawn_main (multiprocessing/spawn.py:122)" in tip
    page.click(head)
    assert page.zoom() == 0
    assert [row_of(page, page.find(n)) for n in LAUNCHER] == list(range(1, 14))
    assert row_of(page, page.find(MODEL)) == 14


def test_breadcrumbs_show_the_path_and_zoom_out(flame):
    page = flame()
    layer = page.find(LAYER)
    page.click(layer)
    assert page.zoom() == layer
    crumbs = page.crumbs()
    assert len(crumbs) == 1 + len(LAUNCHER) + 2
    assert crumbs[0] == "all" and crumbs[1] == "<module> (<string>:1)"
    # Long names are cut: the function stays whole, its file keeps its name and line.
    assert all(len(c) <= 48 for c in crumbs)
    assert crumbs[-1] == "Qwen2DecoderLayer > forward (…ling_qwen2.py:243)"
    assert crumbs[len(LAUNCHER)] == "run_on_input (…l/adapters/text_base_model.py:28)"
    titles = page.js("return [...document.querySelectorAll('#crumbs .crumb')].map((b) => b.title);")
    assert (
        titles[1 : 1 + len(LAUNCHER)] == LAUNCHER and titles[-1] == LAYER
    )  # the whole name on hover
    page.driver.find_elements("css selector", "#crumbs .crumb")[-2].click()
    assert page.zoom() == page.find(MODEL)
    page.driver.find_elements("css selector", "#crumbs .crumb")[0].click()
    assert page.zoom() == 0


def test_module_instances_in_natural_order_with_labels_cut_in_the_middle(flame):
    page = flame("--module-instances")
    nodes = page.js(
        """const t = aiflame.app.tree, out = [];
        for (let i = 0; i < t.n; i++) {
          const m = /^nn\\.Module: Qwen2DecoderLayer_(\\d+)$/.exec(t.nameOf(i));
          if (m) out.push([Number(m[1]), i]);
        }
        return out;"""
    )
    assert sorted(n for n, _ in nodes) == list(range(24))
    by_x = sorted(nodes, key=lambda ni: page.rect(ni[1])["x"])
    assert [n for n, _ in by_x] == list(range(24))  # 0, 1, 2, ... 10, not 0, 1, 10, 11
    labels = [page.js("return aiflame.app.view.labelText(arguments[0]);", i) for _, i in by_x]
    # Each box is a few characters wide: the label keeps both ends, "nn.M…ayer_17".
    cut = [x for x in labels if "…" in x]
    assert cut, labels
    for (n, _), text in zip(by_x, labels, strict=True):
        if "…" in text:
            assert text.endswith((f"…{n}", f"_{n}")), text  # the whole number


# -- the differential page ------------------------------------------------------------------


@pytest.fixture
def diff_page(driver, data_dir, tmp_path) -> FlamePage:
    out = tmp_path / "diff.html"
    base, test = (str(data_dir / QWEN.format(d)) for d in ("h100", "mi300"))
    write(["diff", base, test, "-o", str(out)])
    page = FlamePage(driver, out.read_text(encoding="utf-8"), out)
    page.tab("top")
    return page


def table(page: FlamePage) -> tuple[list[str], list[list[str]]]:
    head = page.js(
        "return [...document.querySelectorAll('#top-table thead th')].map((t) => t.textContent);"
    )
    rows = page.js(
        """return [...document.querySelectorAll('#top-body tr')].map((tr) =>
             [tr.querySelector('td.fn > span:nth-child(2)').textContent,
              ...[...tr.children].slice(1).map((td) => td.textContent)]);"""
    )
    return head, rows


def folded_callers(page: FlamePage) -> dict[str, str]:
    """The rows that have callers folded into them: name -> the badge's tooltip."""
    return page.js(
        """const out = {};
        for (const tr of document.querySelectorAll('#top-body tr')) {
          const badge = tr.querySelector('.wrappers');
          if (badge) out[tr.querySelector('td.fn > span:nth-child(2)').textContent] = badge.title;
        }
        return out;"""
    )


def duration_ns(text: str) -> float:
    m = re.fullmatch(r"([+-]?[\d.]+) (ns|us|ms|s)", text)
    assert m, text
    return float(m.group(1)) * {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}[m.group(2)]


def test_diff_page_names_each_input(diff_page):
    assert diff_page.text("title") == "H100 vs MI300X (Qwen_Qwen1.5-0.5B-Chat__1016005)"
    assert diff_page.driver.title == diff_page.text("title")
    assert diff_page.text("total").startswith("base (H100) 45.647 ms → test (MI300X) 43.063 ms")


def test_diff_table_has_base_test_delta_columns_sorted_by_change(diff_page):
    head, rows = table(diff_page)
    assert [h.split(" ▼")[0] for h in head] == [
        "Function",
        "Base: H100",
        "Test: MI300X",
        "Delta",
        "Delta %",
    ]
    assert len(rows) > 20
    for _name, base, test, delta, pct in rows:
        b, t, d = duration_ns(base), duration_ns(test), duration_ns(delta)
        assert d == pytest.approx(t - b, abs=2e3)  # values shown to 3 decimals
        if b:
            assert float(pct.rstrip("%")) == pytest.approx(100 * (t - b) / b, abs=0.1)
    # First by size of the change, growth or shrinkage.
    sizes = [abs(duration_ns(r[3])) for r in rows]
    assert sizes == sorted(sizes, reverse=True)
    # Linear > forward and linear change exactly as the one op they call: folded into it.
    assert rows[0][0] == "aten::linear"
    assert rows[0][3].startswith("+")

    def click(column: str) -> list[list[str]]:
        diff_page.driver.find_element("css selector", f'#top-table th[data-key="{column}"]').click()
        return table(diff_page)[1]

    grew = click("delta")  # the largest growth first
    deltas = [duration_ns(r[3]) for r in grew]
    assert deltas == sorted(deltas, reverse=True) and deltas[0] > 0 > deltas[-1]
    shrank = click("delta")  # then the largest shrinkage
    deltas = [duration_ns(r[3]) for r in shrank]
    assert deltas == sorted(deltas) and deltas[0] < 0
    pct = click("pct")
    sizes = [abs(float(r[4].rstrip("%"))) for r in pct if r[4] not in ("new", "-")]
    assert sizes == sorted(sizes, reverse=True)
    base = click("base")
    values = [duration_ns(r[1]) for r in base]
    assert values == sorted(values, reverse=True)
    names = [r[0] for r in click("name")]
    assert names == sorted(names, key=natural_key) and len(names) == len(base)


def test_diff_table_folds_wrappers_into_the_function_that_changed(diff_page):
    """The 13 frames from the process's `<module>` down to the model's forward change by
    exactly the model's change: one row, not 14 identical ones before the first op."""
    _head, rows = table(diff_page)
    names = [r[0] for r in rows]
    model = "Qwen2Model > forward (transformers/models/qwen2/modeling_qwen2.py)"
    assert model in names
    wrappers = ("<module> (<string>)", "spawn_main (multiprocessing/spawn.py)", "ProfilerStep#6")
    for wrapper in wrappers:
        assert wrapper not in names
        assert wrapper in folded_callers(diff_page)[model].splitlines()
    assert len(folded_callers(diff_page)[model].splitlines()) == 1 + 13
    # A layer's change differs from the model's (the final norm and the embedding): a row.
    assert "Qwen2DecoderLayer > forward (transformers/models/qwen2/modeling_qwen2.py)" in names
    note = diff_page.text("top-note")
    assert re.fullmatch(r"\d+ functions; \d+ callers whose .* folded into it \(show them\)", note)
    folded = int(note.split("; ")[1].split()[0])
    assert len(rows) + folded == int(diff_page.js("return aiflame.app.topDiffRows().length;"))
    diff_page.driver.find_element("id", "top-unfold").click()
    _head, every = table(diff_page)
    assert len(every) == len(rows) + folded
    same = [r for r in every if r[3] == rows[names.index(model)][3]]
    assert {r[0] for r in same} >= {model, "<module> (<string>)", "ProfilerStep#6"}
    assert diff_page.text("top-note").endswith("(fold them)")


def test_focus_on_a_layer_shows_its_parts_once(flame):
    page = flame()
    page.menu(page.find(LAYER), "focus")
    children = page.js(
        """const t = aiflame.app.tree, out = [];
        for (let c = 1; c < t.end[0]; c = t.end[c]) out.push(t.nameOf(c));
        return out;"""
    )
    # Its attention, MLP, two norms and the residual adds: not 24 + 24 + 48 instances.
    assert len(children) < 10
    assert "Qwen2Attention > forward (transformers/models/qwen2/modeling_qwen2.py:150)" in children
    assert "Qwen2MLP > forward (transformers/models/qwen2/modeling_qwen2.py:56)" in children
    assert not [c for c in children if c.startswith("nn.Module: ")]


def test_diff_labels_stay_legible_on_the_deepest_colours(driver, data_dir, tmp_path):
    # The largest change is the deepest red or blue: black text on rgb(0,0,255) could not
    # be read, and that box is the one the page is for. MI300X -> H100: the op that grew
    # most the other way round shrinks most.
    out = tmp_path / "shrink.html"
    base, test = (str(data_dir / QWEN.format(d)) for d in ("mi300", "h100"))
    write(["diff", base, test, "-o", str(out)])
    page = FlamePage(driver, out.read_text(encoding="utf-8"), out)
    inks = page.js(
        """const app = aiflame.app, d = app.deltas(app.tree), out = [];
           for (let i = 1; i < app.tree.n; i++) {
             const r = aiflame.test.rect(i);
             if (!r || r.w < 80 || !app.view.labelText(i)) continue;
             const v = app.view, b = v.canvas.getBoundingClientRect();
             const px = v.ctx.getImageData(Math.round(r.x - b.left), Math.round(r.y - b.top),
                                           Math.round(r.w), Math.round(r.h)).data;
             let light = 0, dark = 0;  // text pixels: far from the box colour
             for (let k = 0; k < px.length; k += 4) {
               const s = px[k] + px[k + 1] + px[k + 2];
               if (s > 720) light++; else if (s < 60) dark++;
             }
             out.push([app.colorOf(app.tree, i), Math.abs(d.delta[i]) / d.max, light, dark]);
           }
           return out;"""
    )
    deep = [x for x in inks if x[1] > 0.6 and x[0].endswith(",255)")]  # deep blue
    assert deep and ["rgb(0,0,255)", 1] in [x[:2] for x in deep]
    for color, _, light, dark in deep:
        assert light > 20 and dark == 0, color  # white text drawn on it
        assert page.js("return aiflame.labelInk(arguments[0]);", color) == "#fff"
    red = [x for x in inks if x[1] > 0.4 and x[0].startswith("rgb(255,")]
    assert red and all(x[3] > 20 and x[2] == 0 for x in red)  # dark text on red, as before
    assert page.js("return aiflame.labelInk('rgb(255,0,0)');") == "#111"  # 4.7:1 on red
