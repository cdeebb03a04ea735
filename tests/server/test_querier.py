"""querier.v1.QuerierService as Grafana's Pyroscope data source calls it, over the Connect
protocol (binary and JSON), against the messages generated from Pyroscope's own protos:
the flame graph levels decode (as Grafana decodes them) to the pushed stacks, with
max_nodes, SelectSeries with step/group_by/aggregation/limit, SelectMergeProfile's pprof,
Diff, label matchers, and the legacy /ingest (folded and pprof)."""

from __future__ import annotations

import gzip
import heapq
import json
import time

import payloads
import pytest
from google.protobuf import json_format
from srvclient import Client

from aiflame.proto.pyroscope.google.v1 import profile_pb2 as gp
from aiflame.proto.pyroscope.querier.v1 import querier_pb2 as q
from aiflame.proto.pyroscope.types.v1 import types_pb2 as t


def levels_to_tree(fg) -> dict[tuple[str, ...], tuple[int, int]]:
    """Grafana's levelsToTree (pkg/tsdb/grafana-pyroscope-datasource/query.go), returning
    path -> (total, self): offsets are relative to the previous item's end on the level."""
    levels = [list(level.values) for level in fg.levels]
    root = {"start": 0, "value": levels[0][1], "self": levels[0][2], "path": ()}
    out = {(): (root["value"], root["self"])}
    parents = [root]
    for level in levels[1:]:
        nxt, i, offset = [], 0, 0
        parent = parents.pop(0)
        while i < len(level):
            start = level[i] + offset
            value, self_v, name = level[i + 1], level[i + 2], fg.names[level[i + 3]]
            if start >= parent["start"] and start + value <= parent["start"] + parent["value"]:
                node = {
                    "start": start,
                    "value": value,
                    "self": self_v,
                    "path": (*parent["path"], name),
                }
                assert node["path"] not in out
                out[node["path"]] = (value, self_v)
                nxt.append(node)
                i += 4
                offset = start + value
            else:
                parent = parents.pop(0)
        parents = nxt
    return out


def pyroscope_truncated(tree: dict[tuple[str, ...], tuple[int, int]], max_nodes: int):
    """Pyroscope's truncation (pkg/model/tree.go minValue, flamegraph.go): the nodes whose
    total is at least the max_nodes-th largest (the root not counted, ties kept), the rest
    of each kept node's children folded into its "other" child."""
    totals = [total for path, (total, _) in tree.items() if path]
    if len(totals) <= max_nodes:
        return dict(tree)
    floor = heapq.nlargest(max_nodes, totals)[-1]
    out = {(): tree[()]}
    for path, (total, self_v) in sorted(tree.items(), key=lambda kv: len(kv[0])):
        if not path or path[:-1] not in out or path[-1] == "other":
            continue
        if total >= floor:
            out[path] = (total, self_v)
        else:
            other = (*path[:-1], "other")
            was = out.get(other, (0, 0))
            out[other] = (was[0] + total, was[1] + total)
    return out


def expected_tree(profiles, col: int = 1) -> dict[tuple[str, ...], tuple[int, int]]:
    tree: dict[tuple[str, ...], list[int]] = {(): [0, 0]}
    for p in profiles:
        for i in range(len(p)):
            names = tuple(p.stack_names(int(p.sample_stack[i])))
            v = int(p.values[i, col])
            for d in range(len(names) + 1):
                tree.setdefault(names[:d], [0, 0])[0] += v
            tree[names][1] += v
    return {k: (a, b) for k, (a, b) in tree.items() if a}


@pytest.fixture(scope="module")
def pushed(server):
    c = Client(server.url, tenant="querier")
    now = time.time_ns()
    profiles = {}
    for i, (host, pod) in enumerate((("h1", "train-0"), ("h1", "train-1"), ("h2", "infer-0"))):
        body, _, p = payloads.cpu_push(
            {"service_name": "llm", "host": host, "pod": pod}, 100 + i, now - i * 10**9
        )
        assert c.post("/push.v1.PusherService/Push", body)[0] == 200
        profiles[pod] = p
    return c, profiles, now // 1_000_000


def test_merge_stacktraces_decodes_to_the_pushed_stacks(pushed):
    c, profiles, now = pushed
    req = q.SelectMergeStacktracesRequest(
        profile_typeID=payloads.CPU_TYPE,
        label_selector='{service_name="llm", pod=~"train-.*"}',
        start=now - 600_000,
        end=now + 60_000,
    )
    fg = c.connect("SelectMergeStacktraces", req, q.SelectMergeStacktracesResponse).flamegraph
    got = levels_to_tree(fg)
    want = expected_tree([profiles["train-0"], profiles["train-1"]])
    assert got == want
    assert fg.total == want[()][0] and fg.names[0] == "total"
    assert fg.max_self == max(s for _, s in want.values())
    # max_nodes: Pyroscope's truncation, which fills the budget: exactly the max_nodes
    # largest nodes (ties kept), the rest folded into an "other" child of their parent.
    for budget in (16, 50):
        req.max_nodes = budget
        small = c.connect("SelectMergeStacktraces", req, q.SelectMergeStacktracesResponse)
        tree = levels_to_tree(small.flamegraph)
        assert tree == pyroscope_truncated(want, budget)
        real = [p for p in tree if p and p[-1] != "other"]
        ranked = sorted((t for p, (t, _) in want.items() if p), reverse=True)
        assert len(real) == budget + ranked[budget:].count(ranked[budget - 1])
        assert small.flamegraph.total == fg.total and "other" in small.flamegraph.names
    # JSON codec (Connect's protojson), as a browser or curl would call it.
    status, data = c.post(
        "/querier.v1.QuerierService/SelectMergeStacktraces",
        json_format.MessageToJson(req).encode(),
        "application/json",
    )
    assert status == 200
    as_json = json_format.Parse(data, q.SelectMergeStacktracesResponse())
    assert as_json.flamegraph.total == fg.total


def test_labels_and_series(pushed):
    c, _profiles, now = pushed
    r = c.connect(
        "LabelValues",
        t.LabelValuesRequest(
            name="pod", matchers=['{host="h1"}'], start=now - 600_000, end=now + 60_000
        ),
        t.LabelValuesResponse,
    )
    assert list(r.names) == ["train-0", "train-1"]
    r = c.connect(
        "LabelValues",
        t.LabelValuesRequest(name="pod", matchers=['{pod!~"train-.*"}']),
        t.LabelValuesResponse,
    )
    assert list(r.names) == ["infer-0"]
    r = c.connect("LabelNames", t.LabelNamesRequest(matchers=["{}"]), t.LabelNamesResponse)
    assert {"__name__", "service_name", "host", "pod"} <= set(r.names)
    assert "__delta__" not in r.names  # Pyroscope's push flag, not a label of the series
    s = c.connect(
        "Series",
        q.SeriesRequest(matchers=['{host="h2"}'], label_names=["pod", "host"]),
        q.SeriesResponse,
    )
    assert [{lb.name: lb.value for lb in x.labels} for x in s.labels_set] == [
        {"host": "h2", "pod": "infer-0"}
    ]
    stats = c.connect("GetProfileStats", t.GetProfileStatsRequest(), t.GetProfileStatsResponse)
    assert stats.data_ingested and stats.oldest_profile_time <= stats.newest_profile_time


def test_select_series_step_group_by_aggregation_limit(pushed):
    c, profiles, now = pushed
    base = dict(
        profile_typeID=payloads.CPU_TYPE,
        label_selector='{service_name="llm"}',
        start=now - 600_000,
        end=now + 60_000,
    )
    r = c.connect(
        "SelectSeries",
        q.SelectSeriesRequest(**base, step=1, group_by=["pod"]),
        q.SelectSeriesResponse,
    )
    got = {x.labels[0].value: sum(p.value for p in x.points) for x in r.series}
    assert got == {k: float(p.values[:, 1].sum()) for k, p in profiles.items()}
    assert all(p.timestamp % 1000 == (now - 600_000) % 1000 for x in r.series for p in x.points)
    r = c.connect(
        "SelectSeries",
        q.SelectSeriesRequest(**base, step=3600, group_by=["host"], limit=1),
        q.SelectSeriesResponse,
    )
    assert [x.labels[0].value for x in r.series] == ["h1"]
    avg = t.TIME_SERIES_AGGREGATION_TYPE_AVERAGE
    r = c.connect(
        "SelectSeries",
        q.SelectSeriesRequest(**base, step=3600, group_by=["host"], aggregation=avg),
        q.SelectSeriesResponse,
    )
    h1 = next(x for x in r.series if x.labels[0].value == "h1")
    assert h1.points[0].value == pytest.approx(
        (profiles["train-0"].values[:, 1].sum() + profiles["train-1"].values[:, 1].sum()) / 2
    )


def test_merge_profile_and_diff(pushed):
    c, profiles, now = pushed
    sel = dict(profile_typeID=payloads.CPU_TYPE, start=now - 600_000, end=now + 60_000)
    prof = c.connect(
        "SelectMergeProfile",
        q.SelectMergeProfileRequest(**sel, label_selector='{pod="infer-0"}'),
        gp.Profile,
    )
    st = prof.string_table
    assert [(st[v.type], st[v.unit]) for v in prof.sample_type] == [("cpu", "nanoseconds")]
    assert sum(s.value[0] for s in prof.sample) == int(profiles["infer-0"].values[:, 1].sum())
    left = q.SelectMergeStacktracesRequest(**sel, label_selector='{pod="train-0"}')
    right = q.SelectMergeStacktracesRequest(**sel, label_selector='{pod="infer-0"}')
    d = c.connect("Diff", q.DiffRequest(left=left, right=right), q.DiffResponse).flamegraph
    assert d.leftTicks == int(profiles["train-0"].values[:, 1].sum())
    assert d.rightTicks == int(profiles["infer-0"].values[:, 1].sum())
    root = d.levels[0].values
    assert len(root) == 7 and root[1] == d.leftTicks and root[4] == d.rightTicks
    # Each side, decoded on its own, is that selection's flame graph.
    for side, p in ((0, profiles["train-0"]), (3, profiles["infer-0"])):
        fg = q.FlameGraph(names=d.names)
        for level in d.levels:
            v = level.values
            row, skipped = [], 0
            for i in range(0, len(v), 7):
                if v[i + side + 1]:
                    row += [v[i + side] + skipped, v[i + side + 1], v[i + side + 2], v[i + 6]]
                    skipped = 0
                else:  # absent on this side (zero width): its offset moves to the next node
                    skipped += v[i + side]
            fg.levels.add(values=row)
        assert levels_to_tree(fg) == expected_tree([p])


def test_legacy_ingest_folded_and_pprof(server):
    c = Client(server.url, tenant="legacy")
    now = int(time.time())
    folded = b"main;work;hot 30\nmain;work;cold 10\nmain;idle 5\n"
    params = {
        "name": "legacy-app.cpu{env=prod,region=eu}",
        "format": "folded",
        "from": now - 10,
        "until": now,
        "sampleRate": 100,
        "spyName": "pyspy",
    }
    key = {"Idempotency-Key": "legacy-1"}
    assert c.post("/ingest", folded, "text/plain", params=params, headers=key)[0] == 200
    # retried with its key: stored once
    assert c.post("/ingest", folded, "text/plain", params=params, headers=key)[0] == 200
    raw = payloads.pprof_bytes(payloads.cpu_profile(7, now * 10**9))
    params2 = {
        "name": "legacy-app.cpu{env=prod}",
        "format": "pprof",
        "from": now - 10,
        "until": now,
    }
    assert c.post("/ingest", raw, "application/octet-stream", params=params2)[0] == 200
    req = q.SelectMergeStacktracesRequest(
        profile_typeID="process_cpu:samples:count:cpu:nanoseconds",
        label_selector='{service_name="legacy-app", region="eu"}',
        start=(now - 60) * 1000,
        end=(now + 60) * 1000,
    )
    fg = c.connect("SelectMergeStacktraces", req, q.SelectMergeStacktracesResponse).flamegraph
    assert levels_to_tree(fg) == {
        (): (45, 0),
        ("main",): (45, 0),
        ("main", "work"): (40, 0),
        ("main", "work", "hot"): (30, 30),
        ("main", "work", "cold"): (10, 10),
        ("main", "idle"): (5, 5),
    }
    req.profile_typeID = payloads.CPU_TYPE  # samples x 1e9 / sampleRate
    cpu = c.connect("SelectMergeStacktraces", req, q.SelectMergeStacktracesResponse).flamegraph
    assert cpu.total == 45 * 10_000_000
    r = c.connect("LabelValues", t.LabelValuesRequest(name="spy_name"), t.LabelValuesResponse)
    assert list(r.names) == ["pyspy"]


def test_json_push(server):
    """The push API in Connect's JSON form (raw_profile as base64)."""
    c = Client(server.url, tenant="json-push")
    raw = payloads.pprof_bytes(payloads.cpu_profile(9, time.time_ns()))
    body = payloads.push_request(
        [({"__name__": "process_cpu", "service_name": "js"}, [(raw, "json-1")])]
    )
    from aiflame.proto.pyroscope.push.v1 import push_pb2

    text = json_format.MessageToJson(push_pb2.PushRequest.FromString(body))
    assert c.post("/push.v1.PusherService/Push", text.encode(), "application/json")[0] == 200
    status, data = c.post(
        "/push.v1.PusherService/Push",
        gzip.compress(text.encode()),
        "application/json",
        headers={"Content-Encoding": "gzip"},
    )
    assert status == 200 and json.loads(data) == {}


def test_a_repeated_dictionary_is_decoded_once_and_stored_the_same(server):
    """Two periods of one program whose code (functions, locations, strings) is the same:
    the second push decodes only its samples and gives the same flame graph."""
    c = Client(server.url, tenant="dictionaries")
    now = time.time_ns()
    p = payloads.cpu_profile(7, now)
    raw = payloads.pprof_bytes(p)

    def hits() -> int:
        status, data, _ = c.request("GET", "/metrics")
        assert status == 200
        line = next(x for x in data.decode().splitlines() if 'cache="hit"' in x)
        return int(line.split()[-1])

    before = hits()
    for pod, pid in (("a", "dict-a"), ("b", "dict-b")):
        labels = {"__name__": "process_cpu", "service_name": "dict", "pod": pod}
        body = payloads.push_request([(labels, [(raw, pid)])])
        assert c.post("/push.v1.PusherService/Push", body)[0] == 200
    assert hits() >= before + 1  # the second at least (the first may be known already)
    trees = []
    for pod in ("a", "b"):
        req = q.SelectMergeStacktracesRequest(
            profile_typeID=payloads.CPU_TYPE,
            label_selector=f'{{service_name="dict", pod="{pod}"}}',
            start=now // 1_000_000 - 600_000,
            end=now // 1_000_000 + 60_000,
        )
        fg = c.connect("SelectMergeStacktraces", req, q.SelectMergeStacktracesResponse)
        trees.append(levels_to_tree(fg.flamegraph))
    assert trees[0] == trees[1] == expected_tree([p])
