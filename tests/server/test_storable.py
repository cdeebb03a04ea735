"""What is acknowledged is storable: every field is checked at the door against what the
store can hold (a 400 naming the field, nothing stored), and a record the store still
refuses is set aside (kept, counted, logged) instead of stopping the writer forever."""

from __future__ import annotations

import json
import time

import msgspec
import payloads
import pyarrow as pa
import pytest
from serverproc import ServerProcess
from srvclient import Client

from aiflame.proto.pyroscope.querier.v1 import querier_pb2 as q
from aiflame.server.store import migrations, schema
from aiflame.server.store.connection import open_store
from aiflame.server.store.url import parse_store_url
from aiflame.server.store.wal import Record, WriteAheadLog
from aiflame.server.store.writer import Work, Writer

PUSH = "/push.v1.PusherService/Push"
MS = pa.timestamp("ms", tz="UTC")


def _deep(n: int) -> str:
    return "[" * n + "]" * n


def _ingest(params: dict, body: bytes = b"a;b 1") -> tuple:
    return ("POST", "/ingest", body, {"name": "hostile.cpu", **params}, {})


def _json(path: str, doc: object | str) -> tuple:
    body = doc.encode() if isinstance(doc, str) else json.dumps(doc).encode()
    return ("POST", path, body, None, {"Content-Type": "application/json"})


def _get(path: str, **params: str) -> tuple:
    return ("GET", path, None, params, {})


def _cases() -> dict[str, tuple[tuple, str]]:
    """name -> (request, a word the 400's message must name)."""
    t = time.time()
    tele = {"batch_id": "b", "host": "h", "start": t - 10, "end": t}
    gpu = {"index": 0, "uuid": "GPU-1"}
    work = {"labels": {"job_id": "1"}, "allocated_gpu_seconds": 1}
    return {
        "until past int64 ns": (_ingest({"until": "9223372036854775808"}), "until"),
        "until 1e30": (_ingest({"until": "1e30"}), "until"),
        "from inf": (_ingest({"from": "inf"}), "from"),
        "from nan": (_ingest({"from": "nan"}), "from"),
        "until before from": (_ingest({"from": str(t), "until": str(t - 100)}), "until"),
        "until far ahead": (_ingest({"until": str(t + 86400 * 30)}), "until"),
        "sampleRate tiny": (_ingest({"sampleRate": "1e-300"}), "sampleRate"),
        "sampleRate inf": (_ingest({"sampleRate": "inf"}), "sampleRate"),
        "folded count past int64": (_ingest({}, b"a;b 99999999999999999999999"), "count"),
        "folded count x period": (_ingest({"sampleRate": "1"}, b"a;b 999999999999999999"), "64"),
        "heartbeat rate 1e308": (
            _json("/api/v1/agents/heartbeat", {"host": "h", "sampling_rate_hz": 1e308}),
            "sampling_rate_hz",
        ),
        "heartbeat spool past uint64": (
            _json("/api/v1/agents/heartbeat", '{"host": "h", "spool_bytes": 1e30}'),
            "spool_bytes",
        ),
        "heartbeat started 1e300": (
            _json("/api/v1/agents/heartbeat", {"host": "h", "started": 1e300}),
            "started",
        ),
        "heartbeat gpu index past uint16": (
            _json("/api/v1/agents/heartbeat", {"host": "h", "gpus": [{"index": 70000}]}),
            "index",
        ),
        "heartbeat nested 100,000 deep": (
            _json("/api/v1/agents/heartbeat", '{"host": "h", "gpus": ' + _deep(100_000) + "}"),
            "heartbeat",
        ),
        "telemetry nested 100,000 deep": (
            _json("/api/v1/telemetry", json.dumps(tele)[:-1] + ', "x": ' + _deep(100_000) + "}"),
            "deep",
        ),
        "telemetry memory past uint64": (
            _json("/api/v1/telemetry", {**tele, "gpus": [{**gpu, "memory_used_bytes": 2**64}]}),
            "memory_used_bytes",
        ),
        "telemetry gpu index past uint16": (
            _json("/api/v1/telemetry", {**tele, "gpus": [{**gpu, "index": 65536}]}),
            "index",
        ),
        "telemetry pid past uint32": (
            _json("/api/v1/telemetry", {**tele, "workloads": [{**work, "pids": [2**32]}]}),
            "pids",
        ),
        "telemetry power 1e400": (
            _json(
                "/api/v1/telemetry",
                json.dumps(tele)[:-1] + ', "gpus": [{"index": 0, '
                '"uuid": "u", "power_watts": 1e400}]}',
            ),
            "power_watts",
        ),
        "telemetry start in 2200": (
            _json("/api/v1/telemetry", {**tele, "start": 7.3e9, "end": 7.3e9 + 10}),
            "start",
        ),
        "telemetry end far ahead": (
            _json("/api/v1/telemetry", {**tele, "start": t + 86400, "end": t + 86410}),
            "end",
        ),
        "trace request start_time inf": (
            _json(
                "/api/v1/trace-requests",
                '{"selector": {"job_id": "1"}, "duration_ms": 1000, "start_time": 1e400}',
            ),
            "start_time",
        ),
        "trace request nested": (
            _json("/api/v1/trace-requests", '{"selector": ' + _deep(30_000) + "}"),
            "deep",
        ),
        "attribution from inf": (_get("/api/v1/attribution", **{"from": "inf"}), "from"),
        "attribution to nan": (_get("/api/v1/attribution", to="nan"), "to"),
        "flamegraph from 1e400": (_get("/api/v1/flamegraph", **{"from": "1e400"}), "from"),
        "findings from past 2100": (_get("/api/v1/findings", **{"from": "9e15"}), "from"),
        "traces limit inf": (_get("/api/v1/traces", limit="inf"), "limit"),
        "regex RE2 refuses": (_get("/api/v1/traces", selector='{a=~"a{1000000}"}'), "regex"),
        "regex with lookahead": (_get("/api/v1/labels", selector='{a=~"(?=x)"}'), "regex"),
        "2,000 matchers": (
            _get("/api/v1/labels", selector="{" + ",".join(f'a{i}="x"' for i in range(2000)) + "}"),
            "matchers",
        ),
    }


def test_unstorable_fields_are_400_naming_the_field(server, tenant):
    c = Client(server.url, tenant=tenant)
    for name, ((method, path, body, params, headers), word) in _cases().items():
        status, data, _ = c.request(method, path, body, headers=headers, params=params)
        assert status == 400, (name, status, data[:300])
        message = json.loads(data)["error"]
        assert word.lower() in message.lower(), (name, message)
    # Querier calls: times out of range, and an RE2 regex the store would refuse.
    now = int(time.time() * 1000)
    for start, end, sel in ((-5, now, "{}"), (now, 2**62, "{}"), (now - 1000, now, '{a=~"("}')):
        m = q.SelectMergeStacktracesRequest(
            profile_typeID=payloads.CPU_TYPE, label_selector=sel, start=start, end=end
        )
        status, data = c.post(
            "/querier.v1.QuerierService/SelectMergeStacktraces", m.SerializeToString()
        )
        assert status == 400 and json.loads(data)["code"] == "invalid_argument", data
    # Nothing of it was stored, and the server goes on storing and serving.
    assert c.get_json("/api/v1/agents")["agents"] == []
    good, _, _ = payloads.cpu_push({"service_name": "after"}, 7, time.time_ns())
    assert c.post(PUSH, good)[0] == 200
    hb = {"host": "h", "sampling_rate_hz": 19.0, "spool_bytes": 10, "started": time.time()}
    assert c.post("/api/v1/agents/heartbeat", json.dumps(hb).encode(), "application/json")[0] == 200
    c.settle()
    agents = c.get_json("/api/v1/agents")["agents"]
    assert [(a["host"], a["sampling_rate_hz"]) for a in agents] == [("h", 19.0)]
    m = q.SelectMergeStacktracesRequest(
        profile_typeID=payloads.CPU_TYPE,
        label_selector="{}",
        start=now - 3600_000,
        end=now + 60_000,
    )
    fg = c.connect("SelectMergeStacktraces", m, q.SelectMergeStacktracesResponse).flamegraph
    assert fg.total > 0


@pytest.fixture
def store(tmp_path):
    s = open_store(parse_store_url(f"chdb://{tmp_path}/data"), write_pool_size=4)
    migrations.migrate(s, schema.DEFAULT_RETENTION_S)
    yield s
    s.close()


def _agent(tenant: str, host: str) -> dict:
    now = int(time.time() * 1000)
    return {
        "tenant": [tenant],
        "host": [host],
        "agent_version": [""],
        "started": pa.array([now], MS),
        "last_seen": pa.array([now], MS),
        "gpus": ["[]"],
        "spool_bytes": pa.array([0], pa.uint64()),
        "sampling_rate_hz": pa.array([0.0], pa.float32()),
    }


def test_the_writer_sets_aside_what_the_store_refuses_and_goes_on(store):
    """A request whose rows the store refuses (here: a column it does not have) is set
    aside once, the other requests of its batch are stored, and later batches go on."""
    w = Writer(store.writes(), flush_interval_s=0.05, logged_interval_s=0.05)
    refused: list[Exception] = []
    try:
        bad = {**_agent("t", "bad"), "no_such_column": [1]}
        futures = [
            w.submit([Work(tables={"agents": _agent("t", "a")})], durable=True),
            w.submit([Work(tables={"agents": bad})], durable=True, on_reject=refused.append),
            w.submit([Work(tables={"agents": _agent("t", "b")})], durable=True),
        ]
        for f in futures:
            f.result(60)  # every one answered: none is retried forever
        assert len(refused) == 1 and w.set_aside == 1
        later = w.submit([Work(tables={"agents": _agent("t", "c")})])
        later.result(60)
        hosts = store.rows("SELECT host FROM aiflame.agents FINAL ORDER BY host")
        assert [h for (h,) in hosts] == ["a", "b", "c"]
        assert w.health.ok
        # A request that waits for its commit hears that its rows were refused (a 4xx).
        fut = w.submit([Work(tables={"agents": bad})])
        with pytest.raises(Exception, match="refused"):
            fut.result(60)
        assert getattr(fut.exception(), "status", 0) == 422
    finally:
        w.close()


def test_a_logged_record_that_cannot_be_stored_is_set_aside_at_the_restart(tmp_path):
    """A record in the write-ahead log that cannot be stored (as an older server could have
    acknowledged one) is kept aside at the next start; the server stores and serves."""
    data = tmp_path / "data"
    wal = WriteAheadLog(str(data / "wal"))
    now = int(time.time() * 1000)
    bad = Record(
        kind="ingest",
        tenant="replay",
        received_ms=now,
        meta={"name": "replay.cpu", "until": "1e30"},
        body=b"a;b 1",
    )
    good = Record(
        kind="ingest",
        tenant="replay",
        received_ms=now,
        meta={"name": "replay.cpu", "__request_key": "req-good"},
        body=b"a;b 5",
    )
    wal.append(bad)
    wal.append(good)
    wal._file.close()  # as a killed process leaves it (no close: the segment stays)
    srv = ServerProcess(data).start()
    try:
        c = Client(srv.url, tenant="replay")
        rejected = sorted((data / "wal" / "rejected").glob("*.wal"))
        assert len(rejected) == 1
        kept = msgspec.msgpack.decode(rejected[0].read_bytes()[12:], type=Record)
        assert kept.meta["until"] == "1e30"
        assert "until" in rejected[0].with_suffix(".txt").read_text()
        labels = c.get_json("/api/v1/labels", name="service_name", **{"from": str(now - 60_000)})
        assert labels["values"] == ["replay"]  # the good record was replayed
        assert c.post("/ingest", b"c;d 1", "text/plain", params={"name": "replay.cpu"})[0] == 200
    finally:
        srv.stop()
