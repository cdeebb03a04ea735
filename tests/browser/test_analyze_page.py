"""The HTML report of aiflame analyze in headless Chromium: charts drawn from a real trace,
the numbers shown equal the JSON, a finding's link lands on the flame graph zoomed to its
stack, no network request, and hostile names stay text."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from aiflame.cli.main import main
from aiflame.render.analyze_html import roofline_data
from aiflame.sources.kineto.names import python_frame

try:
    from flamepage import console_errors, network_requests
    from selenium.webdriver.common.by import By
except ImportError:  # no selenium: the driver fixture skips, or fails when it is required
    By = None  # type: ignore[assignment, misc]

DATA = Path(__file__).resolve().parents[1] / "data"
H100 = DATA / "kineto/tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"
MI300 = DATA / "kineto/tracelens/mi300/gaunernst_bert-small-uncased__1016001.json.gz"
SAXPY = DATA / "nsys/saxpy-mpi-cuda_nsys_perlmutter0.sqlite"
OWL = DATA / "kineto/tracelens/h100/google_owlv2-large-patch14-ensemble__1016001.trimmed.json.gz"
HOSTILE = '</script><img src=x onerror="alert(1)"><b>bold</b>'
UNITS = {"s": 1e6, "ms": 1e3, "us": 1.0, "ns": 1e-3}


def us_of(text: str) -> float:
    """'307.20 us' -> 307.2 (microseconds), as the page formats times."""
    if text == "0":
        return 0.0
    value, unit = text.split()
    return float(value) * UNITS[unit]


def rounding(text: str) -> float:
    """Half a unit of the last digit shown, in microseconds."""
    if text == "0":
        return 0.0
    value, unit = text.split()
    decimals = len(value.partition(".")[2])
    return 0.5 * 10**-decimals * UNITS[unit]


class ReportPage:
    def __init__(self, driver, html: Path) -> None:
        self.driver = driver
        self.url = html.resolve().as_uri()
        driver.get_log("performance")  # drop events of earlier pages
        driver.get_log("browser")
        driver.get(self.url)
        assert driver.execute_script("return window.aiflameReport && window.aiflameReport.ready")

    def js(self, script: str, *args):
        return self.driver.execute_script(script, *args)

    def all(self, css: str):
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def requests(self) -> list[str]:
        return network_requests(self.driver)

    def console_errors(self) -> list[str]:
        return console_errors(self.driver)


@pytest.fixture(scope="module")
def h100(tmp_path_factory) -> tuple[Path, dict]:
    """The H100 trace's report, made once for the tests that only read it."""
    out = tmp_path_factory.mktemp("h100") / "report.html"
    js = out.with_suffix(".json")
    assert main(["analyze", str(H100), "-o", str(out), "--json", str(js)]) == 0
    return out, json.loads(js.read_text())


@pytest.fixture
def report(tmp_path, capsys):
    def make(*inputs: Path, name: str = "report.html") -> tuple[Path, dict]:
        out, js = tmp_path / name, tmp_path / (name + ".json")
        assert main(["analyze", *map(str, inputs), "-o", str(out), "--json", str(js)]) == 0
        capsys.readouterr()
        return out, json.loads(js.read_text())

    return make


def test_real_trace_renders_charts_offline(driver, h100):
    html, data = h100
    page = ReportPage(driver, html)
    rank = data["ranks"][0]
    # Breakdown bar: one part per bucket, widths proportional to the JSON.
    tb = rank["time_breakdown"]
    widths = page.js(
        "return [...document.querySelectorAll('#breakdown-bars .bar > span')]"
        ".map(s => [s.dataset.field, s.getBoundingClientRect().width]);"
    )
    bar = sum(w for _, w in widths)
    for field, w in widths:
        assert w == pytest.approx(bar * tb[field] / tb["total"], abs=1.0)
    # Timeline: layers drawn as paths, the idle gaps marked.
    assert page.all("svg.timeline path.layer.computation")
    assert len(page.all("svg.timeline rect.gap")) == 50  # the longest 50 of 60 gaps
    # Short-kernel histogram and roofline: one point per GEMM shape.
    assert page.all("svg.histogram rect")
    rf = roofline_data(rank)
    assert rf["points"], "the H100 trace has GEMM shapes"
    assert len(page.all("svg.roofline circle.pt")) == len(rf["points"])
    assert len(page.all("svg.roofline path.roof")) == len(
        rf["roofs"] if rf["peak_tb_per_s"] else []
    )
    box = page.js("return document.querySelector('.roofline-box').textContent;")
    assert all(m in box for m in rf["missing"])
    assert page.requests() == [page.url]
    assert page.console_errors() == []


def test_numbers_shown_equal_the_json(driver, h100):
    html, data = h100
    page = ReportPage(driver, html)
    rank = data["ranks"][0]
    cells = page.js(
        "return [...document.querySelectorAll('#breakdown-table td[data-field]')]"
        ".map(td => [td.dataset.field, td.textContent]);"
    )
    assert {f for f, _ in cells} >= {"total", "busy", "idle", "computation", "exposed_memcpy"}
    for field, text in cells:
        assert us_of(text) == pytest.approx(rank["time_breakdown"][field], abs=rounding(text))
    rows = page.js(
        "return [...document.querySelectorAll('table[data-table=kernels] tbody tr')]"
        ".map(tr => [...tr.children].map(td => td.textContent));"
    )
    assert len(rows) == len(rank["top_kernels"])
    for (name, total, count, _, share), k in zip(rows, rank["top_kernels"], strict=True):
        assert name == k["name"] and int(count.replace(",", "")) == k["count"]
        assert us_of(total) == pytest.approx(k["total_us"], abs=rounding(total))
        assert float(share.rstrip("%")) == pytest.approx(100 * k["share"], abs=0.05)
    gemm = page.js(
        "return [...document.querySelectorAll('table[data-table=gemm] tbody tr')]"
        ".map(tr => [tr.children[1].textContent, tr.children[7].textContent]);"
    )
    for (dims, rate), g in zip(gemm, rank["gemm"], strict=True):
        assert dims == f"{g['B']}x{g['M']}x{g['N']}x{g['K']}"
        assert float(rate) == pytest.approx(g["tflops_per_s"], abs=0.05)
    costs = page.js(
        "return [...document.querySelectorAll('.finding')].map(f => "
        "[f.dataset.rule, f.querySelector('.cost').textContent]);"
    )
    by_rule = {f["rule"]: f for f in rank["findings"]}
    assert {r for r, _ in costs} == set(by_rule)
    for rule, text in costs:
        shown = re.match(r"~([\d.]+ \w+)", text).group(1)
        assert us_of(shown) == pytest.approx(by_rule[rule]["cost_us"], abs=rounding(shown))


def test_finding_link_opens_the_flame_graph_zoomed_to_its_stack(driver, h100):
    html, data = h100
    page = ReportPage(driver, html)
    bound = next(f for f in data["ranks"][0]["findings"] if f["rule"] == "launch_bound")
    link = driver.find_element(By.CSS_SELECTOR, '.finding[data-rule="launch_bound"] a.flame-link')
    link.click()
    assert driver.current_url.startswith((html.parent / "report.flame.html").as_uri() + "#")
    state = driver.execute_async_script(
        "const done = arguments[0];"
        "aiflame.fragmentApplied.then(s => done({s, zoom: aiflame.app.view.zoom,"
        " path: aiflame.app.tree.pathTo(aiflame.app.view.zoom)"
        "   .map(i => aiflame.app.tree.nameOf(i)),"
        " metric: aiflame.app.types[aiflame.app.metric].name,"
        " search: document.getElementById('search').value,"
        " crumbs: [...document.querySelectorAll('#crumbs .crumb')].map(b => b.textContent)}),"
        " e => done(String(e)));"
    )
    stack = bound["top_stacks"][0]["stack"]
    assert state["zoom"] > 0 and state["s"]["matched"] == len(state["s"]["path"])
    # The stack the launch-bound phases leave the GPU idle longest on, down to its operator
    # (the widest tower of the gpu-idle view it opens).
    assert state["path"][-1] == stack[-1] == "aten::addmm"
    assert state["crumbs"][-1] == stack[-1]
    assert state["metric"] == "gpu-idle" and "Launch" in state["search"]
    # The zoomed node fills the canvas, and the launch calls under it are highlighted.
    matched = driver.find_element(By.ID, "matched").text
    assert matched.startswith("matched:") and "0.0%" not in matched
    assert ReportPage.console_errors(page) == []


def open_finding(driver, html: Path, rule: str) -> dict:
    """Click a finding's "Show in the flame graph"; what the flame graph page shows then."""
    ReportPage(driver, html)
    driver.find_element(By.CSS_SELECTOR, f'.finding[data-rule="{rule}"] a.flame-link').click()
    return driver.execute_async_script(
        "const done = arguments[0];"
        "aiflame.fragmentApplied.then(s => done({s,"
        " path: aiflame.app.tree.pathTo(aiflame.app.view.zoom)"
        "   .map(i => aiflame.app.tree.nameOf(i)),"
        " metric: aiflame.app.types[aiflame.app.metric].name,"
        " search: document.getElementById('search').value,"
        " matched: document.getElementById('matched').textContent}),"
        " e => done(String(e)));"
    )


def test_kernel_findings_highlight_what_they_name(driver, report):
    """OWLv2's eager attention: the link's search finds the softmax kernels (CUDA's
    cunn_SoftMaxForward: the search ignores case), on the GPU time."""
    html, data = report(OWL)
    (rank,) = data["ranks"]
    attention = next(f for f in rank["findings"] if f["rule"] == "eager_attention")
    assert attention["flame"]["search"] == "softmax"
    state = open_finding(driver, html, "eager_attention")
    assert state["metric"] == "gpu-time" and state["search"] == "softmax"
    share = float(re.match(r"matched: ([\d.]+)%", state["matched"]).group(1))
    assert share > 5  # the softmax kernels: about a fifth of OWLv2's GPU time
    # the idle finding opens the gpu-idle flame graph on its stack
    state = open_finding(driver, html, "preprocessing")
    top = next(f for f in rank["findings"] if f["rule"] == "preprocessing")["top_stacks"][0]
    assert top["stack"][-1] == "<built-in function zoom_shift>"  # as the trace names it
    assert state["metric"] == "gpu-idle" and state["path"][-1] == "zoom_shift"
    assert state["s"]["matched"] == len(state["s"]["path"])


def test_stack_links_and_hashchange_move_the_zoom(driver, h100):
    html, data = h100
    ReportPage(driver, html)
    links = driver.find_elements(By.CSS_SELECTOR, '.finding[data-rule="launch_bound"] a.stack')
    hrefs = [a.get_attribute("href") for a in links]
    assert len(hrefs) >= 2 and len(set(hrefs)) == len(hrefs)
    driver.get(hrefs[1])
    first = driver.execute_async_script(
        "const done = arguments[0]; aiflame.fragmentApplied.then(() => "
        "done(aiflame.app.tree.nameOf(aiflame.app.view.zoom)));"
    )
    bound = next(f for f in data["ranks"][0]["findings"] if f["rule"] == "launch_bound")
    stacks = bound["top_stacks"]
    # a module method reads "Class > forward (...)" in the graph
    assert first.endswith(python_frame(stacks[1]["stack"][-1]).name)
    # Another fragment on the open page (the report's next link) applies without a reload.
    frag = hrefs[0].split("#", 1)[1]
    second = driver.execute_async_script(
        "const done = arguments[1]; location.hash = arguments[0];"
        "setTimeout(() => done(aiflame.app.tree.nameOf(aiflame.app.view.zoom)), 200);",
        frag,
    )
    assert second.endswith(python_frame(stacks[0]["stack"][-1]).name)


def test_two_ranks_link_into_their_own_root(driver, report):
    html, data = report(H100, MI300, name="two.html")
    page = ReportPage(driver, html)
    assert len(page.all('#breakdown-bars .bar-row:not([data-rank="-1"])')) == 2  # + the job
    assert len(page.all("#timeline-rows .tl-row")) == 2
    mi300 = [f for f in data["ranks"][1]["findings"] if f["top_stacks"]]
    assert mi300, "the MI300 trace has a finding with stacks"
    link = driver.find_element(
        By.CSS_SELECTOR, f'.finding[data-rank="1"][data-rule="{mi300[0]["rule"]}"] a.flame-link'
    )
    link.click()
    path = driver.execute_async_script(
        "const done = arguments[0]; aiflame.fragmentApplied.then(() => done("
        "aiflame.app.tree.pathTo(aiflame.app.view.zoom).map(i => aiflame.app.tree.nameOf(i))));"
    )
    # Same file name in both folders: the second trace's root names its folder.
    assert path[1] == "mi300/gaunernst_bert-small-uncased__1016001.json.gz"
    # '<built-in function _cuda_synchronize>' is '_cuda_synchronize' in the flame graph
    assert path[-1] == python_frame(mi300[0]["top_stacks"][0]["stack"][-1]).name


def test_nsys_report_links_to_the_backtrace(driver, report):
    html, _ = report(SAXPY)
    page = ReportPage(driver, html)
    text = page.js("return document.querySelector('.roofline-box').textContent;")
    assert "Nsight Systems export records no operator input shapes" in text  # and so no plot
    assert page.all("svg.roofline") == []
    notes = page.js("return [...document.querySelectorAll('.note')].map(n => n.textContent);")
    assert any(n.startswith("Not available: efficiency: an Nsight Systems export") for n in notes)
    driver.find_element(By.CSS_SELECTOR, '.finding[data-rule="sync_stalls"] a.flame-link').click()
    state = driver.execute_async_script(
        "const done = arguments[0]; aiflame.fragmentApplied.then(() => done({"
        "path: aiflame.app.tree.pathTo(aiflame.app.view.zoom).map(i => aiflame.app.tree.nameOf(i)),"
        "matched: document.getElementById('matched').textContent}));"
    )
    # The backtrace of the blocking call (down to the call itself where the stack has it).
    assert state["path"][:4] == ["all", "_start", "__libc_start_main", "main"]
    assert all(name.startswith("cudaMemcpy") for name in state["path"][4:])
    assert len(state["path"]) <= 5
    assert state["matched"].startswith("matched:")  # cudaMemcpy_v3020 highlighted


def test_hostile_kernel_name_stays_text(driver, report, tmp_path):
    trace = json.loads(gzip.decompress(H100.read_bytes()))
    first = next(e["name"] for e in trace["traceEvents"] if e.get("cat") == "kernel")
    for e in trace["traceEvents"]:
        if e.get("name") == first:
            e["name"] = HOSTILE
    src = tmp_path / "hostile.json"
    src.write_text(json.dumps(trace))
    html, _ = report(src)
    page = ReportPage(driver, html)
    names = page.js(
        "return [...document.querySelectorAll('table[data-table=kernels] td.name')]"
        ".map(td => td.textContent);"
    )
    assert HOSTILE in names
    assert page.all("img") == [] and page.all("#ranks b") == []
    assert page.js("return window.__alerts;") == []
    driver.get((tmp_path / "report.flame.html").as_uri() + "#search=onerror")
    matched = driver.execute_async_script(
        "const done = arguments[0];"
        "aiflame.fragmentApplied.then(() => done(document.getElementById('matched').textContent));"
    )
    assert matched.startswith("matched:") and "0.0%" not in matched
    assert driver.execute_script("return aiflame.app.tree.find(arguments[0]);", HOSTILE) > 0
    assert driver.find_elements(By.TAG_NAME, "img") == []
    assert driver.execute_script("return window.__alerts;") == []


def test_every_section_stack_link_lands_on_its_stack(driver, h100):
    html, _ = h100
    page = ReportPage(driver, html)
    links = page.js(
        "return [...document.querySelectorAll('section.rank a.stack')]"
        ".map(a => [a.href, a.title.split('\\n').pop()]);"
    )
    assert len(links) >= 4  # idle causes, sync and copies have stacks in this trace
    for href, innermost in links:
        driver.get(href)
        state = driver.execute_async_script(
            "const done = arguments[0]; aiflame.fragmentApplied.then(s => done({s,"
            " node: aiflame.app.tree.nameOf(aiflame.app.view.zoom)}));"
        )
        assert state["s"]["matched"] == len(state["s"]["path"]) > 1
        # a module method reads "BertEmbeddings > forward (...)" in the flame graph
        assert state["node"].rsplit(" > ", 1)[-1] == python_frame(innermost).name


def test_flame_fragment_sets_metric_focus_search_and_partial_paths(driver, tmp_path):
    from aiflame.model import FrameKind, ProfileBuilder, SampleType
    from aiflame.render.html import render_html

    b = ProfileBuilder([SampleType("gpu-time", "nanoseconds"), SampleType("cpu-time", "ns")])
    for stack, values in {
        "main;step;mm": (30, 1),
        "main;step;sync": (0, 50),
        "main;io": (5, 9),
    }.items():
        frames = [b.frame(n, FrameKind.PYTHON) for n in stack.split(";")]
        b.add(b.stack(frames), values)
    page = tmp_path / "f.html"
    page.write_text(render_html(b.build()), encoding="utf-8")

    def open_at(fragment: str) -> dict:
        # The same page with another fragment: applied on hashchange, without a reload.
        driver.get(page.as_uri() + "#" + fragment)
        return driver.execute_async_script(
            "const done = arguments[0]; aiflame.fragmentApplied.then(() => setTimeout(() =>"
            " done({s: aiflame.fragmentStatus,"
            " metric: aiflame.app.types[aiflame.app.metric].name,"
            " zoom: aiflame.app.tree.nameOf(aiflame.app.view.zoom),"
            " root: aiflame.app.tree.nameOf(0),"
            " filters: aiflame.app.filters.map(f => f.op + ':' + f.name),"
            " status: document.getElementById('search-status').textContent,"
            " matched: document.getElementById('matched').textContent}), 100));"
        )

    state = open_at("metric=cpu-time&search=%5Esync%24&path=main&path=step")
    assert state["metric"] == "cpu-time" and state["zoom"] == "step"
    assert state["matched"].startswith("matched: 83.3%")  # sync: 50 of 60 ns of CPU time
    state = open_at("focus=step")
    assert state["filters"] == ["focus:step"] and state["root"] == "step"
    state = open_at("path=all&path=main&path=nowhere&path=deeper")
    assert state["zoom"] == "main" and state["s"]["matched"] == 1
    assert "1 of 4 frames" in state["status"]
    assert driver.execute_script("return window.__alerts;") == []


def test_job_row_and_straggler_across_two_ranks(driver, report):
    ranks = sorted((DATA / "kineto" / "hta" / "trace_filter").glob("sampled_rank-*.json.gz"))
    html, data = report(*ranks)
    job = data["job"]
    totals = [r["time_breakdown"]["total"] for r in data["ranks"]]
    assert job["time_breakdown_sum"]["total"] == pytest.approx(sum(totals))
    page = ReportPage(driver, html)
    rows = page.js(
        "return [...document.querySelectorAll('#breakdown-table tbody tr')]"
        ".map(tr => [tr.cells[0].textContent,"
        " tr.querySelector('[data-field=total]').dataset.value]);"
    )
    assert rows[-1][0] == "job: all 2 ranks"
    assert float(rows[-1][1]) == pytest.approx(sum(totals))
    note = page.js("return document.getElementById('job-summary').textContent")
    compute = {r["name"]: r["time_breakdown"]["computation"] for r in data["ranks"]}
    slowest = max(compute, key=compute.get)
    assert f"slowest: {slowest}" in note and f"Straggler: {slowest}" in note
    assert not page.console_errors()
