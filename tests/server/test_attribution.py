"""GPU-hour attribution from the agents' telemetry: exact hours by any label at any step,
shares, top-N with "other", the efficiency metrics and how each was obtained, CSV, a replayed
telemetry batch counted once; and fleet findings charged in GPU hours."""

from __future__ import annotations

import csv
import io
import json
import time
from concurrent.futures import ThreadPoolExecutor

import payloads
import pytest
from srvclient import Client

PERIOD = 10.0
H200 = "NVIDIA H200"


def _gpu(i: int, host: str, util: float, sm: float, watts: float) -> dict:
    return {
        "index": i,
        "uuid": f"GPU-{host}-{i}",
        "name": H200,
        "util": util,
        "sm_active": sm,
        "power_watts": watts,
        "tensor_active": 0.4,
        "est_flops": 4e14,
        "est_flops_basis": "tensor_active x 989.4 TFLOP/s dense BF16 (H200 SXM)",
    }


def _workload(team: str, job: str, host: str, gpus: list[int], busy: float, useful: float) -> dict:
    n = len(gpus)
    return {
        "labels": {"team": team, "job_id": job, "model": f"m-{team}", "user": "ana"},
        "pids": [100 + g for g in gpus],
        "gpu_uuids": [f"GPU-{host}-{g}" for g in gpus],
        "allocated_gpu_seconds": PERIOD * n,
        "busy_gpu_seconds": busy * PERIOD * n,
        "useful_gpu_seconds": useful * PERIOD * n,
        "est_flop": 4e15 * n,
        "gpu_memory_bytes": 1 << 30,
        "input_bytes": 1_000_000 * n,
    }


@pytest.fixture(scope="module")
def fleet(server):
    """One hour of telemetry (360 periods) of two hosts: host-a runs search's job on 6 GPUs
    and ads' on 2; host-b runs research's job on 8 GPUs without GPM (no useful seconds)."""
    tenant = "attribution"
    c = Client(server.url, tenant=tenant)
    t0 = (int(time.time()) // 3600 - 2) * 3600  # two hours ago, on the hour
    bodies = []
    for k in range(360):
        start, end = t0 + k * PERIOD, t0 + (k + 1) * PERIOD
        a = payloads.telemetry(
            f"a-{k}",
            "host-a",
            start,
            end,
            [_gpu(i, "host-a", 0.9, 0.6, 500.0) for i in range(8)],
            [
                _workload("search", "j-1", "host-a", list(range(6)), 0.9, 0.6),
                _workload("ads", "j-2", "host-a", [6, 7], 0.5, 0.2),
            ],
        )
        b_doc = json.loads(
            payloads.telemetry(
                f"b-{k}",
                "host-b",
                start,
                end,
                [_gpu(i, "host-b", 0.3, 0.1, 300.0) for i in range(8)],
                [_workload("research", "j-3", "host-b", list(range(8)), 0.3, 0.1)],
            )
        )
        for g in b_doc["gpus"]:
            g.pop("sm_active")
            g.pop("est_flops")
        for w in b_doc["workloads"]:
            w.pop("useful_gpu_seconds")
            w.pop("est_flop")
        bodies += [a, json.dumps(b_doc).encode()]
    with ThreadPoolExecutor(32) as pool:  # as agents do: concurrently, each waiting its commit
        for status, data in pool.map(
            lambda b: c.post("/api/v1/telemetry", b, "application/json"), bodies
        ):
            assert status == 200, data
    # A replayed batch (the agent's spool after a restart) is a no-op.
    again = payloads.telemetry(
        "a-0", "host-a", t0, t0 + PERIOD, [], [_workload("search", "j-1", "host-a", [0], 1, 1)]
    )
    assert c.post("/api/v1/telemetry", again, "application/json")[0] == 200
    return c, t0


def test_gpu_hours_by_team(fleet):
    c, t0 = fleet
    r = c.get_json(
        "/api/v1/attribution",
        group_by="team",
        step=3600,
        **{"from": t0 * 1000, "to": (t0 + 3600) * 1000},
    )
    assert r["resolution"] == "1h"
    by = {g["key"]: g for g in r["groups"]}
    assert by["search"]["allocated_gpu_hours"] == pytest.approx(6.0)
    assert by["ads"]["allocated_gpu_hours"] == pytest.approx(2.0)
    assert by["research"]["allocated_gpu_hours"] == pytest.approx(8.0)
    assert r["fleet"]["allocated_gpu_hours"] == pytest.approx(16.0)
    assert by["search"]["busy_gpu_hours"] == pytest.approx(5.4)
    assert by["research"]["share"] == pytest.approx(0.5)
    m = by["search"]["metrics"]
    assert m["device_utilization"]["value"] == pytest.approx(0.9)
    assert m["sm_active"]["value"] == pytest.approx(0.6)
    assert m["power_watts"]["value"] == pytest.approx(500.0)
    assert m["flops"]["value"] == pytest.approx(4e14)  # FLOP per allocated GPU-second
    assert "estimated" in m["flops"]["basis"]
    assert m["gpu_hours_per_tb_input"]["value"] == pytest.approx(6.0 / (360 * 6e6 / 1e12))
    # research has no GPM: no SM active, and it says so instead of a 0.
    r_m = by["research"]["metrics"]
    assert r_m["sm_active"]["value"] is None and r_m["sm_active"]["coverage"] == 0
    assert r["fleet"]["metrics"]["sm_active"]["coverage"] == pytest.approx(0.5)


def test_any_label_any_step_top_n(fleet):
    c, t0 = fleet
    span = {"from": t0 * 1000, "to": (t0 + 3600) * 1000}
    r = c.get_json("/api/v1/attribution", group_by="host", step=60, **span)
    assert r["resolution"] == "1m" and len(r["timestamps"]) == 60
    by = {g["key"]: g for g in r["groups"]}
    assert by["host-a"]["allocated_gpu_hours"] == pytest.approx(8.0)
    assert sum(r["series"]["host-b"]["allocated"]) == pytest.approx(8.0)
    r = c.get_json("/api/v1/attribution", group_by="gpu_model", step=600, **span)
    assert [g["key"] for g in r["groups"]] == [H200]
    r = c.get_json("/api/v1/attribution", group_by="team", step=3600, top=1, **span)
    assert [g["key"] for g in r["groups"]] == ["research", "other"]
    assert r["groups"][1]["allocated_gpu_hours"] == pytest.approx(8.0)
    r = c.get_json(
        "/api/v1/attribution", group_by="job_id", step=15, selector='{team="ads"}', **span
    )
    assert r["resolution"] == "raw" and [g["key"] for g in r["groups"]] == ["j-2"]
    assert r["groups"][0]["allocated_gpu_hours"] == pytest.approx(2.0)


def test_csv_download(fleet):
    c, t0 = fleet
    status, data, headers = c.request(
        "GET",
        "/api/v1/attribution.csv",
        params={"group_by": "team", "step": 3600, "from": t0 * 1000, "to": (t0 + 3600) * 1000},
    )
    assert status == 200 and "text/csv" in headers.get(
        "content-type", headers.get("Content-Type", "")
    )
    rows = list(csv.DictReader(io.StringIO(data.decode())))
    assert {r["team"] for r in rows} == {"search", "ads", "research"}
    assert sum(float(r["allocated_gpu_hours"]) for r in rows) == pytest.approx(16.0)


def test_findings_cost_gpu_hours(server, fleet):
    c, t0 = fleet
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
            "X-Aiflame-Trace-Id": "attr-bert",
            "X-Aiflame-Labels": json.dumps({"job_id": "j-1", "team": "search"}),
        },
    )
    assert status == 200
    deadline = time.monotonic() + 240
    while c.get_json("/api/v1/traces/attr-bert")["status"] == "queued":
        assert time.monotonic() < deadline
        time.sleep(0.5)
    trace = c.get_json("/api/v1/traces/attr-bert")
    r = c.get_json(
        "/api/v1/findings",
        workload_label="job_id",
        **{"from": t0 * 1000, "to": int(time.time() * 1000) + 60_000},
    )
    rules = {x["rule"]: x for x in r["rules"]}
    assert set(rules) == {f["rule"] for f in trace["findings"]}
    for f in trace["findings"]:
        w = rules[f["rule"]]["workloads"][0]
        assert w["key"] == "j-1" and w["allocated_gpu_hours"] == pytest.approx(6.0)
        assert w["gpu_hours"] == pytest.approx(f["share"] * 6.0)
    costs = [x["gpu_hours"] for x in r["rules"]]
    assert costs == sorted(costs, reverse=True)
    # Each stack comes with the terminal report's short text: innermost frames as a person
    # names them (``embedding (functional.py:2437)``, not ``torch/nn/functional.py(2437): ...``).
    stacks = [s for x in r["rules"] for w in x["workloads"] for s in w["top_stacks"]]
    assert stacks
    for s in stacks:
        assert s["stack"][-1].split(": ")[-1] in s["text"].split(" > ")[-1]  # the leaf
        assert not any("py(" in part for part in s["text"].split(" > "))
