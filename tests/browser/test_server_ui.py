"""The server's web UI in headless Chromium, on a real server fed with telemetry, profiles
and a trace: the Fleet chart carries the right GPU-hour totals (as GPUs over time, with the
GPUs nobody holds on top and gaps where no telemetry came), its cards and host table read
as the API answers, FLOP/s in engineering units, and it drills down to the Workload page,
whose flame graph frame is aiflame's page and whose trace opens the HTML report of
``aiflame analyze -o``; Explore shows a selection and a diff; Findings ranks the trace's
findings by GPU hours. Nothing leaves the server. Screenshots of the pages go to
``AIFLAME_SCREENSHOTS`` when it names a directory."""

from __future__ import annotations

import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

SERVER_TESTS = Path(__file__).resolve().parents[1] / "server"
sys.path.insert(0, str(SERVER_TESTS))
pytest.importorskip("chdb", reason="the UI test needs the fleet extra: pip install -e '.[fleet]'")

import payloads  # noqa: E402
from serverproc import ServerProcess  # noqa: E402
from srvclient import Client  # noqa: E402

TEAMS = {"search": ("j-1", 6), "ads": ("j-2", 2)}
FLOPS_PER_GPU = 4.5e14  # estimated: the fleet runs at 3.6 PFLOP/s
SCREENSHOTS = os.environ.get("AIFLAME_SCREENSHOTS")


def _screenshot(driver, name: str) -> None:
    """The whole page, for a person to look at (with AIFLAME_SCREENSHOTS=DIR)."""
    if SCREENSHOTS:
        os.makedirs(SCREENSHOTS, exist_ok=True)
        size = driver.get_window_size()
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(size["width"], min(max(height, size["height"]), 4000))
        try:
            driver.save_screenshot(os.path.join(SCREENSHOTS, name + ".png"))
        finally:
            driver.set_window_size(size["width"], size["height"])


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    srv = ServerProcess(tmp_path_factory.mktemp("ui") / "data").start()
    c = Client(srv.url)
    now = time.time()
    t0 = now - 1800
    bodies = []
    for k in range(60):  # 10 minutes of telemetry, one host
        start = t0 + k * 10
        gpus = [
            {
                "index": i,
                "uuid": f"GPU-{i}",
                "name": "NVIDIA H200",
                "util": 0.8,
                "power_watts": 400.0,
                "sm_active": 0.5,
            }
            for i in range(8)
        ]
        workloads, g = [], 0
        for team, (job, n) in TEAMS.items():
            workloads.append(
                {
                    "labels": {"team": team, "job_id": job},
                    "gpu_uuids": [f"GPU-{i}" for i in range(g, g + n)],
                    "allocated_gpu_seconds": 10.0 * n,
                    "busy_gpu_seconds": 8.0 * n,
                    "useful_gpu_seconds": 5.0 * n,
                    "est_flop": 10.0 * n * FLOPS_PER_GPU,
                }
            )
            g += n
        bodies.append(
            payloads.telemetry(f"ui-{k}", "gpu-node-1", start, start + 10, gpus, workloads)
        )
        # a workstation: a notebook holds one of its 8 GPUs and runs nothing on it
        spare = [
            {"index": i, "uuid": f"WS-{i}", "name": "NVIDIA H100", "util": 0.0} for i in range(8)
        ]
        notebook = {
            "labels": {"user": "alice", "service_name": "jupyter-lab"},
            "gpu_uuids": ["WS-0"],
            "allocated_gpu_seconds": 10.0,
            "busy_gpu_seconds": 0.0,
        }
        bodies.append(payloads.telemetry(f"ws-{k}", "ws-1", start, start + 10, spare, [notebook]))
    with ThreadPoolExecutor(16) as pool:
        assert all(
            s == 200
            for s, _ in pool.map(
                lambda b: c.post("/api/v1/telemetry", b, "application/json"), bodies
            )
        )
    for i in range(3):  # continuous CPU profiles of j-1's two ranks, a minute apart
        body, _, _ = payloads.cpu_push(
            {"service_name": "train", "job_id": "j-1", "team": "search", "host": "gpu-node-1",
             "rank": str(i % 2)},
            500 + i,
            int((now - 600 + 60 * i) * 1e9),
        )  # fmt: skip
        assert c.post("/push.v1.PusherService/Push", body)[0] == 200
    bert = (
        payloads.DATA
        / "kineto"
        / "tracelens"
        / "h100"
        / "gaunernst_bert-small-uncased__1016001.json.gz"
    )
    status, _ = c.post(
        "/api/v1/traces",
        bert.read_bytes(),
        "application/octet-stream",
        headers={
            "X-Aiflame-Trace-Id": "ui-bert",
            "X-Aiflame-Labels": json.dumps(
                {"job_id": "j-1", "team": "search", "host": "gpu-node-1"}
            ),
        },
    )
    assert status == 200
    # a trace of the notebook's process (SGLang decoding: a synchronisation stall)
    sglang = payloads.DATA / "kineto" / "tracelens" / "sglang" / "sglang_Qwen3-8B_decode.json.gz"
    notebook = {"host": "ws-1", "user": "alice", "service_name": "jupyter-lab", "pid": "9100",
                "comm": "python3"}  # fmt: skip
    status, _ = c.post(
        "/api/v1/traces",
        sglang.read_bytes(),
        "application/octet-stream",
        headers={"X-Aiflame-Trace-Id": "ui-sglang", "X-Aiflame-Labels": json.dumps(notebook)},
    )
    assert status == 200
    deadline = time.monotonic() + 240
    for trace_id in ("ui-bert", "ui-sglang"):
        while c.get_json(f"/api/v1/traces/{trace_id}")["status"] == "queued":
            assert time.monotonic() < deadline
            time.sleep(0.5)
    yield srv, c
    srv.stop()


def _open(driver, url: str):
    from flamepage import console_errors

    driver.get_log("performance")
    console_errors(driver)
    driver.get(url)
    state = driver.execute_async_script(
        "const done = arguments[0]; aiflameUI.ready.then(() => done('ok'), (e) => done(String(e)));"
    )
    assert state == "ok", state


def _local_only(driver, base: str) -> None:
    from flamepage import console_errors, network_requests

    urls = network_requests(driver)
    assert urls and all(u.startswith(base) or u.startswith(("data:", "about:")) for u in urls), urls
    assert console_errors(driver) == []


def _frame_ready(driver, frame_id: str) -> None:
    frame = driver.find_element("id", frame_id)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        driver.switch_to.frame(frame)
        ok = driver.execute_script("return !!(window.aiflame && window.aiflame.app)")
        driver.switch_to.default_content()
        if ok:
            return
        time.sleep(0.2)
    raise AssertionError("the flame graph frame did not load")


def _text(driver, css: str) -> str:
    return driver.find_element("css selector", css).text


def test_fleet_chart_totals_and_drill_down(driver, site):
    srv, c = site
    _open(driver, srv.url + "/ui/fleet?group_by=team&from=now-1h")
    data = driver.execute_script("return aiflameUI.data.attribution")
    api = c.get_json("/api/v1/attribution", group_by="team", **{"from": "now-1h"})
    assert data["fleet"]["allocated_gpu_hours"] == pytest.approx(
        api["fleet"]["allocated_gpu_hours"]
    )
    hours = 600 / 3600
    assert api["fleet"]["allocated_gpu_hours"] == pytest.approx(9 * hours)
    assert api["fleet"]["capacity_gpu_hours"] == pytest.approx(16 * hours)
    assert api["fleet"]["unallocated_gpu_hours"] == pytest.approx(7 * hours)
    # What the chart draws: GPUs per bucket (GPU hours per hour), the GPUs nobody holds
    # stacked on top up to capacity, gaps (null) where no telemetry came.
    step_h = data["step_s"] / 3600
    drawn = driver.execute_script(
        "const o = aiflameUI.charts['gpu-hours'].getOption();"
        "return o.series.map(s => [s.name, s.data.map(p => p[1])]);"
    )
    per = dict(drawn)
    gpu_hours = {k: sum(v for v in vals if v is not None) * step_h for k, vals in per.items()}
    want = {team: n * hours for team, (_, n) in TEAMS.items()}
    # (the notebook has no team: its GPU is "(none)"'s)
    assert gpu_hours == pytest.approx(
        {**want, "(none)": hours, "unallocated": 7 * hours, "capacity": 16 * hours}
    )
    assert max(v for v in per["capacity"] if v is not None) == pytest.approx(16)
    assert per["capacity"][0] is None and None in per["search"]  # before the telemetry: a gap
    # The cards read as the API answers.
    f = api["fleet"]
    assert _text(driver, "[data-card=capacity] .v") == f"{f['capacity_gpu_hours']:.2f}"
    assert _text(driver, "[data-card=unallocated] .v") == f"{f['unallocated_gpu_hours']:.2f}"
    assert _text(driver, "[data-card=idle] .v") == f"{f['idle_gpu_hours']:.2f}"
    assert "43.8% of capacity" in _text(driver, "[data-card=unallocated]")  # 7 of 16 GPUs
    # FLOP/s in engineering units, on the axis and the card
    label = driver.execute_script(
        "return aiflameUI.charts.flops.getOption().yAxis[0].axisLabel.formatter(1.8e16)"
    )
    assert label == "18 PFLOP/s"
    assert _text(driver, "[data-card=flops] .v") == "450 TFLOP/s"
    flops = [v for v in dict(driver.execute_script(
        "return aiflameUI.charts.flops.getOption().series.map(s => [s.name, s.data.map(p => p[1])])"
    ))["estimated FLOP/s (fleet)"] if v is not None]  # fmt: skip
    assert max(flops) == pytest.approx(8 * FLOPS_PER_GPU)
    rows = driver.find_elements("css selector", "#groups tbody tr")
    assert [r.find_elements("css selector", "td")[0].text for r in rows] == [
        g["key"] for g in api["groups"]
    ]
    assert rows[0].find_elements("css selector", "td")[0].text == "search"
    assert rows[0].find_elements("css selector", "td")[1].text == "1.00"
    assert "80.0%" in rows[0].text  # device utilization: busy / allocated
    # the host table: most unallocated first, its numbers the API's
    hosts = driver.find_elements("css selector", "#hosts tbody tr")
    cells = [[td.text for td in r.find_elements("css selector", "td")] for r in hosts]
    assert [x[0] for x in cells] == [h["host"] for h in api["hosts"]] == ["ws-1", "gpu-node-1"]
    assert (
        cells[0][5] == f"{api['hosts'][0]['unallocated_gpu_hours']:.2f}" and cells[0][6] == "87.5%"
    )
    _screenshot(driver, "fleet")
    # ranked by idle hours (held, not busy): the notebook's idle GPU (no team: "(none)")
    # comes before ads' two GPUs busy 80% of the time
    _open(driver, srv.url + "/ui/fleet?group_by=team&sort=idle&from=now-1h")
    idle = c.get_json("/api/v1/attribution", group_by="team", sort="idle", **{"from": "now-1h"})
    rows = driver.find_elements("css selector", "#groups tbody tr")
    cells = [[td.text for td in r.find_elements("css selector", "td")] for r in rows]
    assert (
        [x[0] for x in cells] == [g["key"] for g in idle["groups"]] == ["search", "(none)", "ads"]
    )
    assert [x[4] for x in cells] == [f"{g['idle_gpu_hours']:.2f}" for g in idle["groups"]]
    assert driver.find_element("id", "sort").get_attribute("value") == "idle"
    _local_only(driver, srv.url)
    _open(driver, srv.url + "/ui/fleet?group_by=team&from=now-1h")
    rows = driver.find_elements("css selector", "#groups tbody tr")
    rows[0].click()
    deadline = time.monotonic() + 30
    while "/ui/workload" not in driver.current_url:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert "label=team" in driver.current_url and "value=search" in driver.current_url


def test_workload_page_flame_graph_and_traces(driver, site):
    srv, c = site
    _open(driver, srv.url + "/ui/workload?label=job_id&value=j-1&from=now-1h")
    w = driver.execute_script("return aiflameUI.data.workload")
    assert [h["host"] for h in w["hosts"]] == ["gpu-node-1"]
    assert w["hosts"][0]["gpus"] == 6 and w["hosts"][0]["allocated_gpu_hours"] == pytest.approx(1.0)
    assert w["hosts"][0]["ranks"] == ["0", "1"]  # from its profiles' labels
    hosts = driver.find_elements("css selector", "#hosts tbody tr td")
    assert hosts[1].text == "0, 1"
    assert payloads.CPU_TYPE in w["profile_types"]
    assert [t["trace_id"] for t in w["traces"]] == ["ui-bert"]
    assert driver.find_element("id", "workload-value").text == "j-1"
    # GPUs held over time: 6 while the telemetry came, gaps elsewhere
    held = driver.execute_script(
        "return aiflameUI.charts['hours-by-host'].getOption().series[0].data.map(p => p[1])"
    )
    assert max(v for v in held if v is not None) == pytest.approx(6) and None in held
    _screenshot(driver, "workload")
    _frame_ready(driver, "flame")
    driver.switch_to.frame(driver.find_element("id", "flame"))
    try:
        root_total = driver.execute_script("return aiflame.app.tree.totals(0)[0]")
        names = driver.execute_script("return aiflame.test.find('train_step (train.py:22)')")
    finally:
        driver.switch_to.default_content()
    pushed = sum(payloads.cpu_profile(500 + i, 0).values[:, 1].sum() for i in range(3))
    assert root_total == pytest.approx(pushed)
    assert names >= 0
    trace_cells = driver.find_elements("css selector", "#traces tbody tr td")
    assert trace_cells and any(cell.text == "done" for cell in trace_cells)
    # "report" opens the HTML report of aiflame analyze -o, its findings those of the API
    report = driver.find_element("link text", "report")
    href = report.get_attribute("href")
    assert href.startswith(srv.url + "/api/v1/traces/ui-bert/report")
    driver.get(href)
    deadline = time.monotonic() + 120
    while "aiflame analyze" not in driver.title and time.monotonic() < deadline:
        time.sleep(0.5)
    assert driver.title.startswith("aiflame analyze: trace ui-bert"), driver.title
    text = driver.find_element("tag name", "body").text
    api = c.get_json("/api/v1/traces/ui-bert")
    assert api["findings"] and all(f["title"] in text for f in api["findings"])
    assert "/tmp" not in text and "trace ui-bert" in text  # no server path
    _screenshot(driver, "report")
    flame = driver.execute_script(
        "return [...document.querySelectorAll('a[href]')].map(a => a.href)"
        ".find(h => h.includes('/flamegraph'))"
    )
    assert flame and flame.startswith(srv.url + "/api/v1/traces/ui-bert/flamegraph")
    status, page, _ = c.request("GET", flame[len(srv.url) :].split("#")[0])
    assert status == 200 and b"aiflame" in page


def test_workload_page_requests_a_trace_and_a_memory_snapshot(driver, site):
    srv, c = site
    _open(driver, srv.url + "/ui/workload?label=job_id&value=j-1&from=now-1h")
    msg = driver.find_element("id", "trace-msg")
    made = []
    for button, kind in (("trace-now", "trace"), ("snapshot-now", "memory-snapshot")):
        before = msg.text
        driver.find_element("id", button).click()
        deadline = time.monotonic() + 20
        while msg.text == before and time.monotonic() < deadline:
            time.sleep(0.1)
        assert msg.text.startswith("requested r-"), msg.text
        made.append((msg.text.split()[1].rstrip(":"), kind))
    listed = {r["request_id"]: r for r in c.get_json("/api/v1/trace-requests")["requests"]}
    for request_id, kind in made:
        assert listed[request_id]["kind"] == kind
        assert listed[request_id]["selector"] == {"job_id": "j-1"}
    assert listed[made[0][0]]["duration_ms"] == 2000
    assert listed[made[1][0]]["duration_ms"] is None


def test_explore_selection_and_diff(driver, site):
    srv, _ = site
    _open(driver, srv.url + "/ui/explore?from=now-1h&selector=" + '{job_id="j-1"}')
    _frame_ready(driver, "flame")
    driver.find_element("id", "diff").click()
    driver.find_element("id", "base-selector").send_keys('{job_id="none"}')
    driver.find_element("id", "show").click()
    time.sleep(0.5)
    _frame_ready(driver, "flame")
    driver.switch_to.frame(driver.find_element("id", "flame"))
    try:
        header = driver.execute_script(
            "return JSON.parse(document.getElementById('aiflame-header').textContent)"
        )
    finally:
        driver.switch_to.default_content()
    assert header["diff"] is not None
    assert "diff_selector" in driver.current_url
    _local_only(driver, srv.url)


def test_findings_ranked_by_gpu_hours(driver, site):
    srv, c = site
    _open(driver, srv.url + "/ui/findings?from=now-1h")
    api = c.get_json("/api/v1/findings", **{"from": "now-1h"})
    sections = driver.find_elements("css selector", "section.rule")
    assert [s.get_attribute("data-rule") for s in sections] == [r["rule"] for r in api["rules"]]
    assert api["rules"] and api["rules"][0]["workloads"][0]["key"] == "j-1"
    first = (
        sections[0].find_elements("css selector", "tbody tr")[0].find_elements("css selector", "td")
    )
    w = api["rules"][0]["workloads"][0]
    assert [first[0].text, first[1].text] == ["j-1", "job_id"] == [w["key"], w["identity"]]
    assert first[2].text == f"{w['gpu_hours']:.2f}"
    assert first[4].text == f"{w['allocated_gpu_hours']:.2f}" == "1.00"  # j-1: 6 GPUs, 10 min
    # the notebook's stall is charged to its own workload: its one GPU for 10 minutes
    stall = next(r for r in api["rules"] if r["rule"] == "sync_stalls")
    [w] = stall["workloads"]
    assert (w["key"], w["identity"]) == ("jupyter-lab", "service_name")
    assert w["allocated_gpu_hours"] == pytest.approx(600 / 3600)
    section = driver.find_element("css selector", "section[data-rule=sync_stalls]")
    cells = [td.text for td in section.find_elements("css selector", "tbody td")]
    assert cells[:5] == ["jupyter-lab", "service_name", f"{w['gpu_hours']:.2f}",
                         f"{100 * w['share']:.1f}%", "0.17"]  # fmt: skip
    _screenshot(driver, "findings")
    _local_only(driver, srv.url)
