"""The store on chDB's engine: the schema and its migrations, the cluster DDL (parsed by the
same engine), retention as TTLs, and the writer: idempotent ids and the rollback of a batch
a killed process left half-written."""

from __future__ import annotations

import gzip
import socket
import time

import numpy as np
import payloads
import pyarrow as pa
import pytest

from aiflame.server.ingest import hashing, pprof_columns, profiles, telemetry
from aiflame.server.ingest.dictionaries import DictionaryCache
from aiflame.server.store import migrations, rollups, schema
from aiflame.server.store import writer as writer_mod
from aiflame.server.store.connection import open_store
from aiflame.server.store.url import parse_store_url
from aiflame.server.store.writer import Work, Writer, open_batches, recover


@pytest.fixture
def store(tmp_path):
    s = open_store(parse_store_url(f"chdb://{tmp_path}/data"))
    yield s
    s.close()


def _item(seed: int, pid: str, strings: hashing.StringHashes) -> profiles.ProfileItem:
    raw = gzip.decompress(payloads.pprof_bytes(payloads.cpu_profile(seed, time.time_ns())))
    return _pushed(raw, pid, strings)


def _pushed(
    raw: bytes, pid: str, strings: hashing.StringHashes, cache: DictionaryCache | None = None
) -> profiles.ProfileItem:
    """The item of a push of ``raw`` (through ``cache``, as the server decodes pushes)."""
    cols, known = cache.decode(raw, strings) if cache else (pprof_columns.decode(raw), None)
    return profiles.profile_item(
        cols,
        {"__name__": "process_cpu", "service_name": "store-test"},
        tenant="t",
        profile_id=pid,
        received_ms=int(time.time() * 1000),
        pprof_bytes=1,
        strings=strings,
        known=known,
    )


def _wait(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


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
    assert migrations.applied_version(store) == migrations.CURRENT_VERSION
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
        # DDL on every replica; rows (migration 4's) go through the distributed tables
        assert "ON CLUSTER prod" in formatted or formatted.startswith("INSERT INTO aiflame.")
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
    assert "TO aiflame.workload_1h_local AS SELECT" in text
    assert "DROP VIEW IF EXISTS aiflame.samples_1h_mv ON CLUSTER 'prod'" in text


def test_writer_is_idempotent_and_recovers_an_interrupted_batch(store):
    migrations.migrate(store, schema.DEFAULT_RETENTION_S)
    strings = hashing.StringHashes()
    w = Writer(store, flush_interval_s=0.01, rollup_interval_s=0.2)
    try:
        a = _item(1, "p-a", strings)
        w.submit([Work(tables={}, key=("profiles", "t", "p-a"), profile_items=[a])]).result(60)
        again = _item(1, "p-a", strings)
        w.submit([Work(tables={}, key=("profiles", "t", "p-a"), profile_items=[again])]).result(60)
        total = int(a.row_value[a.type_ids.index(payloads.CPU_TYPE) == a.row_type].sum())
        sums = "SELECT sum(value) FROM aiflame.{t} WHERE profile_type = {{pt:String}}"
        _wait(lambda: w.rolled_batches >= 1)  # the committed batch, rolled up
        for t in ("samples", "samples_10m", "samples_1h"):
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
        for t in ("samples", "samples_10m", "samples_1h"):
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


def _totals(store, pt: str) -> dict[str, int]:
    return {
        t: store.rows(
            f"SELECT sum(value) FROM aiflame.{t} WHERE profile_type = {{pt:String}}", {"pt": pt}
        )[0][0]
        for t in ("samples", "samples_10m", "samples_1h")
    }


def _merged_total(store, pt: str, start_ms: int, end_ms: int) -> int:
    from aiflame.server.query.select import Selection, stack_values_sql

    sel = Selection.make("t", pt, '{service_name="store-test"}', start_ms, end_ms)
    params: dict[str, object] = {}
    sql = stack_values_sql(sel, "aiflame", params, rollups.watermark_ms(store))
    return int(sum(r[1] for r in store.rows(sql, params)))


def test_roll_ups_hold_each_committed_batch_once_whatever_the_crash(store, monkeypatch):
    """A batch committed but not rolled up (the process died within the interval) is read
    from the samples until a restart rolls it up; a roll-up that died after its inserts is
    done again with the same tokens, which the engine drops: never counted twice."""
    migrations.migrate(store, schema.DEFAULT_RETENTION_S)
    strings = hashing.StringHashes()
    pt = payloads.CPU_TYPE
    w = Writer(store, flush_interval_s=0.01, rollup_interval_s=3600)
    try:
        a = _item(1, "r-a", strings)
        w.submit([Work(tables={}, key=("profiles", "t", "r-a"), profile_items=[a])]).result(60)
        total = int(a.row_value[a.type_ids.index(pt) == a.row_type].sum())
        w._unrolled.clear()  # what a killed process forgets
    finally:
        w.close()
    assert _totals(store, pt) == {"samples": total, "samples_10m": 0, "samples_1h": 0}
    mark = rollups.watermark_ms(store)
    assert mark is not None and abs(mark - a.time_ms) < 1000
    hour = 3_600_000
    start, end = (a.time_ms // hour - 3) * hour, (a.time_ms // hour + 1) * hour
    assert _merged_total(store, pt, start, end) == total  # the roll-ups are not read for it

    # The restart rolls it up, but dies after the inserts, before marking the batch rolled.
    def die(*args, **kwargs):
        raise RuntimeError("killed")

    monkeypatch.setattr(rollups.journal, "write", die)  # the batches' "rolled" rows
    with pytest.raises(RuntimeError):
        recover(store, replica=socket.gethostname())
    monkeypatch.undo()
    assert _totals(store, pt) == dict.fromkeys(("samples", "samples_10m", "samples_1h"), total)
    assert rollups.watermark_ms(store) is not None  # not marked: still read from the samples
    assert _merged_total(store, pt, start, end) == total
    # The next start finds the roll-up open and does it again: the engine drops the inserts.
    recover(store, replica=socket.gethostname())
    assert _totals(store, pt) == dict.fromkeys(("samples", "samples_10m", "samples_1h"), total)
    assert rollups.watermark_ms(store) is None
    assert recover(store, replica=socket.gethostname()) == 0
    assert _merged_total(store, pt, start, end) == total  # now from the hourly roll-up
    assert _totals(store, pt)["samples_1h"] == total


_V3_VIEWS = {
    "samples_10m": "toStartOfTenMinutes(time) AS bucket",
    "samples_1h": "toStartOfHour(time) AS hour",
}


def test_a_version_3_store_keeps_its_roll_ups_and_counts_nothing_twice(store):
    """Before version 4 the samples' roll-ups were materialized views: the batches those
    views rolled up are marked, so neither the writer's roll-ups nor the undo of a batch a
    crash left open count them twice."""
    migrations.migrate(store, schema.DEFAULT_RETENTION_S)
    # What a store of version 3 is: views, the old journal, no roll-up journal.
    store.command("DROP TABLE aiflame.rollup_flushes")
    store.command("DROP TABLE aiflame.ingest_batches")
    store.command(
        "CREATE TABLE aiflame.ingest_batches (batch_id UInt64, state Enum8('open' = 1, "
        "'done' = 2, 'aborted' = 3), at DateTime64(3, 'UTC'), replica String) "
        "ENGINE = MergeTree ORDER BY (batch_id, state)"
    )
    for target, bucket in _V3_VIEWS.items():
        col = bucket.rsplit(" ", 1)[1]
        store.command(
            f"CREATE MATERIALIZED VIEW aiflame.{target}_mv TO aiflame.{target} AS SELECT "
            f"tenant, profile_type, series_id, {bucket}, stack_id, sum(value) AS value "
            f"FROM aiflame.samples GROUP BY tenant, profile_type, series_id, {col}, stack_id"
        )
    store.command("DELETE FROM aiflame.schema_migrations WHERE version >= 4")
    strings = hashing.StringHashes()
    pt = payloads.CPU_TYPE
    w = Writer.__new__(Writer)  # only its table building, as version 3 wrote batches
    w.stacks, w.frames, w._series_seen = writer_mod.KnownIds(), writer_mod.KnownIds(), {}
    items = {"done": _item(1, "v3-a", strings), "open": _item(2, "v3-b", strings)}
    for batch_id, (state, it) in enumerate(items.items(), start=1):
        tables = w._tables([Work(tables={}, profile_items=[it])], batch_id=batch_id)
        for name in ("stacks", "frames", "series", "samples", "profiles"):
            if name in tables:
                store.insert(name, tables[name])
        store.command(
            "INSERT INTO aiflame.ingest_batches VALUES ({b:UInt64}, 'open', now64(3), 'v3')",
            {"b": batch_id},
        )
        if state == "done":
            store.command(
                "INSERT INTO aiflame.ingest_batches VALUES ({b:UInt64}, 'done', now64(3), 'v3')",
                {"b": batch_id},
            )
    done = int(
        items["done"].row_value[items["done"].type_ids.index(pt) == items["done"].row_type].sum()
    )
    assert _totals(store, pt)["samples_1h"] > done  # the views rolled up both batches

    assert migrations.migrate(store, schema.DEFAULT_RETENTION_S) == 3
    views = {r[0] for r in store.rows("SELECT name FROM system.tables WHERE database = 'aiflame'")}
    assert "samples_10m_mv" not in views and "samples_1h_mv" not in views
    assert recover(store, replica=socket.gethostname()) == 1  # the open batch, undone
    assert _totals(store, pt) == dict.fromkeys(("samples", "samples_10m", "samples_1h"), done)
    assert rollups.watermark_ms(store) is None

    # A new batch: rolled up by the writer, once, beside the old ones.
    w2 = Writer(store, flush_interval_s=0.01, rollup_interval_s=0.1)
    try:
        c = _item(3, "v4-c", strings)
        w2.submit([Work(tables={}, key=("profiles", "t", "v4-c"), profile_items=[c])]).result(60)
        _wait(lambda: w2.rolled_batches >= 1)
    finally:
        w2.close()
    new = int(c.row_value[c.type_ids.index(pt) == c.row_type].sum())
    assert _totals(store, pt) == dict.fromkeys(("samples", "samples_10m", "samples_1h"), done + new)


def test_the_frames_of_a_dictionary_pushed_every_period_are_looked_up_once(store):
    """An agent pushes the same dictionary every period: once its frames are stored, the
    next batches neither look its frames up nor write them (until a day has passed)."""
    migrations.migrate(store, schema.DEFAULT_RETENTION_S)
    strings, cache = hashing.StringHashes(), DictionaryCache()
    raw = gzip.decompress(payloads.pprof_bytes(payloads.cpu_profile(3, time.time_ns())))

    w = Writer(store, flush_interval_s=0.01, rollup_interval_s=3600)
    try:
        first = _pushed(raw, "d-1", strings, cache)
        assert first.dictionary is not None and first.dictionary.frames_stored_at < 0
        w.submit([Work(tables={}, key=("profiles", "t", "d-1"), profile_items=[first])]).result(60)
        assert time.time() - first.dictionary.frames_stored_at < 60
        stored = store.rows("SELECT count() FROM aiflame.frames")[0][0]
        assert stored == np.unique(first.frame_ids).size > 0
        second = _pushed(raw, "d-2", strings, cache)
        assert second.dictionary is first.dictionary  # the cache's
        tables = w._tables([Work(tables={}, profile_items=[second])], batch_id=1)
        assert "frames" not in tables and "samples" in tables
        first.dictionary.frames_stored_at -= 2 * 86400  # a day later: looked up again
        w.frames = writer_mod.KnownIds()  # (and as if the writer had never seen them)
        tables = w._tables([Work(tables={}, profile_items=[second])], batch_id=2)
        assert tables["frames"].num_rows == stored
    finally:
        w.close()
