"""GPU PC samples in the page: the instruction/source-line palette, stall reasons coloured
by class with their legend, zoom from a kernel into its lines and instructions, the
sandwich of a source line, the gpu-samples metric; on real recordings (HPCToolkit's CUDA
recording, its database with the per-instruction samples of its measurement directory,
and a real Nsight Compute report)."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiflame.render.html import render_html
from aiflame.sources import load

try:
    from flamepage import FlamePage
except ImportError:  # no selenium: the driver fixture skips, or fails when it is required
    FlamePage = None  # type: ignore[assignment, misc]

DATA = Path(__file__).parents[1] / "data" / "gpu_instructions"
HPCTOOLKIT = DATA / "hpctoolkit" / "loops-cuda-nvidiapc-t.d"
NCU = DATA / "nsight_compute" / "indexspaces-bb-a40.ncu-rep.gz"


@pytest.fixture
def hpc_page(driver, tmp_path) -> FlamePage:
    return FlamePage(driver, render_html(load(str(HPCTOOLKIT))), tmp_path / "hpc.html")


@pytest.fixture
def ncu_page(driver, tmp_path) -> FlamePage:
    pytest.importorskip("ncu_report")
    return FlamePage(driver, render_html(load(str(NCU))), tmp_path / "ncu.html")


def rgb(text: str) -> list[int]:
    return [int(x) for x in text.removeprefix("rgb(").removesuffix(")").split(",")]


def test_palette_and_stall_legend_on_a_real_recording(hpc_page):
    page = hpc_page
    legend = page.text("stalls")
    assert legend.startswith("GPU stall reasons:")
    for cls in ("memory latency", "short dependency", "front end", "issued"):
        assert cls in legend
    assert "STL_GMEM" in legend and "STL_IDEP" in legend
    kinds = page.text("kinds")
    assert "GPU source line" in kinds and "GPU kernel" in kinds
    assert "GPU stall reason" not in kinds  # the classes stand for it
    # what is painted: aqua for a source line, the class colour for a stall reason
    line = page.find("loops.cu:16")
    aqua = rgb(page.js("return aiflame.kindColor('gpu-source', arguments[0]);", "loops.cu:16"))
    assert page.pixel(*page.centre(line)) == aqua
    stall = page.find("STL_GMEM")
    red = rgb(page.js("return aiflame.stallColor('memory latency', 'STL_GMEM');"))
    assert page.pixel(*page.centre(stall)) == red
    assert red[0] > 200 and red[1] < 120  # memory latency reads red
    page.hover(*page.centre(stall))
    assert "stall class memory latency" in page.text("tooltip")
    metric = page.driver.find_element("id", "metric").text
    assert "gpu-samples (count, 1 = 4,096 cycles)" in metric and "gpu-time" in metric


def test_zoom_from_an_hpctoolkit_kernel_into_its_lines_and_instructions(hpc_page):
    page = hpc_page
    kernel = page.find("kernmain()")
    page.click(kernel)
    assert page.js("return aiflame.app.view.zoom;") == kernel
    k = page.rect(kernel)
    loop = page.find("loop at loops.cu:21")
    line = page.find("loops.cu:16")  # func2, inlined at line 31 in the loop
    r = page.rect(line)
    assert page.rect(loop)["y"] > r["y"]  # the loop below the inlined line
    assert r["w"] > 0.7 * k["w"]  # 2,212,974,592 of 2,691,330,048 weighted samples
    # its hottest instruction: green, above it, named with nvdisasm's text
    inst = page.js(
        "const t = aiflame.app.tree, a = aiflame.app; let best = -1, v = -1;"
        "for (let i = 0; i < t.n; i++) if (a.frames.kindSlug(t.frame[i]) === 'gpu-instruction'"
        " && t.parent[i] === arguments[0] && t.totals(0)[i] > v) { v = t.totals(0)[i]; best = i; }"
        "return best;",
        line,
    )
    assert inst > 0
    ri = page.rect(inst)
    assert ri is not None and ri["y"] < r["y"]
    name = page.js("return aiflame.app.tree.nameOf(arguments[0]);", inst)
    assert name.split(" ")[0] in ("DFMA", "STL.64") and " @ +0x" in name
    green = rgb(page.js("return aiflame.kindColor('gpu-instruction', arguments[0]);", name))
    assert page.pixel(ri["x"] + ri["w"] / 2, ri["y"] + ri["h"] / 2) == green
    assert green[1] > green[0] and green[1] > green[2]
    # and the stall reason on top of it
    page.hover(ri["x"] + ri["w"] / 2, ri["y"] - ri["h"] / 2)
    assert "STL_" in page.text("tooltip")
    # the host stack stays above as the zoom's breadcrumb
    assert page.crumbs()[:3] == ["all", "main", "kernmain"]


def test_zoom_from_a_kernel_into_its_lines_and_instructions(ncu_page):
    page = ncu_page
    kernel = page.find(
        page.js(
            "const t = aiflame.app.tree; for (let i = 0; i < t.n; i++) "
            "if (t.nameOf(i).startsWith('julia_bb_4477')) return t.nameOf(i);"
        )
    )
    page.click(kernel)
    assert page.js("return aiflame.app.view.zoom;") == kernel
    k = page.rect(kernel)
    line = page.find("IndexSpaces.jl:1404")
    r = page.rect(line)
    assert r is not None and r["w"] > 0.2 * k["w"]  # the hot line of the int8 MMA loop
    # the hottest instruction of that line, drawn green, above the line
    inst = page.js(
        "const t = aiflame.app.tree, a = aiflame.app; let best = -1, v = -1;"
        "for (let i = 0; i < t.n; i++) if (a.frames.kindSlug(t.frame[i]) === 'gpu-instruction'"
        " && t.parent[i] === arguments[0] && t.totals(0)[i] > v) { v = t.totals(0)[i]; best = i; }"
        "return best;",
        line,
    )
    assert inst > 0
    ri = page.rect(inst)
    assert ri is not None and ri["y"] < r["y"]
    name = page.js("return aiflame.app.tree.nameOf(arguments[0]);", inst)
    green = rgb(page.js("return aiflame.kindColor('gpu-instruction', arguments[0]);", name))
    assert page.pixel(ri["x"] + ri["w"] / 2, ri["y"] + ri["h"] / 2) == green
    assert green[1] > green[0] and green[1] > green[2]
    assert " @ +0x" in name
    # the other kernel is outside the zoomed subtree
    other = page.js(
        "const t = aiflame.app.tree; for (let i = 0; i < t.n; i++) "
        "if (t.nameOf(i).startsWith('julia__5_6739')) return i; return -1;"
    )
    assert page.rect(other) is None


def test_sandwich_of_a_source_line_shows_its_instructions(ncu_page):
    page = ncu_page
    page.menu(page.find("IndexSpaces.jl:1404"), "sandwich")
    assert page.text("sw-title") == "IndexSpaces.jl:1404"
    kinds = page.js(
        "const t = aiflame.app.swCallees.tree, a = aiflame.app; const out = new Set();"
        "for (let i = 0; i < t.n; i++)"
        "  if (t.depth[i] === 1) out.add(a.frames.kindSlug(t.frame[i]));"
        "return [...out];"
    )
    assert kinds == ["gpu-instruction"]
    callers = page.js(
        "const t = aiflame.app.swCallers.tree; const out = [];"
        "for (let i = 0; i < t.n; i++) if (t.depth[i] === 1) out.push(t.nameOf(i)); return out;"
    )
    assert len(callers) == 1 and callers[0].startswith("julia_bb_4477")
