"""Uploaded traces are analyzed in the background with ``aiflame analyze``'s engine: the
stored findings and numbers are those of ``aiflame analyze --json`` on the same file, and
the trace's flame graph is served."""

from __future__ import annotations

import json
import time

import payloads
from srvclient import Client

from aiflame.cli.main import main as cli
from aiflame.render.html import extract_data

BERT = (
    payloads.DATA
    / "kineto"
    / "tracelens"
    / "h100"
    / "gaunernst_bert-small-uncased__1016001.json.gz"
)
SNAPSHOT = payloads.DATA / "memory" / "medium_128_inference_memory_snapshot.pickle.gz"


def _wait(c: Client, trace_id: str, timeout: float = 240) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        t = c.get_json(f"/api/v1/traces/{trace_id}")
        if t["status"] != "queued":
            return t
        time.sleep(0.5)
    raise AssertionError(f"trace {trace_id} still queued after {timeout} s")


def _upload(c: Client, path, trace_id: str, labels: dict) -> dict:
    status, data = c.post(
        "/api/v1/traces",
        path.read_bytes(),
        "application/octet-stream",
        headers={"X-Aiflame-Trace-Id": trace_id, "X-Aiflame-Labels": json.dumps(labels)},
    )
    assert status == 200, data
    return json.loads(data)


def test_kineto_trace_is_analyzed_like_aiflame_analyze(server, tenant, tmp_path):
    c = Client(server.url, tenant=tenant)
    labels = {"host": "gpu-node-1", "job_id": "bert-1", "rank": "0", "team": "search"}
    answer = _upload(c, BERT, "t-bert-0001", labels)
    assert answer == {"trace_id": "t-bert-0001", "status": "queued"}
    # A retry of the same upload stores nothing new.
    assert _upload(c, BERT, "t-bert-0001", labels)["status"] == "stored"
    got = _wait(c, "t-bert-0001")
    assert got["status"] == "done", got.get("error")
    assert got["format"] == "kineto" and got["labels"] == labels

    out = tmp_path / "report.json"
    assert cli(["analyze", str(BERT), "--json", str(out)]) == 0
    expected = json.loads(out.read_text())
    rank = expected["ranks"][0]
    # The stored report is the command's report (the path differs: the server's copy).
    assert got["report"]["ranks"][0]["findings"] == rank["findings"]
    assert got["report"]["ranks"][0]["time_breakdown"] == rank["time_breakdown"]
    want = sorted((f["rule"], f["severity"], round(f["cost_us"], 6)) for f in rank["findings"])
    assert want, "the BERT trace has findings (launch_bound, sync_stalls...)"
    have = sorted((f["rule"], f["severity"], round(f["cost_us"], 6)) for f in got["findings"])
    assert have == want
    tb = rank["time_breakdown"]
    assert abs(got["busy_share"] - tb["busy"] / tb["total"]) < 1e-9
    assert got["gpu_time_us"] == tb["total"]
    eff = rank.get("efficiency") or {}
    if eff.get("mfu") is not None:
        assert abs(got["mfu"] - eff["mfu"]) < 1e-12
    # Its flame graph page, from the same trace, with the GPU's idle time on the CPU
    # stacks that kept it waiting (gpu-idle): in all, the report's idle time.
    status, page, _headers = c.request("GET", "/api/v1/traces/t-bert-0001/flamegraph")
    assert status == 200 and b'id="aiflame-data"' in page
    header, _ = extract_data(page.decode("utf-8"))
    types = {x["name"]: x["total"] for x in header["types"]}
    assert abs(types["gpu-idle"] - tb["idle"] * 1e3) < 0.5  # ns
    # Listed, with its findings counted.
    listed = c.get_json("/api/v1/traces", selector='{job_id="bert-1"}')["traces"]
    assert [t["trace_id"] for t in listed] == ["t-bert-0001"]
    assert listed[0]["findings"] == len(want)


def test_memory_snapshot_upload(server, tenant):
    c = Client(server.url, tenant=tenant)
    _upload(c, SNAPSHOT, "t-mem-1", {"host": "h", "job_id": "m"})
    got = _wait(c, "t-mem-1")
    assert got["status"] == "done" and got["format"] == "torch-memory"
    assert got["findings"] == [] and got["report"] is None
    status, page, _ = c.request("GET", "/api/v1/traces/t-mem-1/flamegraph")
    assert status == 200 and b'id="aiflame-data"' in page
