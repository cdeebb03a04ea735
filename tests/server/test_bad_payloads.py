"""A client's mistake is a clear 4xx, never a 500; nothing of it is stored; the server keeps
serving: corrupt and truncated pprof, gzip bombs, huge or invalid label sets, bad JSON."""

from __future__ import annotations

import gzip
import json
import time

import payloads
from srvclient import Client

from aiflame.proto.pyroscope.querier.v1 import querier_pb2 as q

PUSH = "/push.v1.PusherService/Push"


def _bomb(size: int) -> bytes:
    return gzip.compress(b"\0" * size, compresslevel=9)


def test_bad_pushes_are_4xx_and_store_nothing(server, tenant):
    c = Client(server.url, tenant=tenant)
    now = time.time_ns()
    good, _, _ = payloads.cpu_push({"service_name": "bad"}, 3, now)
    raw = payloads.pprof_bytes(payloads.cpu_profile(3, now))
    inflated = gzip.decompress(raw)
    labels = {"__name__": "process_cpu", "service_name": "bad"}
    many = {**labels, **{f"k{i}": "v" for i in range(100)}}
    cases = {
        "corrupt pprof": (
            payloads.push_request([(labels, [(gzip.compress(b"\xff" * 64), "c1")])]),
            {},
        ),
        "truncated pprof": (
            payloads.push_request(
                [(labels, [(gzip.compress(inflated[: len(inflated) // 2]), "c2")])]
            ),
            {},
        ),
        "truncated gzip": (payloads.push_request([(labels, [(raw[: len(raw) // 2], "c3")])]), {}),
        "gzip bomb in a profile": (
            payloads.push_request([(labels, [(_bomb(300 << 20), "c4")])]),
            {},
        ),
        "gzip bomb body": (_bomb(400 << 20), {"Content-Encoding": "gzip"}),
        "huge label set": (payloads.push_request([(many, [(raw, "c5")])]), {}),
        "invalid label name": (
            payloads.push_request([({**labels, "bad-name": "x"}, [(raw, "c6")])]),
            {},
        ),
        "label value too long": (
            payloads.push_request([({**labels, "pod": "x" * 5000}, [(raw, "c7")])]),
            {},
        ),
        "no __name__": (payloads.push_request([({"service_name": "bad"}, [(raw, "c8")])]), {}),
        "not protobuf": (b"hello, this is not a push request", {}),
        "not JSON": (b"{not json", {"Content-Type": "application/json"}),
    }
    for name, (body, headers) in cases.items():
        h = {"Content-Type": "application/proto", **headers}
        status, data = c.post(PUSH, body, headers=h)
        assert 400 <= status < 500, (name, status, data[:300])
        err = json.loads(data)
        assert err["code"] in ("invalid_argument", "resource_exhausted"), (name, err)
        assert err["message"], name
    # One bad profile among good ones: the whole push is refused, nothing of it stored.
    mixed = payloads.push_request(
        [(labels, [(raw, "ok-1"), (gzip.compress(b"\x00\x01garbage"), "bad-1")])]
    )
    assert 400 <= c.post(PUSH, mixed)[0] < 500
    # Too large a body, by Content-Length.
    assert c.post(PUSH, b"\0" * (33 << 20))[0] == 413
    # Legacy /ingest: unknown format, bad name, bad numbers.
    assert (
        c.post("/ingest", b"a;b 1", "text/plain", params={"name": "app.cpu", "format": "trie"})[0]
        == 400
    )
    assert (
        c.post("/ingest", b"a;b 1", "text/plain", params={"name": "app.cpu{bad-key=1}"})[0] == 400
    )
    assert c.post("/ingest", b"a;b x", "text/plain", params={"name": "app.cpu"})[0] == 400
    assert (
        c.post("/ingest", b"a;b 1", "text/plain", params={"name": "app.cpu", "from": "soon"})[0]
        == 400
    )
    # Telemetry: not JSON, wrong types, a fraction outside 0..1, end before start.
    t = time.time()
    bad_docs = [
        b"[1, 2",
        json.dumps({"batch_id": "x", "host": "h", "start": "yesterday", "end": t}).encode(),
        json.dumps(
            {
                "batch_id": "x",
                "host": "h",
                "start": t - 10,
                "end": t,
                "gpus": [{"index": 0, "uuid": "GPU-1", "util": 1.5}],
            }
        ).encode(),
        json.dumps({"batch_id": "x", "host": "h", "start": t, "end": t - 10}).encode(),
        json.dumps(
            {
                "batch_id": "x",
                "host": "h",
                "start": t - 10,
                "end": t,
                "workloads": [{"labels": {"bad name": "x"}, "allocated_gpu_seconds": 1}],
            }
        ).encode(),
    ]
    for doc in bad_docs:
        status, data = c.post("/api/v1/telemetry", doc, "application/json")
        assert status == 400, (doc, status, data)
        assert json.loads(data)["error"]
    # Traces: something that is no trace, and a gzip bomb.
    assert c.post("/api/v1/traces", b"just some text\n", "application/octet-stream")[0] == 400
    status, _ = c.post("/api/v1/traces", _bomb(450 << 20), "application/octet-stream")
    assert 400 <= status < 500  # inflates within the limit, but is no trace
    # Queries: a bad selector, a bad profile type.
    now_ms = int(time.time() * 1000)
    for sel, pt in (('{pod=~"a', payloads.CPU_TYPE), ("{}", "process_cpu")):
        m = q.SelectMergeStacktracesRequest(
            profile_typeID=pt, label_selector=sel, start=now_ms - 1000, end=now_ms
        )
        status, data = c.post(
            "/querier.v1.QuerierService/SelectMergeStacktraces", m.SerializeToString()
        )
        assert status == 400 and json.loads(data)["code"] == "invalid_argument", data
    # Nothing was stored, and the server still serves a good push.
    m = q.SelectMergeStacktracesRequest(
        profile_typeID=payloads.CPU_TYPE,
        label_selector="{}",
        start=now_ms - 3600_000,
        end=now_ms + 60_000,
    )
    assert (
        c.connect("SelectMergeStacktraces", m, q.SelectMergeStacktracesResponse).flamegraph.total
        == 0
    )
    assert c.post(PUSH, good)[0] == 200
    assert (
        c.connect("SelectMergeStacktraces", m, q.SelectMergeStacktracesResponse).flamegraph.total
        > 0
    )


def test_trace_gzip_bomb_is_413(tmp_path):
    """The inflated size of an uploaded trace is bounded before anything reads it."""
    import pytest

    from aiflame.server.errors import PayloadTooLarge
    from aiflame.server.traces import check_upload

    with pytest.raises(PayloadTooLarge):
        check_upload(_bomb(64 << 20), 16 << 20, str(tmp_path))
    assert list(tmp_path.iterdir()) == []  # nothing written for it
