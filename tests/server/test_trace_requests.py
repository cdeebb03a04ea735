"""Fleet-wide trace requests: created by an admin, handed once to the heartbeat of each host
whose telemetry shows the workload, and answered by the traces the agents upload."""

from __future__ import annotations

import json
import time

import payloads
from srvclient import Client


def upload(c: Client, path, trace_id: str, request_id: str, labels: dict) -> tuple[int, bytes]:
    """What an agent sends to answer a request: the file, its id, the request's, labels."""
    headers = {
        "X-Aiflame-Trace-Id": trace_id,
        "X-Aiflame-Request-Id": request_id,
        "X-Aiflame-Labels": json.dumps(labels),
    }
    return c.post("/api/v1/traces", path.read_bytes(), "application/octet-stream", headers=headers)


def test_trace_request_reaches_the_hosts_of_the_workload(server, tenant):
    c = Client(server.url, tenant=tenant)
    now = time.time()
    for host, job in (("h1", "77"), ("h2", "88")):
        doc = payloads.telemetry(
            f"{host}-b",
            host,
            now - 10,
            now,
            [],
            [
                {
                    "labels": {"job_id": job, "team": "search"},
                    "pids": [4100 + int(job), 4200 + int(job)],
                    "allocated_gpu_seconds": 10.0,
                }
            ],
        )
        assert c.post("/api/v1/telemetry", doc, "application/json")[0] == 200
    c.settle()
    bad = c.post("/api/v1/trace-requests", b'{"selector": {"job_id": "77"}}', "application/json")
    assert bad[0] == 400 and b"duration_ms or iterations" in bad[1]
    status, data = c.post(
        "/api/v1/trace-requests",
        json.dumps({"selector": {"job_id": "77"}, "duration_ms": 2000}).encode(),
        "application/json",
    )
    assert status == 200, data
    request_id = json.loads(data)["request_id"]

    def beat(host: str) -> list[dict]:
        body = json.dumps(
            {
                "host": host,
                "agent_version": "0.1.0",
                "started": now - 100,
                "gpus": [{"index": 0, "uuid": "GPU-0", "name": "NVIDIA H200"}],
                "spool_bytes": 0,
                "sampling_rate_hz": 19,
            }
        ).encode()
        status, data = c.post("/api/v1/agents/heartbeat", body, "application/json")
        assert status == 200, data
        return json.loads(data)["requests"]

    got = beat("h1")
    assert [r["request_id"] for r in got] == [request_id]
    assert got[0]["selector"] == {"job_id": "77"} and got[0]["duration_ms"] == 2000
    assert got[0]["labels"] == {"job_id": "77"}
    assert beat("h1") == []  # handed over once
    assert beat("h2") == []  # h2 runs another job

    # Any other labels: the agent is handed the PIDs of the matching workload on its host
    # (its trace API takes exactly one of job_id, pids or all).
    status, data = c.post(
        "/api/v1/trace-requests",
        json.dumps({"selector": {"team": "search"}, "iterations": 3}).encode(),
        "application/json",
    )
    assert status == 200, data
    by_team = json.loads(data)["request_id"]
    for host, job in (("h1", 77), ("h2", 88)):
        got = beat(host)
        assert [r["request_id"] for r in got] == [by_team]
        assert got[0]["selector"] == {"pids": [4100 + job, 4200 + job]}
        assert got[0]["labels"] == {"team": "search"} and got[0]["iterations"] == 3
    status, data = c.post(
        "/api/v1/trace-requests",
        json.dumps({"selector": {"team": "ads"}, "iterations": 3}).encode(),
        "application/json",
    )
    assert status == 200, data
    assert beat("h1") == [] and beat("h2") == []  # no host runs that team's work
    trace = (
        payloads.DATA
        / "kineto"
        / "tracelens"
        / "h100"
        / "gaunernst_bert-small-uncased__1016001.json.gz"
    )
    status, _ = upload(c, trace, "answer-1", request_id, {"host": "h1", "job_id": "77"})
    assert status == 200
    listed = c.get_json("/api/v1/trace-requests")["requests"]
    mine = next(r for r in listed if r["request_id"] == request_id)
    assert mine["delivered_to"] == ["h1"] and mine["traces"] == ["answer-1"]
    agents = {a["host"]: a for a in c.get_json("/api/v1/agents")["agents"]}
    assert set(agents) == {"h1", "h2"} and agents["h1"]["gpus"][0]["name"] == "NVIDIA H200"


def test_memory_snapshot_request_is_handed_out_with_its_kind_and_answered(server, tenant):
    """A request of kind memory-snapshot takes no duration; agents get it with its kind, and
    the snapshot they upload is stored under the request and shown as a memory flame graph."""
    c = Client(server.url, tenant=tenant)
    now = time.time()
    doc = payloads.telemetry(
        "snap-b", "m1", now - 10, now, [],
        [{"labels": {"job_id": "91"}, "pids": [5101], "allocated_gpu_seconds": 10.0}],
    )  # fmt: skip
    assert c.post("/api/v1/telemetry", doc, "application/json")[0] == 200
    c.settle()
    for wrong in (
        {"selector": {"job_id": "91"}, "kind": "memory-snapshot", "duration_ms": 2000},
        {"selector": {"job_id": "91"}, "kind": "heap-dump"},
    ):
        status, data = c.post(
            "/api/v1/trace-requests", json.dumps(wrong).encode(), "application/json"
        )
        assert status == 400, data
    status, data = c.post(
        "/api/v1/trace-requests",
        json.dumps({"selector": {"job_id": "91"}, "kind": "memory-snapshot"}).encode(),
        "application/json",
    )
    assert status == 200, data
    request_id = json.loads(data)["request_id"]
    body = json.dumps({"host": "m1", "started": now - 100}).encode()
    status, data = c.post("/api/v1/agents/heartbeat", body, "application/json")
    assert status == 200, data
    (got,) = json.loads(data)["requests"]
    assert got["request_id"] == request_id and got["kind"] == "memory-snapshot"
    assert got["selector"] == {"job_id": "91"} and got["duration_ms"] is None

    snapshot = payloads.DATA / "memory" / "cs336_forward_memory_snapshot.pickle.gz"
    labels = {"host": "m1", "job_id": "91", "pid": "5101"}
    status, data = upload(c, snapshot, "snap-1", request_id, labels)
    assert status == 200, data
    c.settle()
    listed = c.get_json("/api/v1/trace-requests")["requests"]
    mine = next(r for r in listed if r["request_id"] == request_id)
    assert mine["kind"] == "memory-snapshot"
    assert mine["delivered_to"] == ["m1"] and mine["traces"] == ["snap-1"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        trace = c.get_json("/api/v1/traces/snap-1")
        if trace.get("status") != "queued":
            break
        time.sleep(0.3)
    assert trace["format"] == "torch-memory", trace
    status, page, _ = c.request("GET", "/api/v1/traces/snap-1/flamegraph")
    assert status == 200 and b"peak-bytes" in page
