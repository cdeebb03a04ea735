"""Grafana's Profiles Drilldown app (grafana/profiles-drilldown, formerly explore-profiles)
against aiflame server: every call its data path makes, with the parameters it sends (taken
from its sources, cited per test), decoded as it decodes the answers; the totals equal what
was pushed. Calls the app makes itself go as JSON (its fetch), those it makes through
Grafana's Pyroscope data source go as Connect protobuf (the data source's Go client)."""

from __future__ import annotations

import gzip
import json
import math
import sys
import textwrap
import time

import payloads
import pytest
from srvclient import Client
from test_querier import expected_tree, levels_to_tree, pyroscope_truncated

from aiflame.proto.pyroscope.google.v1 import profile_pb2 as gp
from aiflame.proto.pyroscope.google.v1.profile_pb2 import Profile
from aiflame.proto.pyroscope.push.v1 import push_pb2
from aiflame.proto.pyroscope.querier.v1 import querier_pb2 as q
from aiflame.proto.pyroscope.types.v1 import types_pb2 as t

CPU = payloads.CPU_TYPE


def app_post(c: Client, path: str, body: dict) -> dict:
    """A call the app makes with fetch(): JSON in, JSON out (HttpClient.ts)."""
    status, data = c.post(path, json.dumps(body).encode(), "application/json")
    assert status == 200, (path, status, data[:300])
    return json.loads(data)


def app_get(c: Client, path: str, params: dict) -> tuple[int, bytes]:
    status, data, _ = c.request("GET", path, params=params)
    return status, data


def bearer_to_tree(fb: dict, width: int = 4, offset: int = 0) -> dict[tuple[str, ...], tuple]:
    """The flamebearer's levels (delta-encoded x, total, self, name) as path -> (total,
    self), decoded as the app's flame graph decodes them (x offsets relative to the end of
    the previous node of the level)."""
    fg = q.FlameGraph(names=fb["flamebearer"]["names"])
    for level in fb["flamebearer"]["levels"]:
        row, skipped = [], 0
        for i in range(0, len(level), width):
            x, total, self_v = level[i + offset : i + offset + 3]
            if total:
                row += [x + skipped, total, self_v, level[i + width - 1]]
                skipped = 0
            else:  # absent on this side of a diff: its offset moves to the next node
                skipped += x
        fg.levels.add(values=row)
    return levels_to_tree(fg)


@pytest.fixture(scope="module")
def pushed(server):
    c = Client(server.url, tenant="drilldown")
    now = time.time_ns()
    profiles = {}
    for i, pod in enumerate(("api-0", "api-1", "worker-0")):
        body, _, p = payloads.cpu_push(
            {"service_name": "shop/api" if pod.startswith("api") else "shop/worker", "pod": pod},
            300 + i,
            now - (i + 1) * 20 * 10**9,
        )
        assert c.post("/push.v1.PusherService/Push", body)[0] == 200
        profiles[pod] = p
    return c, profiles, now // 1_000_000


def test_services_and_profile_types_from_series(pushed):
    """SeriesApiClient.list + formatSeriesResponse: services and their profile metrics."""
    c, _, now = pushed
    r = app_post(
        c,
        "/querier.v1.QuerierService/Series",
        {"start": now - 3600_000, "end": now, "labelNames": ["service_name", "__profile_type__"],
         "matchers": []},
    )  # fmt: skip
    services: dict[str, set[str]] = {}
    for entry in r["labelsSet"]:
        labels = {x["name"]: x["value"] for x in entry["labels"]}
        assert set(labels) == {"service_name", "__profile_type__"}
        services.setdefault(labels["service_name"], set()).add(labels["__profile_type__"])
    assert services == {
        "shop/api": {CPU, payloads.SAMPLES_TYPE},
        "shop/worker": {CPU, payloads.SAMPLES_TYPE},
    }
    # ProfileMetricVariable: Series of one service, the profile types only
    r = app_post(
        c,
        "/querier.v1.QuerierService/Series",
        {"start": now - 3600_000, "end": now, "labelNames": ["__profile_type__"],
         "matchers": ['{service_name="shop/worker"}']},
    )  # fmt: skip
    assert sorted(e["labels"][0]["value"] for e in r["labelsSet"]) == sorted(
        [CPU, payloads.SAMPLES_TYPE]
    )


def test_label_names_and_values_of_a_profile_type(pushed):
    """LabelsApiClient.queryToMatchers: {__profile_type__="...", service_name="..."}."""
    c, _, now = pushed
    matchers = [f'{{__profile_type__="{CPU}", service_name="shop/api"}}']
    names = app_post(
        c,
        "/querier.v1.QuerierService/LabelNames",
        {"matchers": matchers, "start": now - 3600_000, "end": now},
    )["names"]
    assert {"pod", "service_name", "__profile_type__", "__type__", "__unit__"} <= set(names)
    values = app_post(
        c,
        "/querier.v1.QuerierService/LabelValues",
        {"name": "pod", "matchers": matchers, "start": now - 3600_000, "end": now},
    )["names"]
    assert values == ["api-0", "api-1"]
    units = app_post(
        c,
        "/querier.v1.QuerierService/LabelValues",
        {
            "name": "__unit__",
            "matchers": ['{service_name="shop/api"}'],
            "start": now - 3600_000,
            "end": now,
        },
    )["names"]
    assert units == ["count", "nanoseconds"]
    # a matcher on the profile type's own label selects those series only
    r = app_post(
        c,
        "/querier.v1.QuerierService/LabelValues",
        {"name": "__profile_type__", "matchers": ['{__type__=~"cpu|nope"}']},
    )
    assert r["names"] == [CPU]


def test_time_series_through_the_data_source(pushed):
    """buildTimeSeriesQueryRunner: labelSelector `{service_name="x",$filters}` (a trailing
    comma when there are no filters), grouped by a label, limited; the data source's
    SelectSeries step is max(interval, 15 s); points add up to what was pushed."""
    c, profiles, now = pushed
    req = q.SelectSeriesRequest(
        profile_typeID=CPU,
        label_selector='{service_name="shop/api",}',
        start=now - 3600_000,
        end=now,
        step=15,
        group_by=["pod"],
        limit=4,
        exemplar_type=t.EXEMPLAR_TYPE_INDIVIDUAL,
    )
    r = c.connect("SelectSeries", req, q.SelectSeriesResponse)
    got = {s.labels[0].value: sum(p.value for p in s.points) for s in r.series}
    assert got == {k: float(profiles[k].values[:, 1].sum()) for k in ("api-0", "api-1")}
    # exemplars: each point's profile (its id and value), which the flame graph opens
    for s in r.series:
        for p in s.points:
            [ex] = p.exemplars
            assert ex.value == p.value and ex.profile_id
            sel = q.SelectMergeStacktracesRequest(
                profile_typeID=CPU, label_selector="{}", start=now - 3600_000, end=now,
                profile_id_selector=[ex.profile_id],
            )  # fmt: skip
            fg = c.connect("SelectMergeStacktraces", sel, q.SelectMergeStacktracesResponse)
            assert fg.flamegraph.total == ex.value


def test_flame_graph_and_max_nodes(pushed):
    """buildFlameGraphQueryRunner -> SelectMergeStacktraces (max_nodes from the app's
    settings): Grafana's levelsToTree of the answer is the pushed tree, truncated as
    Pyroscope truncates it."""
    c, profiles, now = pushed
    want = expected_tree([profiles["api-0"], profiles["api-1"]])
    for max_nodes in (16, 1024):
        req = q.SelectMergeStacktracesRequest(
            profile_typeID=CPU, label_selector='{service_name="shop/api",}', start=now - 3600_000,
            end=now, max_nodes=max_nodes,
        )  # fmt: skip
        fg = c.connect("SelectMergeStacktraces", req, q.SelectMergeStacktracesResponse).flamegraph
        assert levels_to_tree(fg) == pyroscope_truncated(want, max_nodes)
        assert fg.total == sum(
            int(p.values[:, 1].sum()) for k, p in profiles.items() if k.startswith("api")
        )


def test_render_json_dot_and_diff(pushed):
    """ProfileApiClient (/pyroscope/render, json and dot) and DiffProfileApiClient
    (/pyroscope/render-diff): flamebearer JSON as the app's FlamebearerProfile type reads it."""
    c, profiles, now = pushed
    query = f'{CPU}{{service_name="shop/api"}}'
    status, data = app_get(
        c, "/pyroscope/render",
        {"query": query, "from": now - 3600_000, "until": now, "format": "json", "max-nodes": 16},
    )  # fmt: skip
    assert status == 200
    fb = json.loads(data)
    assert fb["version"] == 1 and fb["metadata"]["format"] == "single"
    assert fb["metadata"]["units"] == "samples" and fb["metadata"]["sampleRate"] == 10**9
    want = expected_tree([profiles["api-0"], profiles["api-1"]])
    assert bearer_to_tree(fb) == pyroscope_truncated(want, 16)
    assert fb["flamebearer"]["numTicks"] == want[()][0]
    tl = fb["timeline"]
    assert sum(tl["samples"]) == want[()][0] and tl["durationDelta"] == 15
    assert len(tl["samples"]) == (now // 15_000 - (now - 3600_000) // 15_000)
    status, data = app_get(
        c, "/pyroscope/render",
        {"query": query, "from": now - 3600_000, "until": now, "format": "dot", "max-nodes": 12},
    )  # fmt: skip
    dot = data.decode()
    assert (
        status == 200
        and dot.startswith("digraph")
        and dot.count(" [label=") - dot.count("->") == 12
    )
    # an unparseable or typeless query is the client's mistake
    for bad in ('{service_name="shop/api"}', "process_cpu{}", ""):
        assert app_get(c, "/pyroscope/render", {"query": bad})[0] == 400
    left, right = profiles["api-0"], profiles["worker-0"]
    hour_ago = now - 3600_000
    status, data = app_get(
        c,
        "/pyroscope/render-diff",
        {
            "leftQuery": f'{CPU}{{pod="api-0"}}', "leftFrom": hour_ago, "leftUntil": now,
            "rightQuery": f'{CPU}{{pod="worker-0"}}', "rightFrom": hour_ago, "rightUntil": now,
        },
    )  # fmt: skip
    fb = json.loads(data)
    assert status == 200 and fb["metadata"]["format"] == "double"
    assert fb["leftTicks"] == int(left.values[:, 1].sum())
    assert fb["rightTicks"] == int(right.values[:, 1].sum())
    assert fb["flamebearer"]["numTicks"] == fb["leftTicks"] + fb["rightTicks"]
    for offset, p in ((0, left), (3, right)):  # each side decoded alone is its selection
        side = {k: v for k, v in bearer_to_tree(fb, 7, offset).items() if v[0]}
        assert side == expected_tree([p])
    status, _ = app_get(
        c, "/pyroscope/render-diff",
        {"leftQuery": f'{CPU}{{}}', "rightQuery": f'{payloads.SAMPLES_TYPE}{{}}'},
    )  # fmt: skip
    assert status == 400  # profile types must match


def test_pprof_download_and_function_details(pushed):
    """PprofApiClient: the binary PprofRequest (the app's own protobuf, field 7 a profile id)
    for the export, and the JSON request with a call site for the function details panel;
    the JSON pprof decoded as convertPprofToFunctionDetails reads it."""
    c, profiles, now = pushed
    req = q.SelectMergeProfileRequest(
        profile_typeID=CPU, label_selector='{service_name="shop/worker"}', start=now - 3600_000,
        end=now, max_nodes=16384,
    )  # fmt: skip
    prof = c.connect("SelectMergeProfile", req, gp.Profile)
    assert sum(s.value[0] for s in prof.sample) == int(profiles["worker-0"].values[:, 1].sum())
    # the call site of the hottest child of the root: its subtree only
    want = expected_tree([profiles["worker-0"]])
    site = max((p for p in want if len(p) == 2), key=lambda p: want[p][0])
    r = app_post(
        c,
        "/querier.v1.QuerierService/SelectMergeProfile",
        {"profile_typeID": CPU, "label_selector": '{service_name="shop/worker"}',
         "start": (now - 3600_000) // 1000 * 1000, "end": now // 1000 * 1000,
         "stackTraceSelector": {"call_site": [{"name": n} for n in site]}, "maxNodes": 16384},
    )  # fmt: skip
    strings = r["stringTable"]
    functions = {f["id"]: strings[int(f["name"])] for f in r["function"]}
    names = {loc["id"]: [functions[x["functionId"]] for x in loc["line"]] for loc in r["location"]}
    total = 0
    for s in r["sample"]:
        path = [n for loc in reversed(s["locationId"]) for n in names[loc]]
        assert tuple(path[:2]) == site
        total += int(s["value"][0])
    assert total == want[site][0]
    # a truncated pprof keeps the total, what is folded under "other"
    small = c.connect("SelectMergeProfile", q.SelectMergeProfileRequest(
        profile_typeID=CPU, label_selector='{service_name="shop/worker"}', start=now - 3600_000,
        end=now, max_nodes=8), gp.Profile)  # fmt: skip
    assert sum(s.value[0] for s in small.sample) == want[()][0]
    assert "other" in small.string_table and len(small.location) <= 8 + 8


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field, as protobufjs' Writer writes it."""
    out, n = bytearray([number << 3 | 2]), len(payload)
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out) + payload


def test_stack_frame_filter(pushed):
    """The app's frame filter (encodeFrameFilter.ts: StackTraceSelector field 3, names and
    regexes to include or exclude), appended to its binary PprofRequest and in the JSON of
    the function details: the stacks with every included function and no excluded one."""
    c, profiles, now = pushed
    p = profiles["worker-0"]
    stacks = [
        (tuple(p.stack_names(int(p.sample_stack[i]))), int(p.values[i, 1])) for i in range(len(p))
    ]
    name = "train_step (train.py:22)"
    with_it = sum(v for names, v in stacks if name in names)
    assert 0 < with_it < sum(v for _, v in stacks)
    base = q.SelectMergeProfileRequest(
        profile_typeID=CPU, label_selector='{service_name="shop/worker"}', start=now - 3600_000,
        end=now, max_nodes=16384,
    ).SerializeToString()  # fmt: skip
    for number, want in ((1, with_it), (2, sum(v for _, v in stacks) - with_it)):
        body = base + _field(6, _field(3, _field(number, name.encode())))
        status, data = c.post("/querier.v1.QuerierService/SelectMergeProfile", body)
        assert status == 200
        assert sum(s.value[0] for s in gp.Profile.FromString(data).sample) == want
    regex = "train_step.*"
    r = app_post(
        c,
        "/querier.v1.QuerierService/SelectMergeProfile",
        {"profile_typeID": CPU, "label_selector": '{service_name="shop/worker"}',
         "start": now - 3600_000, "end": now, "maxNodes": 16384,
         "stackTraceSelector": {"call_site": [], "frameFilter": {
             "includeFunctionNames": [], "excludeFunctionNames": [],
             "includeFunctionNameRegexes": [regex], "excludeFunctionNameRegexes": []}}},
    )  # fmt: skip
    assert sum(int(s["value"][0]) for s in r["sample"]) == with_it
    status, _ = c.post(
        "/querier.v1.QuerierService/SelectMergeProfile",
        json.dumps({"profile_typeID": CPU, "start": now - 1000, "end": now,
                    "stackTraceSelector": {"frameFilter": {"includeFunctionNameRegexes": ["("]}}}
                   ).encode(),
        "application/json",
    )  # fmt: skip
    assert status == 400


def test_settings_recording_rules_stats_and_query_analysis(pushed):
    c, _, now = pushed
    base = "/settings.v1.SettingsService/"
    assert app_post(c, base + "Get", {}) in ({}, {"settings": []})
    value = json.dumps({"maxNodes": 8192, "enableFlameGraphDotComExport": False})
    r = app_post(c, base + "Set", {"setting": {"name": "pluginSettings", "value": value}})
    assert r["setting"]["name"] == "pluginSettings" and int(r["setting"]["modifiedAt"]) > 0
    got = app_post(c, base + "Get", {})["settings"]
    assert [(s["name"], json.loads(s["value"])["maxNodes"]) for s in got] == [
        ("pluginSettings", 8192)
    ]
    # an update older than the stored one is refused; settings are per tenant
    status, data = c.post(
        base + "Set",
        json.dumps(
            {"setting": {"name": "pluginSettings", "value": "{}", "modifiedAt": 1}}
        ).encode(),
        "application/json",
    )
    assert status == 409 and json.loads(data)["code"] == "already_exists"
    other = Client(c.host and f"http://{c.host}:{c.port}", tenant="drilldown-other")
    assert app_post(other, base + "Get", {}) in ({}, {"settings": []})
    app_post(c, base + "Delete", {"name": "pluginSettings"})
    assert app_post(c, base + "Get", {}) in ({}, {"settings": []})
    rules = app_post(c, "/settings.v1.RecordingRulesService/ListRecordingRules", {})
    assert rules.get("rules", []) == []
    stats = app_post(c, "/querier.v1.QuerierService/GetProfileStats", {})
    assert stats["dataIngested"] and int(stats["oldestProfileTime"]) <= int(
        stats["newestProfileTime"]
    )
    scope = app_post(
        c,
        "/querier.v1.QuerierService/AnalyzeQuery",
        {"start": now - 3600_000, "end": now, "query": f'{CPU}{{service_name="shop/api"}}'},
    )
    assert int(scope["queryImpact"]["totalQueriedSeries"]) == 2
    assert int(scope["queryScopes"][0]["profileCount"]) == 2


def test_heatmap_of_individual_profiles(pushed):
    """SelectHeatmap (individual profiles): Pyroscope's buckets; every profile counted once,
    the exemplar of each cell the profile of the highest value."""
    c, profiles, now = pushed
    step = max(1, math.ceil(3600 / 64))
    r = app_post(
        c,
        "/querier.v1.QuerierService/SelectHeatmap",
        {"profileTypeID": CPU, "labelSelector": '{service_name="shop/api"}',
         "start": now - 3600_000, "end": now, "step": step, "groupBy": [],
         "queryType": "HEATMAP_QUERY_TYPE_INDIVIDUAL", "exemplarType": "EXEMPLAR_TYPE_INDIVIDUAL"},
    )  # fmt: skip
    [series] = r["series"]
    counts = sum(sum(slot["counts"]) for slot in series["slots"])
    assert counts == 2
    values = sorted(int(e["value"]) for s in series["slots"] for e in s.get("exemplars", []))
    assert values == sorted(int(profiles[k].values[:, 1].sum()) for k in ("api-0", "api-1"))
    for slot in series["slots"]:
        assert len(slot["yMin"]) == 20 and slot["yMin"] == sorted(slot["yMin"])
        assert (int(slot["timestamp"]) - (now - 3600_000)) % (step * 1000) == 0
    bad = {"profileTypeID": CPU, "labelSelector": "{}", "start": now - 1000, "end": now, "step": 1}
    status, _ = c.post(
        "/querier.v1.QuerierService/SelectHeatmap", json.dumps(bad).encode(), "application/json"
    )
    assert status == 400  # no query type


SPAN_PROGRAM = textwrap.dedent(
    """
    import sys, time
    import pyroscope
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from pyroscope.otel import PyroscopeSpanProcessor

    pyroscope.configure(application_name="span-app", server_address=sys.argv[1],
                        sample_rate=100, upload_interval=2, tenant_id=sys.argv[2])
    provider = TracerProvider()
    provider.add_span_processor(PyroscopeSpanProcessor())
    trace.set_tracer_provider(provider)
    tracer = trace.get_tracer("checkout")

    def spin(seconds):
        t = time.time()
        while time.time() - t < seconds:
            pass

    def handle_cart():
        spin(0.3)

    def handle_pay():
        spin(0.15)

    end = time.time() + float(sys.argv[3])
    while time.time() < end:
        with tracer.start_as_current_span("cart"):
            handle_cart()
        with tracer.start_as_current_span("pay"):
            handle_pay()
    pyroscope.shutdown()
    """
)


def _span_samples(pushes) -> dict[str, dict[int, int]]:
    """span id -> {profile time ms: cpu nanoseconds} from what the SDK pushed."""
    out: dict[str, dict[int, int]] = {}
    for body, headers, _ in pushes:
        if headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        for series in push_pb2.PushRequest.FromString(body).series:
            for smp in series.samples:
                raw = smp.raw_profile
                p = Profile.FromString(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
                st = p.string_table
                col = [st[v.type] for v in p.sample_type].index("cpu")
                for s in p.sample:
                    span = {st[lb.key]: st[lb.str] for lb in s.label}.get("span_id")
                    if span:
                        per = out.setdefault(span, {})
                        per[p.time_nanos // 10**6] = (
                            per.get(p.time_nanos // 10**6, 0) + s.value[col]
                        )
    return out


def test_span_profiles_of_the_pyroscope_sdk(server, tmp_path):
    """The real pyroscope-io SDK with its OpenTelemetry span processor (pyroscope-otel):
    span ids stored as Pyroscope stores them (no series of their own); the span heatmap's
    exemplars name them; SelectMergeSpanProfile of one span is what was pushed for it."""
    pytest.importorskip("pyroscope.otel", reason="pyroscope-otel and opentelemetry-sdk (pip)")
    import subprocess

    from test_pyroscope_sdk import Recorder

    tenant = "drilldown-spans"
    rec = Recorder(server.url)
    script = tmp_path / "spans.py"
    script.write_text(SPAN_PROGRAM)
    try:
        subprocess.run([sys.executable, str(script), rec.url, tenant, "5"], check=True, timeout=120)
    finally:
        rec.close()
    assert rec.pushes and all(status == 200 for _, _, status in rec.pushes)
    spans = _span_samples(rec.pushes)
    assert len(spans) >= 4, "the SDK labelled no spans"
    c = Client(server.url, tenant=tenant)
    c.settle()
    now = int(time.time() * 1000)
    start, end = now - 600_000, now + 60_000
    # span ids make no series: the service's series are per span name only
    names = app_post(
        c, "/querier.v1.QuerierService/LabelValues",
        {"name": "span_name", "matchers": ['{service_name="span-app"}'],
         "start": start, "end": end},
    )["names"]  # fmt: skip
    assert set(names) <= {"cart", "pay"} and names
    for label in ("span_id", "trace_id", "profile_id"):
        r = app_post(
            c, "/querier.v1.QuerierService/LabelValues", {"name": label, "start": start, "end": end}
        )
        assert r.get("names", []) == []
    # buildSpanHeatmapQuery: the span heatmap with span exemplars
    r = app_post(
        c,
        "/querier.v1.QuerierService/SelectHeatmap",
        {"profileTypeID": CPU, "labelSelector": '{service_name="span-app"}',
         "start": start, "end": end, "step": max(1, math.ceil((end - start) / 1000 / 64)),
         "groupBy": [], "queryType": 2, "exemplarType": 3},
    )  # fmt: skip
    [series] = r["series"]
    points = sum(per.__len__() for per in spans.values())
    assert sum(sum(s["counts"]) for s in series["slots"]) == points
    rows = [e for s in series["slots"] for e in s.get("exemplars", [])]
    assert rows and all(e["spanId"] in spans for e in rows)
    for e in rows:  # an exemplar is one span in one profile
        assert int(e["value"]) == spans[e["spanId"]][int(e["timestamp"])]
        assert {x["name"]: x["value"] for x in e["labels"]}["span_name"] in ("cart", "pay")
    # the flame graph of one span (Grafana's data source: SelectMergeSpanProfile)
    for span in list(spans)[:3]:
        req = q.SelectMergeSpanProfileRequest(
            profile_typeID=CPU, label_selector='{service_name="span-app"}', span_selector=[span],
            start=start, end=end, max_nodes=16384,
        )  # fmt: skip
        fg = c.connect("SelectMergeSpanProfile", req, q.SelectMergeSpanProfileResponse).flamegraph
        assert fg.total == sum(spans[span].values())
        leaves = {
            fg.names[v[i + 3]]
            for level in fg.levels
            for v in [level.values]
            for i in range(0, len(v), 4)
            if v[i + 2]
        }
        assert leaves & {"spin", "handle_cart", "handle_pay"}
    status, _ = c.post(
        "/querier.v1.QuerierService/SelectMergeSpanProfile",
        json.dumps(
            {"profile_typeID": CPU, "span_selector": ["xyz"], "start": start, "end": end}
        ).encode(),
        "application/json",
    )
    assert status == 400  # a span id is 16 hex digits
