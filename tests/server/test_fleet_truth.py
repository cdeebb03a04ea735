"""The Fleet page's numbers against a simulated fleet (benchmarks/fleet_sim.py): a Slurm job
on two hosts, Kubernetes pods without job ids, an idle notebook, GPUs nobody holds, and a
real GPU trace (SGLang decoding, with a synchronisation stall) uploaded for one 2-GPU
inference pod. Capacity and unallocated GPU hours equal the simulation's, idle hours are
allocated minus busy, and the finding is charged that pod's share, not the share of every
workload without a job id."""

from __future__ import annotations

import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import payloads
import pytest
from srvclient import Client

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import fleet_sim

PERIOD_S = 60.0
PERIODS = 150  # two and a half hours
TRACE = payloads.DATA / "kineto" / "tracelens" / "sglang" / "sglang_Qwen3-8B_decode.json.gz"
POD = "infer-qwen-7c9d8f6b5-x2kqp"


@pytest.fixture(scope="module")
def fleet(server):
    c = Client(server.url, tenant="fleet-truth")
    hosts = fleet_sim.mixed_fleet()
    start = time.time() - PERIODS * PERIOD_S - 600 + 0.25  # not on a minute or an hour
    docs = fleet_sim.fleet_telemetry(hosts, start, PERIODS, PERIOD_S)
    with ThreadPoolExecutor(16) as pool:
        for status, data in pool.map(
            lambda d: c.post("/api/v1/telemetry", d, "application/json"), docs
        ):
            assert status == 200, data
    pod = next(w for h in hosts for w in h.workloads if w.labels.get("pod") == POD)
    status, _ = c.post(
        "/api/v1/traces",
        TRACE.read_bytes(),
        "application/octet-stream",
        headers={
            "X-Aiflame-Trace-Id": "fleet-truth-sglang",
            "X-Aiflame-Labels": json.dumps(pod.process),
        },
    )
    assert status == 200
    deadline = time.monotonic() + 240
    while c.get_json("/api/v1/traces/fleet-truth-sglang")["status"] == "queued":
        assert time.monotonic() < deadline
        time.sleep(0.5)
    span = {"from": int(start * 1000), "to": int(time.time() * 1000) + 60_000}
    return c, hosts, fleet_sim.fleet_truth(hosts, PERIODS, PERIOD_S), span


@pytest.mark.parametrize("step", [60, 3600])
def test_capacity_and_unallocated_hours_equal_the_simulation(fleet, step):
    c, hosts, truth, span = fleet
    r = c.get_json("/api/v1/attribution", group_by="job_id", step=step, **span)
    f = r["fleet"]
    assert f["capacity_gpu_hours"] == pytest.approx(sum(truth["capacity"].values()))
    assert f["unallocated_gpu_hours"] == pytest.approx(sum(truth["unallocated"].values()))
    assert f["allocated_gpu_hours"] == pytest.approx(
        sum(truth["capacity"].values()) - sum(truth["unallocated"].values())
    )
    by_host = {h["host"]: h for h in r["hosts"]}
    assert set(by_host) == {h.name for h in hosts}
    for name, cap in truth["capacity"].items():
        assert by_host[name]["capacity_gpu_hours"] == pytest.approx(cap)
        assert by_host[name]["unallocated_gpu_hours"] == pytest.approx(truth["unallocated"][name])
        assert by_host[name]["gpus"] == 8
    # most unallocated first: the spare host, then the workstation of the notebook
    assert [h["host"] for h in r["hosts"][:2]] == ["spare-1", "ws-1"]
    # grouped by host, each host is a group with its capacity, the unused one included
    by = c.get_json("/api/v1/attribution", group_by="host", step=step, top=0, **span)
    groups = {g["key"]: g for g in by["groups"]}
    assert set(groups) == set(truth["capacity"])
    for name, cap in truth["capacity"].items():
        assert groups[name]["capacity_gpu_hours"] == pytest.approx(cap)
        assert groups[name]["unallocated_gpu_hours"] == pytest.approx(truth["unallocated"][name])
    assert groups["spare-1"]["allocated_gpu_hours"] == 0
    # over time, the capacity and the unallocated hours add up to the same totals
    assert sum(r["capacity_series"]["capacity"]) == pytest.approx(f["capacity_gpu_hours"])
    assert sum(r["capacity_series"]["unallocated"]) == pytest.approx(f["unallocated_gpu_hours"])


def test_idle_hours_and_the_sort_by_them(fleet):
    c, _hosts, _truth, span = fleet
    r = c.get_json("/api/v1/attribution", group_by="service_name", sort="idle", **span)
    assert r["sort"] == "idle"
    by = {g["key"]: g for g in r["groups"]}
    for g in r["groups"]:  # allocated minus busy, busy measured all the time here
        assert g["idle_gpu_hours"] == pytest.approx(g["allocated_gpu_hours"] - g["busy_gpu_hours"])
    notebook = by["jupyter-lab"]
    assert notebook["busy_gpu_hours"] == 0
    assert notebook["idle_gpu_hours"] == pytest.approx(PERIODS * PERIOD_S / 3600)
    idle = [g["idle_gpu_hours"] for g in r["groups"]]
    assert idle == sorted(idle, reverse=True)
    # top 1 by idle hours: the most idle group, the rest as "other"
    top = c.get_json("/api/v1/attribution", group_by="service_name", sort="idle", top=1, **span)
    assert top["groups"][0]["key"] == r["groups"][0]["key"]
    assert c.request("GET", "/api/v1/attribution", params={"sort": "nope"})[0] == 400


def test_a_finding_is_charged_to_the_pod_whose_trace_shows_it(fleet):
    c, _hosts, truth, span = fleet
    trace = c.get_json("/api/v1/traces/fleet-truth-sglang")
    stall = next(f for f in trace["findings"] if f["rule"] == "sync_stalls")
    pod_hours = next(h for labels, h in truth["allocated"] if labels.get("pod") == POD)
    assert pod_hours == pytest.approx(2 * PERIODS * PERIOD_S / 3600)
    r = c.get_json("/api/v1/findings", **span)
    assert r["workload_label"] == "workload"
    rule = next(x for x in r["rules"] if x["rule"] == "sync_stalls")
    [w] = rule["workloads"]
    assert w["key"] == f"serving/{POD}" and w["identity"] == "pod"
    assert (w["label"], w["value"]) == ("pod", POD)
    assert w["allocated_gpu_hours"] == pytest.approx(pod_hours)
    assert w["gpu_hours"] == pytest.approx(stall["share"] * pod_hours)
    assert rule["gpu_hours"] == pytest.approx(w["gpu_hours"])
    assert "pod's allocated GPU hours" in w["basis"]
    # Grouped by job id, the pod is among the workloads without one, but it is still only
    # the pod that is charged (the others have no trace showing the stall).
    none_alloc = sum(h for labels, h in truth["allocated"] if "job_id" not in labels)
    assert none_alloc > 3 * pod_hours
    by_job = c.get_json("/api/v1/findings", workload_label="job_id", **span)
    [w] = next(x for x in by_job["rules"] if x["rule"] == "sync_stalls")["workloads"]
    assert w["key"] == "(none)" and w["gpu_hours"] == pytest.approx(stall["share"] * pod_hours)
