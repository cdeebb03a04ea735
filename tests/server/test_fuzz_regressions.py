"""Every finding of the server's fuzzing (tools/fuzz_server.py), replayed: each request is
now a 4xx (never a 5xx, never a hang), and afterwards the server still stores and serves."""

from __future__ import annotations

import base64
import gzip
import json
import time
from urllib.parse import urlencode

import payloads
import pytest
from srvclient import Client

from aiflame.proto.pyroscope.querier.v1 import querier_pb2 as q

CASES = [
    json.loads(line)
    for line in gzip.decompress(
        (payloads.DATA / "server" / "fuzz_regressions.jsonl.gz").read_bytes()
    ).splitlines()
]


@pytest.mark.parametrize("case", CASES, ids=[c["finding"][:60] for c in CASES])
def test_a_fuzzing_finding_is_a_4xx(server, tenant, case):
    c = Client(server.url, tenant=tenant, settle=False)
    path = case["path"] + (
        "?" + urlencode([tuple(p) for p in case["params"]]) if case["params"] else ""
    )
    t0 = time.monotonic()
    status, data, _ = c.request(
        case["method"], path, base64.b64decode(case["body"]) or None, headers=case["headers"]
    )
    assert 400 <= status < 500, (case["finding"], status, data[:300])
    assert time.monotonic() - t0 < 10, case["finding"]


def test_after_the_findings_the_server_stores_and_serves(server, tenant):
    c = Client(server.url, tenant=tenant)
    for case in CASES:
        path = case["path"] + (
            "?" + urlencode([tuple(p) for p in case["params"]]) if case["params"] else ""
        )
        c.request(case["method"], path, base64.b64decode(case["body"]) or None, case["headers"])
    body, _, p = payloads.cpu_push({"service_name": "after-fuzz"}, 5, time.time_ns())
    assert c.post("/push.v1.PusherService/Push", body)[0] == 200
    assert c.get_json("/api/v1/agents")["agents"] == []  # nothing of the findings stored
    now = int(time.time() * 1000)
    m = q.SelectMergeStacktracesRequest(
        profile_typeID=payloads.CPU_TYPE,
        label_selector='{service_name="after-fuzz"}',
        start=now - 3600_000,
        end=now + 60_000,
    )
    fg = c.connect("SelectMergeStacktraces", m, q.SelectMergeStacktracesResponse).flamegraph
    assert fg.total == int(p.values[:, 1].sum())


def test_a_70000_frame_stack_makes_a_flame_graph_in_linear_time(monkeypatch):
    """A fuzzed pprof of one 70,000-frame stack made every flame graph of its range take
    19 s (a Diff 34 s): the totals were summed with a count over every node at every depth,
    depth x nodes. The counts now span the nodes once, whatever the depth."""
    import numpy as np

    from aiflame.server.query import flame

    spans: list[int] = []
    real = np.bincount

    def counting(x, weights=None, minlength=0):  # type: ignore[no-untyped-def]
        spans.append(max(minlength, int(x.max()) + 1 if len(x) else 0))
        return real(x, weights=weights, minlength=minlength)

    monkeypatch.setattr(flame.np, "bincount", counting)
    depth = 20_000
    names = ["total", *(f"f{i}" for i in range(depth))]
    flat = np.concatenate((np.arange(1, depth + 1), np.array([1, 2, 3])))
    t = flame.build_tree(flat, np.array([depth, 3]), np.array([[5], [7]]), names)
    nodes = t.parent.size
    assert sum(spans) < 10 * nodes, (sum(spans), nodes)  # was depth x nodes: 4e8
    assert t.total[0, 0] == 12 and t.total[1, 0] == 12  # root, and "f0" (both stacks)
    assert t.depth.max() == depth and int(t.self_value[:, 0].sum()) == 12
    assert t.total[:, 0].min() == 5  # the deepest frame holds its stack's value
