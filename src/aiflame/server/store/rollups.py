"""The samples' roll-ups (``samples_10m``, ``samples_1h``), built from committed batches.

Roll-ups summed at every insert (materialized views) cost as much as the samples themselves:
a batch of pushes holds one profile per series, so the views summed nothing, wrote every
row twice more and merged it again later. Instead the writer rolls its committed batches up
once a 10-minute bucket is over: one ``INSERT ... SELECT`` per roll-up reads those batches'
rows back (the newest parts, found by time and series) and writes them summed per bucket,
one row per series, stack and bucket where there were sixty.

Exactly once: a roll-up ("flush") is journalled in ``rollup_flushes`` with its batch ids
before its inserts, each insert carries a deduplication token made of the flush id, and the
batches are marked ``rolled`` in ``ingest_batches`` after. A flush left open by a killed
process is done again with the same ids and tokens (the engine drops an insert it already
holds); a batch committed but in no flush is rolled up on its own, with a token of its id.

Queries read the roll-ups only below the watermark: the oldest sample of a committed batch
not yet rolled up (at most about ten minutes ago; a late batch of old samples moves it back
until its roll-up). From there on they read the samples.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from aiflame.server.store import journal
from aiflame.server.store.connection import Store

log = logging.getLogger("aiflame.server")

# target -> (time bucket expression, its column)
TARGETS = {
    "samples_10m": ("toStartOfTenMinutes(time)", "bucket"),
    "samples_1h": ("toStartOfHour(time)", "hour"),
}
_MS = "fromUnixTimestamp64Milli({%s:Int64}, 'UTC')"
_ONE_BLOCK = 1 << 40
# Of ingest_batches grouped by batch: committed, and neither rolled up nor rolled back.
UNROLLED = "countIf(state = 'done') > 0 AND countIf(state IN ('rolled', 'aborted')) = 0"


def rollup_select(db: str, target: str, where: str, sign: str = "") -> str:
    """The rows ``target`` gets from the samples that match ``where`` (``sign="-"``: their
    opposite, which takes them out again)."""
    bucket, col = TARGETS[target]
    return (
        f"SELECT tenant, profile_type, series_id, {bucket} AS {col}, stack_id, "
        f"{sign}sum(value) AS value FROM {db}.samples WHERE {where} "
        f"GROUP BY tenant, profile_type, series_id, {col}, stack_id"
    )


@dataclass
class Flush:
    """Committed batches to roll up together, the time span of their samples and (when the
    writer knows them) their series, which lets the engine skip every other series' rows."""

    flush_id: int
    batch_ids: list[int]
    min_ms: int
    max_ms: int
    series: list[int] = field(default_factory=list)


def run(store: Store, flush: Flush, replica: str) -> None:
    """Roll ``flush`` up once (again after a failure or a crash: same id, same result)."""
    db = store.db
    _journal_flush(store, flush, "open", replica)
    params: dict[str, Any] = {"ids": flush.batch_ids, "lo": flush.min_ms, "hi": flush.max_ms}
    where = f"batch_id IN {{ids:Array(UInt64)}} AND time >= {_MS % 'lo'} AND time <= {_MS % 'hi'}"
    if flush.series:
        params["series"] = sorted(set(flush.series))
        where += " AND series_id IN {series:Array(UInt64)}"
    for target in TARGETS:
        store.command(
            f"INSERT INTO {db}.{target} " + rollup_select(db, target, where),
            params,
            settings={
                "insert_deduplicate": 1,
                "insert_deduplication_token": f"rollup-{flush.flush_id}-{target}",
                # One block, whatever the order of the rows: a token names each block of an
                # insert, so a roll-up done again must not split its rows otherwise.
                "min_insert_block_size_rows": _ONE_BLOCK,
                "min_insert_block_size_bytes": _ONE_BLOCK,
                "max_insert_block_size": _ONE_BLOCK,
            },
        )
    journal.write(store, flush.batch_ids, "rolled", replica)
    _journal_flush(store, flush, "done", replica)


def _journal_flush(store: Store, flush: Flush, state: str, replica: str) -> None:
    ms = pa.timestamp("ms", tz="UTC")
    store.insert(
        "rollup_flushes",
        pa.table(
            {
                "flush_id": pa.array([flush.flush_id], pa.uint64()),
                "batch_ids": pa.array([flush.batch_ids], pa.list_(pa.uint64())),
                "min_time": pa.array([flush.min_ms], ms),
                "max_time": pa.array([flush.max_ms], ms),
                "state": pa.array([state]),
                "at": pa.array([time.time_ns() // 1_000_000], ms),
                "replica": pa.array([replica]),
            }
        ),
    )


# -- after a crash --------------------------------------------------------------------------
def recover(
    store: Store,
    me: str,
    older_than_s: float = 0.0,
    replica: str | None = None,
    *,
    others: bool = False,
) -> int:
    """Finish the roll-ups that a killed process left: its open flushes (again, with their
    ids) and its committed batches in no flush (each on its own). Only those of ``replica``
    (or, with ``others``, of every other replica) left for ``older_than_s``; ``me`` names
    the replica doing it. Returns how many batches were rolled up."""
    db = store.db
    params: dict[str, Any] = {"grace": int(older_than_s * 1000)}
    cond = "max(at) < now64(3) - toIntervalMillisecond({grace:UInt64})"
    if replica is not None:
        params["replica"] = replica
        cond += f" AND any(replica) {'!=' if others else '='} {{replica:String}}"
    open_flushes = store.rows(
        f"SELECT flush_id, any(batch_ids), toUnixTimestamp64Milli(min(min_time)), "
        f"toUnixTimestamp64Milli(max(max_time)) FROM {db}.rollup_flushes GROUP BY flush_id "
        f"HAVING countIf(state = 'done') = 0 AND {cond}",
        params,
    )
    # Batches rolled back, or marked rolled by the flushes below, are left alone.
    unrolled = store.rows(
        f"SELECT batch_id, toUnixTimestamp64Milli(min(min_time)), "
        f"toUnixTimestamp64Milli(max(max_time)) FROM {db}.ingest_batches GROUP BY batch_id "
        f"HAVING {UNROLLED} AND min(min_time) IS NOT NULL AND {cond}",
        params,
    )
    done: set[int] = set()
    for flush_id, ids, lo, hi in open_flushes:
        log.warning("store: finishing roll-up %x, left open", flush_id)
        run(store, Flush(int(flush_id), [int(i) for i in ids], int(lo), int(hi)), me)
        done.update(int(i) for i in ids)
    for batch_id, lo, hi in unrolled:
        if int(batch_id) not in done:
            run(store, Flush(int(batch_id), [int(batch_id)], int(lo), int(hi)), me)
            done.add(int(batch_id))
    if unrolled:
        log.warning("store: rolled up %d batch(es) left committed but not rolled up", len(unrolled))
    return len(done)


def watermark_ms(store: Store) -> int | None:
    """Where the roll-ups may stop being complete: the oldest sample time of a committed
    batch not rolled up yet (None: every committed batch is)."""
    rows = store.rows(
        "SELECT toUnixTimestamp64Milli(min(lo)) FROM (SELECT min(min_time) AS lo FROM "
        f"{store.db}.ingest_batches GROUP BY batch_id HAVING {UNROLLED})"
    )
    value = rows[0][0] if rows else None
    return None if value is None else int(value)
