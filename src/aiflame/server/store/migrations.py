"""Versioned schema: each migration is a list of statements; the store records which ran.

Version 1 creates everything of :mod:`schema` as it is declared now. A later change of the
schema is declared there and appends a migration that brings older stores to it (``ALTER
TABLE ... ADD COLUMN IF NOT EXISTS``, a new table or view: statements that change nothing
on a store version 1 just created), and never edits an old one, so a store of any age is
brought up to date in order. A server refuses a store newer than
itself (written by a later aiflame) rather than guess at it.

Retention is not a migration: the TTLs of the tables are set from ``--retention`` at every
start, where they differ from what the store holds.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from aiflame.server.store import schema
from aiflame.server.store.connection import Store, StoreError

log = logging.getLogger("aiflame.server")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    statements: Callable[[str, dict[str, int], str | None], list[str]]


def _gpm_fields(db: str, retention_s: dict[str, int], cluster: str | None) -> list[str]:
    return schema.add_columns(
        "gpu_telemetry",
        "dram_active",
        ["gr_engine_active", "tensor_hmma_active", "tensor_dmma_active", "tensor_imma_active"],
        db,
        cluster,
    )


def _request_kind(db: str, retention_s: dict[str, int], cluster: str | None) -> list[str]:
    return schema.add_columns("trace_requests", "start_time", ["kind"], db, cluster)


def _writer_rollups(db: str, retention_s: dict[str, int], cluster: str | None) -> list[str]:
    """The samples' roll-ups move from materialized views to the writer (store/rollups.py).
    Every batch already stored went through the views: it is marked rolled up, so that no
    later roll-up (or the undo of a batch a crash left open) counts it twice."""
    on = f" ON CLUSTER '{cluster}'" if cluster else ""
    local = "_local" if cluster else ""
    out = [
        f"ALTER TABLE {db}.ingest_batches{local}{on} MODIFY COLUMN state {schema.BATCH_STATE}",
    ]
    if cluster:
        out.append(f"ALTER TABLE {db}.ingest_batches{on} MODIFY COLUMN state {schema.BATCH_STATE}")
    out += schema.add_columns("ingest_batches", "replica", ["min_time", "max_time"], db, cluster)
    flushes = schema.TABLE_BY_NAME["rollup_flushes"]
    out.append(schema.create_table(flushes, db, retention_s, cluster))
    if cluster:
        out.append(schema.create_distributed(flushes, db, cluster))
    for name in ("samples_10m", "samples_1h"):
        out.append(
            f"ALTER TABLE {db}.{name}{local}{on} MODIFY SETTING "
            "non_replicated_deduplication_window = 10000"
        )
    for view in ("samples_10m_mv", "samples_1h_mv"):
        out.append(f"DROP VIEW IF EXISTS {db}.{view}{on}")
    out.append(
        f"INSERT INTO {db}.ingest_batches (batch_id, state, at, replica) "
        f"SELECT DISTINCT batch_id, 'rolled', now64(3), 'migration 4' FROM {db}.ingest_batches"
    )
    return out


def _spans_and_capacity(db: str, retention_s: dict[str, int], cluster: str | None) -> list[str]:
    """The samples that name a span, and the GPUs' seconds per host (capacity) rolled up
    from the GPU telemetry, the telemetry already stored included (the migration runs at
    the start, before anything is written)."""
    out: list[str] = []
    for name in ("span_samples", "gpu_capacity_1m", "gpu_capacity_1h"):
        table = schema.TABLE_BY_NAME[name]
        out.append(schema.create_table(table, db, retention_s, cluster))
        if cluster:
            out.append(schema.create_distributed(table, db, cluster))
    for view in schema.VIEWS:
        if view.target.startswith("gpu_capacity_"):
            out.append(schema.create_view(view, db, cluster))
            select = view.select.replace("{source}", f"{db}.{view.source}")
            out.append(f"INSERT INTO {db}.{view.target} {select}")
    return out


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "initial schema", schema.schema_statements),
    Migration(2, "GPU telemetry: graphics engine and tensor pipes by precision", _gpm_fields),
    Migration(3, "fleet requests: memory snapshots beside traces", _request_kind),
    Migration(4, "the samples' roll-ups made by the writer, not by views", _writer_rollups),
    Migration(5, "span samples; GPU capacity per host and minute / hour", _spans_and_capacity),
)
CURRENT_VERSION = MIGRATIONS[-1].version


def _versions_table(db: str, cluster: str | None) -> list[str]:
    on = f" ON CLUSTER '{cluster}'" if cluster else ""
    # One table for the whole cluster (no {shard} in its path): every replica of every
    # shard sees the same versions.
    engine = (
        "ReplicatedMergeTree('/clickhouse/tables/all/{database}/{table}', '{shard}-{replica}')"
        if cluster
        else "MergeTree"
    )
    return [
        f"CREATE DATABASE IF NOT EXISTS {db}{on}",
        f"CREATE TABLE IF NOT EXISTS {db}.schema_migrations{on} (version UInt32, name String, "
        f"applied DateTime('UTC')) ENGINE = {engine} ORDER BY version",
    ]


def applied_version(store: Store) -> int:
    rows = store.rows(f"SELECT max(version) FROM {store.db}.schema_migrations")
    return int(rows[0][0] or 0) if rows else 0


def migrate(store: Store, retention_s: dict[str, int]) -> int:
    """Bring the store's schema to :data:`CURRENT_VERSION`; returns the version found."""
    for sql in _versions_table(store.db, store.cluster):
        store.command(sql)
    found = applied_version(store)
    if found > CURRENT_VERSION:
        raise StoreError(
            f"the store {store.url.describe()} has schema version {found}, newer than this "
            f"aiflame's {CURRENT_VERSION}: upgrade aiflame"
        )
    for m in MIGRATIONS:
        if m.version <= found:
            continue
        log.info("store: applying migration %d (%s)", m.version, m.name)
        for sql in m.statements(store.db, retention_s, store.cluster):
            store.command(sql)
        store.command(
            f"INSERT INTO {store.db}.schema_migrations VALUES ({{v:UInt32}}, {{n:String}}, now())",
            {"v": m.version, "n": m.name},
        )
    apply_retention(store, retention_s)
    return found


def apply_retention(store: Store, retention_s: dict[str, int]) -> None:
    """Set the tables' TTLs from ``retention_s`` where the store holds other ones."""
    wanted = json.dumps({g: int(retention_s[g]) for g in schema.RETENTION_GROUPS})
    rows = store.rows(
        f"SELECT argMax(value, version) FROM {store.db}.settings WHERE key = 'retention'"
    )
    current = rows[0][0] if rows and rows[0][0] else None
    if current is None:
        # A new store was just created with these TTLs.
        _record(store, "retention", wanted)
        return
    if current == wanted:
        return
    old = json.loads(current)
    changed = {g for g in schema.RETENTION_GROUPS if old.get(g) != retention_s[g]}
    for table in schema.TABLES:
        if table.ttl and any("{" + g + "}" in table.ttl for g in changed):
            log.info("store: retention of %s changes", table.name)
            store.command(schema.modify_ttl(table, store.db, retention_s, store.cluster))
    _record(store, "retention", wanted)


def _record(store: Store, key: str, value: str) -> None:
    store.command(
        f"INSERT INTO {store.db}.settings VALUES ({{k:String}}, {{v:String}}, {{t:UInt64}})",
        {"k": key, "v": value, "t": time.time_ns()},
    )
