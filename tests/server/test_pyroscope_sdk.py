"""The real Pyroscope Python SDK (pyroscope-io, PyPI) profiling a program with known hot
functions and pushing to aiflame server, unchanged: what it pushed is what the store holds
and what Grafana's query returns (sum pushed == sum stored == sum returned)."""

from __future__ import annotations

import gzip
import http.server
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request

import pytest
from srvclient import Client

from aiflame.proto.pyroscope.google.v1.profile_pb2 import Profile
from aiflame.proto.pyroscope.push.v1 import push_pb2
from aiflame.proto.pyroscope.querier.v1 import querier_pb2 as q
from aiflame.proto.pyroscope.types.v1 import types_pb2 as t

pytest.importorskip("pyroscope", reason="the Pyroscope SDK test needs pyroscope-io (pip)")

PROGRAM = textwrap.dedent(
    """
    import sys, time
    import pyroscope

    pyroscope.configure(
        application_name="sdk-app",
        server_address=sys.argv[1],
        sample_rate=100,
        upload_interval=2,
        tags={"region": "eu-west"},
        tenant_id=sys.argv[2],
    )

    def hot_a():
        t = time.time()
        while time.time() - t < 0.05:
            pass

    def hot_b():
        t = time.time()
        while time.time() - t < 0.15:
            pass

    end = time.time() + float(sys.argv[3])
    while time.time() < end:
        hot_a()
        hot_b()
    pyroscope.shutdown()
    """
)


class Recorder:
    """A proxy in front of the server that keeps what the SDK pushed and what it was told."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.pushes: list[tuple[bytes, dict[str, str], int]] = []
        rec = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                req = urllib.request.Request(upstream + self.path, data=body, headers=headers)
                try:
                    with urllib.request.urlopen(req, timeout=60) as r:
                        status, data = r.status, r.read()
                except urllib.error.HTTPError as e:
                    status, data = e.code, e.read()
                rec.pushes.append((body, {k.lower(): v for k, v in self.headers.items()}, status))
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()


def pushed_cpu(body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, int]]:
    """Total cpu nanoseconds of a push, and per leaf function."""
    if headers.get("content-encoding") == "gzip":
        body = gzip.decompress(body)
    req = push_pb2.PushRequest.FromString(body)
    total, leaves = 0, {}
    for series in req.series:
        for s in series.samples:
            raw = s.raw_profile
            p = Profile.FromString(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
            st = p.string_table
            col = [st[v.type] for v in p.sample_type].index("cpu")
            fn = {f.id: st[f.name] for f in p.function}
            loc = {loc.id: fn[loc.line[0].function_id] for loc in p.location}
            for smp in p.sample:
                total += smp.value[col]
                leaf = loc[smp.location_id[0]]
                leaves[leaf] = leaves.get(leaf, 0) + smp.value[col]
    return total, leaves


def test_pyroscope_sdk_push_is_stored_and_returned(server, tenant, tmp_path):
    rec = Recorder(server.url)
    script = tmp_path / "hot.py"
    script.write_text(PROGRAM)
    try:
        subprocess.run([sys.executable, str(script), rec.url, tenant, "6"], check=True, timeout=120)
    finally:
        rec.close()
    assert rec.pushes, "the SDK pushed nothing"
    assert all(status == 200 for _, _, status in rec.pushes), [s for _, _, s in rec.pushes]
    assert all(h.get("x-scope-orgid") == tenant for _, h, _ in rec.pushes)
    sent = [pushed_cpu(b, h) for b, h, _ in rec.pushes]
    total_pushed = sum(s[0] for s in sent)
    leaves: dict[str, int] = {}
    for _, per_leaf in sent:
        for k, v in per_leaf.items():
            leaves[k] = leaves.get(k, 0) + v
    # The program spends ~1/4 of its time in hot_a and ~3/4 in hot_b.
    assert leaves["hot_b"] > 2 * leaves["hot_a"] > 0

    c = Client(server.url, tenant=tenant)
    # The SDK pushed past this client (through the recorder): wait until what the server
    # acknowledged is committed, as a reader a moment later would see it.
    c.settle()
    now = int(time.time() * 1000)
    cpu = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"
    types = c.connect(
        "ProfileTypes",
        q.ProfileTypesRequest(start=now - 3600_000, end=now + 60_000),
        q.ProfileTypesResponse,
    )
    assert cpu in [pt.ID for pt in types.profile_types]
    names = c.connect(
        "LabelNames",
        t.LabelNamesRequest(matchers=['{service_name="sdk-app"}']),
        t.LabelNamesResponse,
    )
    assert {"service_name", "region"} <= set(names.names)
    values = c.connect("LabelValues", t.LabelValuesRequest(name="region"), t.LabelValuesResponse)
    assert list(values.names) == ["eu-west"]

    req = q.SelectMergeStacktracesRequest(
        profile_typeID=cpu,
        label_selector='{service_name="sdk-app", region=~"eu-.*"}',
        start=now - 3600_000,
        end=now + 60_000,
        max_nodes=1024,
    )
    fg = c.connect("SelectMergeStacktraces", req, q.SelectMergeStacktracesResponse).flamegraph
    assert fg.total == total_pushed  # sum pushed == sum returned
    # Self values of the leaves, from Pyroscope's level encoding.
    got: dict[str, int] = {}
    for level in fg.levels:
        v = level.values
        for i in range(0, len(v), 4):
            got[fg.names[v[i + 3]]] = got.get(fg.names[v[i + 3]], 0) + v[i + 2]
    assert got["hot_a"] == leaves["hot_a"] and got["hot_b"] == leaves["hot_b"]

    # Over time: the points of SelectSeries add up to the same total.
    series = c.connect(
        "SelectSeries",
        q.SelectSeriesRequest(
            profile_typeID=cpu, label_selector="{}", start=now - 3600_000, end=now + 60_000, step=60
        ),
        q.SelectSeriesResponse,
    )
    assert sum(p.value for s in series.series for p in s.points) == total_pushed
