"""``aiflame mcp --server URL``'s fleet tools, driven by the MCP SDK's own client over stdio
against a real ``aiflame server`` with tokens: GPU hours by label, fleet findings, a
workload's profile and the server's labels equal what the server's API answers for the same
query, and each answer names the server, endpoint, query and resolved time range."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("mcp.server.mcpserver", reason="aiflame mcp needs the mcp extra")

import payloads
from serverproc import ServerProcess
from srvclient import Client

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mcp"))
from mcpclient import Session, stdio_server

from aiflame.proto.pyroscope.querier.v1 import querier_pb2 as q

READ = "mcp-fleet-read-token-0123456"
ADMIN = "mcp-fleet-admin-token-012345"
TENANT = "mcp-fleet"
BERT = (
    payloads.DATA
    / "kineto"
    / "tracelens"
    / "h100"
    / "gaunernst_bert-small-uncased__1016001.json.gz"
)
PERIOD = 10.0


def _gpu(i: int) -> dict:
    return {"index": i, "uuid": f"GPU-h-{i}", "name": "NVIDIA H200", "util": 0.8, "sm_active": 0.5}


def _workload(team: str, job: str, gpus: list[int]) -> dict:
    n = len(gpus)
    return {
        "labels": {"team": team, "job_id": job},
        "pids": [100 + g for g in gpus],
        "gpu_uuids": [f"GPU-h-{g}" for g in gpus],
        "allocated_gpu_seconds": PERIOD * n,
        "busy_gpu_seconds": 0.8 * PERIOD * n,
        "useful_gpu_seconds": 0.5 * PERIOD * n,
    }


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """A server with tokens; 30 periods of telemetry of two jobs, a trace of one of them
    (its findings), and CPU profiles of one of them."""
    root = tmp_path_factory.mktemp("mcp-fleet")
    (root / "tokens").write_text(f"{READ} read\n{ADMIN} admin\n")
    server = ServerProcess(root / "data", args=["--token-file", str(root / "tokens")]).start()
    c = Client(server.url, token=ADMIN, tenant=TENANT, admin_token=ADMIN)
    t0 = int(time.time()) - 900
    for k in range(30):
        body = payloads.telemetry(
            f"b-{k}", "h", t0 + k * PERIOD, t0 + (k + 1) * PERIOD, [_gpu(i) for i in range(4)],
            [_workload("search", "j-1", [0, 1, 2]), _workload("ads", "j-2", [3])],
        )  # fmt: skip
        assert c.post("/api/v1/telemetry", body, "application/json")[0] == 200
    status, data = c.post(
        "/api/v1/traces",
        BERT.read_bytes(),
        "application/octet-stream",
        headers={
            "X-Aiflame-Trace-Id": "mcp-bert",
            "X-Aiflame-Labels": json.dumps({"job_id": "j-1", "team": "search"}),
        },
    )
    assert status == 200, data
    now_ns = time.time_ns()
    pushed = []
    for seed in range(3):
        body, _, p = payloads.cpu_push(
            {"service_name": "trainer", "job_id": "j-1"}, seed, now_ns - seed * 10**10
        )
        assert c.post("/push.v1.PusherService/Push", body)[0] == 200
        pushed.append(p)
    deadline = time.monotonic() + 240
    while c.get_json("/api/v1/traces/mcp-bert")["status"] == "queued":
        assert time.monotonic() < deadline
        time.sleep(0.5)
    c.settle()
    (root / "read").write_text(READ + "\n")
    args = ["--root", str(root), "--server", server.url, "--server-token-file",
            str(root / "read"), "--tenant", TENANT]  # fmt: skip
    with Session(stdio_server(*args)) as session:
        yield server, c, session, t0, pushed
    server.stop()


def test_the_fleet_tools_are_listed(fleet):
    _, _, session, _, _ = fleet
    names = {t.name for t in session.tools()}
    assert {"gpu_hours", "fleet_findings", "workload_profile", "server_labels"} <= names


def test_gpu_hours_equal_the_servers_attribution(fleet):
    server, c, session, t0, _ = fleet
    span = {"from": str(t0 * 1000), "to": str((t0 + 3600) * 1000)}
    a = session.answer("gpu_hours", {"group_by": "team", "start": span["from"], "end": span["to"]})
    want = c.get_json("/api/v1/attribution", group_by="team", top=10, **span)
    assert [g["key"] for g in a["groups"]] == [g["key"] for g in want["groups"]]
    for got, g in zip(a["groups"], want["groups"], strict=True):
        assert got["allocated_gpu_hours"] == g["allocated_gpu_hours"]
        assert got["busy_gpu_hours"] == g["busy_gpu_hours"]
    search = next(g for g in a["groups"] if g["key"] == "search")
    assert search["allocated_gpu_hours"] == pytest.approx(30 * PERIOD * 3 / 3600)
    p = a["provenance"]
    assert p["server"] == server.url and p["endpoint"] == "/api/v1/attribution"
    assert p["tenant"] == TENANT and p["query"]["group_by"] == "team"
    assert p["range"]["from_ms"] == want["from"] and p["range"]["to_ms"] == want["to"]
    assert p["metric"]["unit"] == "GPU hours"


def test_fleet_findings_equal_the_servers(fleet):
    _, c, session, t0, _ = fleet
    a = session.answer("fleet_findings", {"start": str(t0 * 1000), "end": "now"})
    want = c.get_json("/api/v1/findings", workload_label="job_id", **{"from": str(t0 * 1000)})
    assert a["rules"], "the BERT trace has findings"
    assert [(r["rule"], r["gpu_hours"]) for r in a["rules"]] == [
        (r["rule"], r["gpu_hours"]) for r in want["rules"][:10]
    ]
    assert a["rules"][0]["workloads"][0]["key"] == "j-1"
    assert a["provenance"]["samples"]["traces"] >= 1


def test_workload_profile_totals_equal_the_queriers(fleet):
    _, c, session, _, pushed = fleet
    now = int(time.time() * 1000)
    args = {"selector": '{job_id="j-1"}', "start": str(now - 600_000), "end": str(now + 60_000)}
    a = session.answer("workload_profile", {**args, "limit": 5})
    req = q.SelectMergeStacktracesRequest(
        profile_typeID=payloads.CPU_TYPE,
        label_selector='{job_id="j-1"}',
        start=now - 600_000,
        end=now + 60_000,
    )
    total = c.connect(
        "SelectMergeStacktraces", req, q.SelectMergeStacktracesResponse
    ).flamegraph.total
    assert a["total"] == total == sum(int(p.values[:, 1].sum()) for p in pushed)
    assert a["provenance"]["metric"] == {"name": "cpu", "unit": "nanoseconds"}
    assert len(a["functions"]) == 5 and a["functions"][0]["self"] > 0
    r = session.call("workload_profile", {**args, "selector": '{job_id="nobody"}'})
    assert r.is_error and "no process_cpu" in r.content[0].text


def test_server_labels_and_a_refused_token(fleet, tmp_path):
    server, _, session, _, _ = fleet
    a = session.answer("server_labels", {})
    assert {"job_id", "service_name"} <= set(a["names"])
    assert payloads.CPU_TYPE in a["profile_types"]
    v = session.answer("server_labels", {"name": "job_id"})
    assert "j-1" in v["values"]
    (tmp_path / "bad").write_text("a-token-the-server-does-not-know\n")
    args = ["--root", str(tmp_path), "--server", server.url, "--server-token-file",
            str(tmp_path / "bad")]  # fmt: skip
    with Session(stdio_server(*args)) as other:
        r = other.call("server_labels", {})
        assert r.is_error and "401" in r.content[0].text
