"""aiflame in Jupyter: a real notebook, executed by nbclient in an IPython kernel, calls
``aiflame.show()`` on a trace and leaves an ``aiflame.load()`` profile as a cell's value;
its outputs are the page ``aiflame flamegraph`` writes, in sandboxed frames. Loaded in
headless Chromium inside a host page with clashing globals and ids (as a notebook would
be), both flame graphs draw, each in its own frame, and neither touches the host."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

import aiflame
from aiflame.cli.main import main
from aiflame.render.html import extract_data

nbformat = pytest.importorskip("nbformat", reason="pip install -e '.[test]' (nbformat)")
nbclient = pytest.importorskip("nbclient", reason="pip install -e '.[test]' (nbclient)")
pytest.importorskip("ipykernel", reason="pip install -e '.[test]' (ipykernel)")

ROOT = Path(__file__).resolve().parents[2]
BERT = ROOT / "examples" / "bert-small-h100.pt.trace.json.gz"
FOLDED = ROOT / "tests" / "data" / "html" / "perf-iperf-stacks-pidtid-01-collapsed-all.txt"
# The kernel imports the aiflame under test, wherever the test run found it.
PACKAGE_ROOT = Path(aiflame.__file__).resolve().parents[1]

FRAME = re.compile(
    r'<iframe class="aiflame-flamegraph" title="([^"]*)" sandbox="allow-scripts" srcdoc="([^"]*)"'
)


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """The notebook after a run in a real kernel."""
    from nbformat.v4 import new_code_cell, new_notebook

    cells = [
        f"import sys\nsys.path.insert(0, {str(PACKAGE_ROOT)!r})\nimport aiflame\naiflame.__file__",
        f"aiflame.show({str(BERT)!r}, height=520)",
        f"p = aiflame.load({str(FOLDED)!r})\np",
        "aiflame.show('no/such/trace.json')",
    ]
    nb = new_notebook(cells=[new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    where = tmp_path_factory.mktemp("notebook")
    client = nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", allow_errors=True,
        resources={"metadata": {"path": str(where)}},
    )  # fmt: skip
    client.execute()
    return nb


def html_output(cell) -> str:  # type: ignore[no-untyped-def]
    found = [o["data"]["text/html"] for o in cell.outputs if "text/html" in o.get("data", {})]
    assert len(found) == 1, cell.outputs
    return found[0]


def framed_page(output: str) -> tuple[str, str]:
    m = FRAME.search(output)
    assert m, output[:300]
    return html.unescape(m.group(1)), html.unescape(m.group(2))


def test_show_and_a_profile_value_display_the_flame_graph_page(executed, tmp_path):
    first = executed.cells[0].outputs[0]["data"]["text/plain"]
    assert str(PACKAGE_ROOT) in first  # the kernel ran the aiflame under test
    # show(): a display output holding exactly the page the command line writes.
    title, page = framed_page(html_output(executed.cells[1]))
    out = tmp_path / "bert.html"
    assert main(["flamegraph", str(BERT), "-o", str(out)]) == 0
    assert page == out.read_text(encoding="utf-8")
    assert title == "bert-small-h100.pt.trace.json.gz"
    assert "height: 520px" in html_output(executed.cells[1])
    header, _ = extract_data(page)
    assert "gpu-time" in [t["name"] for t in header["types"]]
    # A profile as a cell's value: its flame graph, and a short text form beside it.
    result = executed.cells[2].outputs[0]
    assert result["output_type"] == "execute_result"
    _, page2 = framed_page(html_output(executed.cells[2]))
    out2 = tmp_path / "folded.html"
    assert main(["flamegraph", str(FOLDED), "-o", str(out2)]) == 0
    assert page2 == out2.read_text(encoding="utf-8")
    text = result["data"]["text/plain"]
    assert text.startswith("<Profile from ") and "samples of samples (count)" in text
    assert len(text) < 300
    # A missing file: the one-line error, as the command line says it.
    error = executed.cells[3].outputs[0]
    assert error["output_type"] == "error" and error["ename"] == "InputError"
    assert "no/such/trace.json" in error["evalue"]


HOST = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>notebook</title>
<script>window.aiflame = "the notebook's own"; window.App = 42;</script>
<style>canvas { display: none; }</style></head>
<body><div id="flame">a notebook element with the page's ids</div><div id="tooltip"></div>
{outputs}
</body></html>"""


def test_both_pages_draw_in_their_own_frames_in_chromium(executed, driver, tmp_path):
    from flamepage import console_errors, network_requests
    from selenium.webdriver.common.by import By

    outputs = [html_output(executed.cells[i]) for i in (1, 2)]
    host = tmp_path / "notebook.html"
    host.write_text(HOST.replace("{outputs}", "\n".join(outputs)), encoding="utf-8")
    driver.get_log("performance")
    driver.get(host.resolve().as_uri())
    frames = driver.find_elements(By.CSS_SELECTOR, "iframe.aiflame-flamegraph")
    assert len(frames) == 2
    # The host cannot reach into the frames (opaque origin), nor they into it.
    assert driver.execute_script("return document.querySelector('iframe').contentDocument;") is None
    titles = []
    for frame in frames:
        driver.execute_script("arguments[0].scrollIntoView();", frame)
        driver.switch_to.frame(frame)
        state = driver.execute_async_script(
            "const done = arguments[0];"
            "aiflame.ready.then(() => done('ok'), (e) => done(String(e)));"
        )
        assert state == "ok"
        titles.append(driver.execute_script("return document.getElementById('title').textContent;"))
        # The root box spans the canvas and is painted in its colour.
        root = driver.execute_script("return aiflame.test.rect(0);")
        width = driver.execute_script("return aiflame.app.view.canvas.clientWidth;")
        assert root["w"] > 0.9 * width > 500
        x, y = root["x"] + root["w"] / 2, root["y"] + root["h"] / 2
        drawn = driver.execute_script(
            "return aiflame.test.pixel(arguments[0], arguments[1]);", x, y
        )
        colour = driver.execute_script("return aiflame.test.color(0);")
        assert colour == "rgb({},{},{})".format(*drawn)
        assert driver.execute_script("return window.parent === window;") is False
        driver.switch_to.default_content()
    # each page titled by its input (the trace by its device and file stem)
    assert titles == ["Flame graph of H100 (bert-small-h100)",
                      f"Flame graph of {FOLDED.name.removesuffix('.txt')}"]  # fmt: skip
    # The host's globals and elements are untouched.
    assert driver.execute_script("return [window.aiflame, window.App];") == [
        "the notebook's own",
        42,
    ]
    text = driver.execute_script("return document.getElementById('flame').textContent;")
    assert text == "a notebook element with the page's ids"
    assert network_requests(driver) == [host.resolve().as_uri()]
    assert console_errors(driver) == []


def test_a_profile_from_the_sources_api_displays_too(tmp_path):
    """A profile read without aiflame.load (so aiflame.notebook is not imported) is shown as
    its flame graph all the same: the package root registers the display with IPython."""
    from nbformat.v4 import new_code_cell, new_notebook

    cells = [
        f"import sys\nsys.path.insert(0, {str(PACKAGE_ROOT)!r})\n"
        f"from aiflame.sources import load\np = load({str(FOLDED)!r})\n"
        "'aiflame.notebook' in sys.modules",
        "p",
    ]
    nb = new_notebook(cells=[new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3").execute()
    assert nb.cells[0].outputs[0]["data"]["text/plain"] == "False"
    _, page = framed_page(html_output(nb.cells[1]))
    out = tmp_path / "folded.html"
    assert main(["flamegraph", str(FOLDED), "-o", str(out)]) == 0
    assert page == out.read_text(encoding="utf-8")
