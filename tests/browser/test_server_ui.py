"""The server's web UI in headless Chromium, on a real server fed with telemetry, profiles
and a trace: the Fleet chart carries the right GPU-hour totals and drills down to the
Workload page, whose flame graph frame is aiflame's page; Explore shows a selection and a
diff; Findings ranks the trace's findings by GPU hours. Nothing leaves the server."""

from __future__ import annotations

import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

SERVER_TESTS = Path(__file__).resolve().parents[1] / "server"
sys.path.insert(0, str(SERVER_TESTS))
pytest.importorskip("chdb", reason="the UI test needs the fleet extra")

import payloads  # noqa: E402
from serverproc import ServerProcess  # noqa: E402
from srvclient import Client  # noqa: E402

TEAMS = {"search": ("j-1", 6), "ads": ("j-2", 2)}


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
                }
            )
            g += n
        bodies.append(
            payloads.telemetry(f"ui-{k}", "gpu-node-1", start, start + 10, gpus, workloads)
        )
    with ThreadPoolExecutor(16) as pool:
        assert all(
            s == 200
            for s, _ in pool.map(
                lambda b: c.post("/api/v1/telemetry", b, "application/json"), bodies
            )
        )
    for i in range(3):  # continuous CPU profiles of j-1, a minute apart
        body, _, _ = payloads.cpu_push(
            {"service_name": "train", "job_id": "j-1", "team": "search", "host": "gpu-node-1"},
            500 + i,
            int((now - 600 + 60 * i) * 1e9),
        )
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
    deadline = time.monotonic() + 240
    while c.get_json("/api/v1/traces/ui-bert")["status"] == "queued":
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


def test_fleet_chart_totals_and_drill_down(driver, site):
    srv, c = site
    _open(driver, srv.url + "/ui/fleet?group_by=team&from=now-1h")
    data = driver.execute_script("return aiflameUI.data.attribution")
    api = c.get_json("/api/v1/attribution", group_by="team", **{"from": "now-1h"})
    assert data["fleet"]["allocated_gpu_hours"] == pytest.approx(
        api["fleet"]["allocated_gpu_hours"]
    )
    assert api["fleet"]["allocated_gpu_hours"] == pytest.approx(8 * 600 / 3600)
    # What the chart draws: per team, the GPU hours of the telemetry.
    drawn = driver.execute_script(
        "const o = aiflameUI.charts['gpu-hours'].getOption();"
        "return o.series.map(s => [s.name, s.data.reduce((a, p) => a + p[1], 0)]);"
    )
    assert dict(drawn) == pytest.approx({team: n * 600 / 3600 for team, (_, n) in TEAMS.items()})
    rows = driver.find_elements("css selector", "#groups tbody tr")
    assert [r.find_elements("css selector", "td")[0].text for r in rows] == ["search", "ads"]
    assert rows[0].find_elements("css selector", "td")[1].text == "1.00"
    assert "80.0%" in rows[0].text  # device utilization: busy / allocated
    _local_only(driver, srv.url)
    rows[0].click()
    deadline = time.monotonic() + 30
    while "/ui/workload" not in driver.current_url:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert "label=team" in driver.current_url and "value=search" in driver.current_url


def test_workload_page_flame_graph_and_traces(driver, site):
    srv, _c = site
    _open(driver, srv.url + "/ui/workload?label=job_id&value=j-1&from=now-1h")
    w = driver.execute_script("return aiflameUI.data.workload")
    assert [h["host"] for h in w["hosts"]] == ["gpu-node-1"]
    assert w["hosts"][0]["gpus"] == 6 and w["hosts"][0]["allocated_gpu_hours"] == pytest.approx(1.0)
    assert payloads.CPU_TYPE in w["profile_types"]
    assert [t["trace_id"] for t in w["traces"]] == ["ui-bert"]
    assert driver.find_element("id", "workload-value").text == "j-1"
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
    assert first[0].text == "j-1"
    assert first[1].text == f"{api['rules'][0]['workloads'][0]['gpu_hours']:.2f}"
    _local_only(driver, srv.url)
