"""The store on chDB's engine: the schema and its migrations, the cluster DDL (parsed by the
same engine), retention as TTLs, and the writer: idempotent ids and the rollback of a batch
a killed process left half-written."""

from __future__ import annotations

import time

import payloads
import pyarrow as pa
import pytest

from aiflame.server.ingest import hashing, pprof_columns, profiles, telemetry
from aiflame.server.store import migrations, schema
from aiflame.server.store.connection import open_store
from aiflame.server.store.url import parse_store_url
from aiflame.server.store.writer import Work, Writer, open_batches, recover


@pytest.fixture
def store(tmp_path):
    s = open_store(parse_store_url(f"chdb://{tmp_path}/data"))
    yield s
    s.close()


def _item(seed: int, pid: str, strings: hashing.StringHashes) -> profiles.ProfileItem:
    p = payloads.cpu_profile(seed, time.time_ns())
    cols = pprof_columns.decode(__import__("gzip").decompress(payloads.pprof_bytes(p)))
    return profiles.profile_item(
        cols,
        {"__name__": "process_cpu", "service_name": "store-test"},
        tenant="t",
        profile_id=pid,
        received_ms=int(time.time() * 1000),
        pprof_bytes=1,
        strings=strings,
    )


def test_schema_migrates_once_and_records_its_version(store):
    assert migrations.migrate(store, schema.DEFAULT_RETENTION_S) == 0
    assert migrations.migrate(store, schema.DEFAULT_RETENTION_S) == migrations.CURRENT_VERSION
    names = {r[0] for r in store.rows("SELECT name FROM system.tables WHERE database = 'aiflame'")}
    assert {t.name for t in schema.TABLES} | {v.name for v in schema.VIEWS} <= names
    assert store.rows("SELECT version, name FROM aiflame.schema_migrations ORDER BY version") == [
        (v.version, v.name) for v in migrations.MIGRATIONS
    ]


GPM_V2 = ("gr_engine_active", "tensor_hmma_active", "tensor_dmma_active", "tensor_imma_active")


def test_a_version_1_store_gets_the_gpm_fields_and_keeps_its_rows(store):
    migrations.migrate(store, schema.DEFAULT_RETENTION_S)
    # What a store of version 1 is: the GPU rows without the version-2 columns.
    store.command(
        "ALTER TABLE aiflame.gpu_telemetry " + ", ".join(f"DROP COLUMN {c}" for c in GPM_V2)
    )
    store.command("DELETE FROM aiflame.schema_migrations WHERE version >= 2")
    store.command(
        "INSERT INTO aiflame.gpu_telemetry (tenant, host, start, end, gpu_index, uuid, util, "
        "batch_id) VALUES ('t', 'old', now64(3) - 10, now64(3), 0, 'GPU-0', 0.5, 1)"
    )
    assert migrations.migrate(store, schema.DEFAULT_RETENTION_S) == 1
    assert migrations.applied_version(store) == migrations.CURRENT_VERSION
    cols = [r[0] for r in store.rows("DESCRIBE TABLE aiflame.gpu_telemetry")]
    assert cols.index("dram_active") + 1 == cols.index("gr_engine_active")  # as declared
    declared = next(t for t in schema.TABLES if t.name == "gpu_telemetry")
    assert cols == [name for name, _ in declared.columns]
    assert store.rows("SELECT util, tensor_hmma_active FROM aiflame.gpu_telemetry") == [(0.5, None)]
    # The agent's fields are stored from now on.
    now = time.time()
    gpu = {"index": 1, "uuid": "GPU-1", "util": 0.9, "gr_engine_active": 0.95}
    doc = telemetry.parse(
        payloads.telemetry("v2", "new", now - 10, now, [{**gpu, "tensor_hmma_active": 0.25}], [])
    )
    rows = telemetry.tables(doc, "t", int(now * 1000), 64)["gpu_telemetry"]
    store.insert("gpu_telemetry", pa.table(rows))
    got = store.rows(
        "SELECT gr_engine_active, tensor_hmma_active, tensor_imma_active "
        "FROM aiflame.gpu_telemetry WHERE host = 'new'"
    )
    assert got == [(0.949999988079071, 0.25, None)]


def test_a_version_2_store_gets_request_kinds_and_its_requests_stay_traces(store):
    migrations.migrate(store, schema.DEFAULT_RETENTION_S)
    store.command("ALTER TABLE aiflame.trace_requests DROP COLUMN kind")
    store.command("DELETE FROM aiflame.schema_migrations WHERE version >= 3")
    store.command(
        "INSERT INTO aiflame.trace_requests (tenant, request_id, created, expires, selector, "
        "duration_ms) VALUES ('t', 'r-old', now64(3), now64(3) + 600, {'job_id': '1'}, 2000)"
    )
    assert migrations.migrate(store, schema.DEFAULT_RETENTION_S) == 2
    assert migrations.applied_version(store) == migrations.CURRENT_VERSION == 3
    cols = [r[0] for r in store.rows("DESCRIBE TABLE aiflame.trace_requests")]
    declared = next(t for t in schema.TABLES if t.name == "trace_requests")
    assert cols == [name for name, _ in declared.columns]
    assert store.rows("SELECT request_id, kind FROM aiflame.trace_requests") == [("r-old", "trace")]


def test_a_newer_store_is_refused(store):
    migrations.migrate(store, schema.DEFAULT_RETENTION_S)
    store.command("INSERT INTO aiflame.schema_migrations VALUES (999, 'future', now())")
    with pytest.raises(Exception, match="newer than this aiflame"):
        migrations.migrate(store, schema.DEFAULT_RETENTION_S)


def test_retention_sets_the_ttls(store):
    migrations.migrate(store, schema.DEFAULT_RETENTION_S)
    shorter = dict(schema.DEFAULT_RETENTION_S, traces=7 * 86400)
    migrations.migrate(store, shorter)
    ddl = store.rows(
        "SELECT create_table_query FROM system.tables "
        "WHERE database = 'aiflame' AND name = 'findings'"
    )[0][0]
    assert "toIntervalSecond(604800)" in ddl
    ddl = store.rows(
        "SELECT create_table_query FROM system.tables "
        "WHERE database = 'aiflame' AND name = 'samples'"
    )[0][0]
    assert "toIntervalSecond(2592000)" in ddl  # profiles keep their 30 days


def test_cluster_ddl_is_valid_clickhouse(store):
    """The cluster layout can't run here (no Keeper, no shards); its statements are parsed
    by the same engine, and name the replicated and distributed tables."""
    stmts = schema.schema_statements("aiflame", schema.DEFAULT_RETENTION_S, "prod")
    stmts += migrations._versions_table("aiflame", "prod")
    for m in migrations.MIGRATIONS[1:]:
        stmts += m.statements("aiflame", schema.DEFAULT_RETENTION_S, "prod")
    for sql in stmts:
        formatted = store.rows("SELECT formatQuery({q:String})", {"q": sql})[0][0]
        assert "ON CLUSTER prod" in formatted
    assert "ALTER TABLE aiflame.gpu_telemetry_local ON CLUSTER 'prod' ADD COLUMN" in "\n".join(
        stmts
    )
    text = "\n".join(stmts)
    for t in schema.TABLES:
        assert f"aiflame.{t.name}_local ON CLUSTER 'prod'" in text
        assert f"Distributed('prod', 'aiflame', '{t.name}_local', {t.shard_key})" in text
    assert (
        "ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/{table}', "
        "'{replica}', last_seen)" in text
    )
    assert "TO aiflame.samples_1h_local AS SELECT" in text


def test_writer_is_idempotent_and_recovers_an_interrupted_batch(store):
    migrations.migrate(store, schema.DEFAULT_RETENTION_S)
    strings = hashing.StringHashes()
    w = Writer(store, flush_interval_s=0.01)
    try:
        a = _item(1, "p-a", strings)
        w.submit([Work(tables={}, key=("profiles", "t", "p-a"), profile_items=[a])]).result(60)
        again = _item(1, "p-a", strings)
        w.submit([Work(tables={}, key=("profiles", "t", "p-a"), profile_items=[again])]).result(60)
        total = int(a.row_value[a.type_ids.index(payloads.CPU_TYPE) == a.row_type].sum())
        sums = "SELECT sum(value) FROM aiflame.{t} WHERE profile_type = {{pt:String}}"
        for t in ("samples", "samples_1h"):
            assert store.rows(sums.format(t=t), {"pt": payloads.CPU_TYPE})[0][0] == total
        # A batch written but never closed: the process died between its inserts.
        b = _item(2, "p-b", strings)
        tables = w._tables([Work(tables={}, profile_items=[b])], batch_id=4242)
        w._journal(4242, "open")
        assert "samples" in tables and "profiles" in tables
        for name in ("stacks", "frames", "samples"):  # not yet its profiles row, nor "done"
            if name in tables:
                store.insert(name, tables[name])
        assert store.rows(sums.format(t="samples"), {"pt": payloads.CPU_TYPE})[0][0] > total
        assert open_batches(store, 0) == [4242]
        assert recover(store) == 1
        for t in ("samples", "samples_1h"):
            assert store.rows(sums.format(t=t), {"pt": payloads.CPU_TYPE})[0][0] == total
        assert open_batches(store, 0) == []
        assert store.rows("SELECT count() FROM aiflame.profiles FINAL") == [(1,)]
    finally:
        w.close()


def test_logged_pushes_batch_longer_and_a_waiting_request_brings_them_forward(store):
    migrations.migrate(store, schema.DEFAULT_RETENTION_S)
    strings = hashing.StringHashes()
    w = Writer(store, flush_interval_s=0.05, logged_interval_s=2.0)
    try:
        pushes = [
            w.submit([Work(tables={}, key=("profiles", "t", f"p{i}"), profile_items=[it])], True)
            for i, it in enumerate(_item(i, f"p{i}", strings) for i in range(3))
        ]
        time.sleep(0.5)
        assert not any(f.done() for f in pushes) and w.committed_batches == 0
        t0 = time.monotonic()
        w.submit([]).result(30)  # a flush: due at once, it takes the pushes along
        assert time.monotonic() - t0 < 1.5 and all(f.done() for f in pushes)
        assert w.committed_batches == 1
        assert store.rows("SELECT count() FROM aiflame.profiles")[0][0] == 3
        late = _item(9, "p9", strings)
        t0 = time.monotonic()
        w.submit([Work(tables={}, key=("profiles", "t", "p9"), profile_items=[late])], True).result(
            30
        )
        assert time.monotonic() - t0 >= 1.9  # a push alone waits for its batch to fill
    finally:
        w.close()


def test_a_batch_goes_once_it_holds_batch_rows_not_later(store):
    """At a high push rate a batch is bounded by its size: it is committed as soon as it
    holds ``batch_rows`` rows, long before its pushes' interval is over."""
    migrations.migrate(store, schema.DEFAULT_RETENTION_S)
    strings = hashing.StringHashes()
    w = Writer(store, flush_interval_s=0.05, logged_interval_s=30.0, batch_rows=100)
    try:
        items = [_item(i, f"b{i}", strings) for i in range(3)]
        works = [
            Work(tables={}, key=("profiles", "t", f"b{i}"), profile_items=[it], rows=40)
            for i, it in enumerate(items)
        ]
        t0 = time.monotonic()
        first = [w.submit([works[0]], True), w.submit([works[1]], True)]
        time.sleep(0.5)
        assert not any(f.done() for f in first)  # 80 rows: the batch waits for more
        w.submit([works[2]], True).result(30)  # 120 rows: it goes now
        assert time.monotonic() - t0 < 10 and all(f.done() for f in first)
        assert w.committed_batches == 1
        assert store.rows("SELECT count() FROM aiflame.profiles")[0][0] == 3
    finally:
        w.close()
