"""The writer: requests hand it rows; it commits them in batches and then answers them.

ClickHouse wants few large inserts, a push wants a quick durable answer. So every request
waits on a future while one thread gathers what arrived in the last fraction of a second,
drops what is already stored (ids of profiles, telemetry batches and traces: a retry is a
no-op), inserts each table once, and only then resolves the futures: an acknowledged push
is on disk.

Inserts into several tables are not one transaction, so a batch is journalled: an ``open``
row in ``ingest_batches`` before its rows, ``done`` after them, every data row carrying the
batch id. A batch left open (the process was killed mid-way) is rolled back by
:func:`recover` at the next start (and by any replica's janitor after a grace period): its
rows are deleted and its contribution to the roll-ups subtracted, so the client's retry
stores it exactly once.

Committed batches with samples are rolled up into the 10-minute and hourly roll-ups when each
``rollup_interval_s`` of the wall clock is over, by this same thread (store/rollups.py), so a
roll-up never runs beside a batch of this writer.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import logging
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aiflame.server.errors import Overloaded, Unstorable
from aiflame.server.store import journal, rollups
from aiflame.server.store.connection import Store
from aiflame.server.store.health import PROBE_EVERY_S, StoreHealth

log = logging.getLogger("aiflame.server")

_STALE_S = 86400.0  # a stack/frame/series row is re-written after a day (keeps its TTL fresh)
_CACHE_LIMIT = 3_000_000


@dataclass
class Rows:
    """Rows for one table, as column lists or arrays (appended by ``extend``)."""

    columns: dict[str, list]


@dataclass
class Work:
    """What one request wants stored. ``key`` (kind, tenant, id) makes it idempotent."""

    tables: dict[str, dict[str, Any]]  # table -> column -> array or list
    key: tuple[str, str, str] | None = None  # ("profiles"|"telemetry_batches"|"traces", ...)
    profile_items: list[Any] = field(default_factory=list)  # ProfileItem, expanded here
    on_commit: Callable[[], None] | None = None
    rows: int = 0


@dataclass
class _Pending:
    works: list[Work]
    future: concurrent.futures.Future
    durable: bool = False  # already in the write-ahead log: retried until stored
    due: float = 0.0  # time.monotonic() by which its batch should be committed
    # Called with the error when the store refuses this request's rows while it takes
    # others (the write-ahead log keeps the record aside); never retried after that.
    on_reject: Callable[[Exception], None] | None = None


# The samples' roll-ups (materialized views into SummingMergeTree tables) are summed by
# every query and by the merges; summing each insert's block once more costs a third of the
# insert's CPU and saves nothing.
_INSERT_SETTINGS = {"samples": {"optimize_on_insert": 0}}
_ID_COLUMN = {"profiles": "profile_id", "telemetry_batches": "id", "traces": "trace_id"}
# Tables whose rows carry the batch id (rolled back with it).
_JOURNALLED = (
    "samples",
    "span_samples",
    "gpu_telemetry",
    "workload_telemetry",
    "trace_blobs",
    "traces",
    "telemetry_batches",
    "profiles",
)


class KnownIds:
    """Ids already written (with when), so a stack seen every 10 s is written once a day:
    its row is written again after a day, which keeps it from the table's TTL while samples
    still refer to it."""

    stale_s = _STALE_S

    def __init__(self) -> None:
        self._seen: dict[int, float] = {}

    def new(self, ids: np.ndarray, now: float) -> np.ndarray:
        seen = self._seen
        if len(seen) > _CACHE_LIMIT:
            seen.clear()
        if not ids.size:
            return ids
        # dict.get mapped in C over the ids (a profile has thousands of frames)
        when = np.fromiter(
            map(seen.get, ids.tolist(), itertools.repeat(-np.inf)), dtype=np.float64, count=ids.size
        )
        return ids[now - when > _STALE_S]

    def add(self, ids: Iterable[int], now: float) -> None:
        self._seen.update(dict.fromkeys(ids, now))


class Writer:
    def __init__(
        self,
        store: Store,
        flush_interval_s: float = 0.2,
        max_pending_rows: int = 8_000_000,
        commit_timeout_s: float = 60.0,
        insert_threads: int = 4,
        logged_interval_s: float | None = None,
        batch_rows: int | None = None,
        rollup_interval_s: float = 600.0,
    ) -> None:
        """``flush_interval_s``: how long a request that waits for its commit may wait for
        others to join its batch; ``logged_interval_s`` (default: the same): how long works
        already in the write-ahead log (answered pushes) may wait. Every batch has a fixed
        cost in the store (a part per table, and its merges later), so pushes batch longer.
        A batch of ``batch_rows`` rows (default a quarter of ``max_pending_rows``) goes at
        once: at a high push rate batches are bounded by size, not time, so that building
        one (Python, under the interpreter lock the request threads share) stays short."""
        self.store = store
        self.flush_interval_s = flush_interval_s
        self.logged_interval_s = (
            flush_interval_s if logged_interval_s is None else logged_interval_s
        )
        self._batch_rows = max(batch_rows or max_pending_rows // 4, 1)  # goes at once
        self._next_due = float("inf")
        self.max_pending_rows = max_pending_rows
        self.commit_timeout_s = commit_timeout_s
        self.replica = socket.gethostname()
        self._pending: list[_Pending] = []
        self._pending_rows = 0
        self._cond = threading.Condition()
        self._stop = False
        self.stacks = KnownIds()
        self.frames = KnownIds()
        self._series_seen: dict[tuple, float] = {}
        # of the batch being committed: stacks, frames, dictionaries whose frames are stored
        self._written: tuple[list[int], list[int], list[Any]] = ([], [], [])
        self._failures = 0
        self.health = StoreHealth()
        self._probe_due = float("inf")  # time.monotonic(): a probe while the store fails
        self.set_aside = 0  # requests whose rows the store refused (a metric)
        self.committed_batches = 0
        self.committed_rows = 0
        self.commit_seconds = 0.0
        self.rolled_batches = 0  # roll-ups done
        # Committed batches not rolled up yet, and a roll-up that failed (retried as it was).
        self.rollup_interval_s = rollup_interval_s
        self._unrolled: list[rollups.Flush] = []
        self._flush: rollups.Flush | None = None
        self._rollup_due = float("inf")  # time.monotonic()
        self._rollup_waiters: list[concurrent.futures.Future] = []
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=insert_threads, thread_name_prefix="aiflame-insert"
        )
        self._thread = threading.Thread(target=self._run, name="aiflame-writer", daemon=True)
        self._thread.start()

    # -- requests ---------------------------------------------------------------------------
    def submit(
        self,
        works: list[Work],
        durable: bool = False,
        patient: bool = False,
        on_reject: Callable[[Exception], None] | None = None,
    ) -> concurrent.futures.Future:
        """Queue the works of one request; the future resolves once they are stored.

        ``durable`` works are in the write-ahead log: a failed commit is retried (never
        handed back to a client that was already answered), unless the store refuses these
        rows while it takes others: then ``on_reject`` is called and the future resolves
        (the rows are set aside, not retried forever). Durable and ``patient`` works wait up
        to ``logged_interval_s`` for their batch, others ``flush_interval_s``."""
        fut: concurrent.futures.Future = concurrent.futures.Future()
        rows = sum(w.rows for w in works)
        with self._cond:
            if self._stop and not durable:
                raise Overloaded("the server is shutting down", retry_after=5)
            if not durable and self._pending_rows + rows > self.max_pending_rows and self._pending:
                raise Overloaded("the store is behind; retry later", retry_after=2)
            wait = self.logged_interval_s if durable or patient else self.flush_interval_s
            due = time.monotonic() + wait
            self._pending.append(_Pending(works, fut, durable, due, on_reject))
            self._pending_rows += rows
            if due < self._next_due:
                self._next_due = due
                self._cond.notify()
            elif self._pending_rows >= self._batch_rows:
                self._cond.notify()
        return fut

    def roll_up_now(self) -> concurrent.futures.Future:
        """Roll up every batch committed so far without waiting for the interval; the future
        resolves once that is done (an admin's flush, the benchmarks)."""
        fut: concurrent.futures.Future = concurrent.futures.Future()
        with self._cond:
            self._rollup_waiters.append(fut)
            self._rollup_due = 0.0
            self._cond.notify()
        return fut

    def behind(self, rows: int) -> bool:
        """Whether queueing ``rows`` more would exceed the writer's bound."""
        with self._cond:
            return self._pending_rows + rows > self.max_pending_rows

    def close(self, timeout: float = 30.0) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join(timeout)
        self._pool.shutdown(wait=False)

    # -- the batch loop ---------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            batch = self._next_batch()
            if batch is None:  # stopping, and nothing is pending
                self._roll_up()
                return
            if batch:
                self._commit_or_requeue(batch)
            if time.monotonic() >= self._probe_due:
                self._store_writes()
            if time.monotonic() >= self._rollup_due:
                self._roll_up()

    def _next_batch(self) -> list[_Pending] | None:
        """The next batch; [] when only a roll-up or a probe is due; None once stopping and
        drained."""
        with self._cond:
            while not self._pending and not self._stop:
                left = min(self._rollup_due, self._probe_due) - time.monotonic()
                if left <= 0:
                    return []
                self._cond.wait(None if left == float("inf") else left)
            if not self._pending:
                return None
            # Let a batch gather (group commit) until the first of its requests is due,
            # unless shutting down or it is large already.
            while not self._stop and self._pending_rows < self._batch_rows:
                remaining = self._next_due - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            batch, self._pending = self._pending, []
            self._pending_rows = 0
            self._next_due = float("inf")
        return batch

    def _commit_or_requeue(self, batch: list[_Pending]) -> None:
        t0 = time.perf_counter()
        try:
            self._commit(batch)
        except Exception as e:
            if self._store_writes():
                # The store takes other rows: something of this batch is what it refuses.
                self._isolate(batch)
            else:  # the store failed: the clients retry, the log is kept
                self._requeue(batch, e)
            return
        self._committed_ok()
        self.commit_seconds += time.perf_counter() - t0

    def _committed_ok(self) -> None:
        self._failures = 0
        self._probe_due = float("inf")
        self.health.succeeded()

    def _store_writes(self) -> bool:
        """Whether the store takes a write now: one journal row of a batch with no rows,
        marked aborted (as a rolled-back batch: nothing reads it as data)."""
        try:
            journal.write(self.store, [secrets.randbits(63)], "aborted", self.replica)
        except Exception as e:
            self.health.failed(e)
            self._probe_due = time.monotonic() + PROBE_EVERY_S
            return False
        self._committed_ok()
        return True

    def _isolate(self, batch: list[_Pending]) -> None:
        """Commit a failed batch's requests one by one: the one the store refuses while it
        takes the others is set aside (counted, logged, kept by ``on_reject``), the rest go
        through. Should the store fail meanwhile, what is left is retried as a batch."""
        for i, p in enumerate(batch):
            try:
                self._commit([p])
            except Exception as e:
                if not self._store_writes():
                    self._requeue(batch[i:], e)
                    return
                self._set_aside(p, e)

    def _set_aside(self, p: _Pending, error: Exception) -> None:
        self.set_aside += 1
        kinds = sorted({w.key[0] if w.key else next(iter(w.tables), "?") for w in p.works})
        log.error(
            "store: refused the rows of a request (%s), set aside: %s",
            ", ".join(kinds),
            str(error).strip().splitlines()[0][:300] if str(error).strip() else repr(error),
        )
        if p.on_reject is not None:
            try:
                p.on_reject(error)
            except Exception as e:
                log.error("store: could not keep the refused request: %s", e)
        if p.future.done():
            return
        if p.durable:
            p.future.set_result(None)  # answered long ago; its log record is kept aside
        else:
            p.future.set_exception(Unstorable(f"the store refused this request's rows: {error}"))

    def _requeue(self, batch: list[_Pending], e: Exception) -> None:
        self.health.failed(e)
        again = [p for p in batch if p.durable]
        for p in batch:
            if not p.durable and not p.future.done():
                p.future.set_exception(Overloaded(f"the store failed: {e}", 5))
        if again:
            with self._cond:
                self._pending[:0] = again
                self._pending_rows += sum(w.rows for p in again for w in p.works)
                self._next_due = time.monotonic()  # retried after the pause below
            self._failures = min(self._failures + 1, 6)
            time.sleep(0.5 * 2**self._failures)

    def _next_rollup(self) -> float:
        """When to roll up next (time.monotonic()): just after the wall clock's next multiple
        of the interval, so that a 10-minute bucket is rolled up once, when it is over (its
        stragglers later, summed by the merges)."""
        every = self.rollup_interval_s
        now = time.time()
        wait = every - now % every + min(30.0, every / 4)
        return time.monotonic() + wait

    def _roll_up(self) -> None:
        """Roll the committed batches up (or the roll-up that failed before, as it was)."""
        if self._flush is None and self._unrolled:
            parts, self._unrolled = self._unrolled, []
            self._flush = rollups.Flush(
                secrets.randbits(63),
                [b for p in parts for b in p.batch_ids],
                min(p.min_ms for p in parts),
                max(p.max_ms for p in parts),
                [s for p in parts for s in p.series],
            )
        with self._cond:
            waiters, self._rollup_waiters = self._rollup_waiters, []
            self._rollup_due = float("inf")
        error: Exception | None = None
        flush = self._flush
        if flush is not None:
            try:
                rollups.run(self.store, flush, self.replica)
                self._flush = None
                self.rolled_batches += 1
                self.health.succeeded()
            except Exception as e:  # tried again later; a crash leaves it to rollups.recover
                self.health.failed(e, f"rolling up {len(flush.batch_ids)} batch(es)")
                error = e
        if self._flush or self._unrolled:
            with self._cond:
                self._rollup_due = min(self._rollup_due, self._next_rollup())
        for fut in waiters:
            if error is None:
                fut.set_result(None)
            else:
                fut.set_exception(Overloaded(f"the store failed: {error}", 5))

    def _commit(self, batch: list[_Pending]) -> None:
        works = [w for p in batch for w in p.works]
        fresh = self._not_stored(works)
        chosen = [w for w in works if id(w) in fresh]
        if chosen:
            batch_id = secrets.randbits(63)
            tables = self._tables(chosen, batch_id)
            journalled = any(t in tables for t in _JOURNALLED)
            if journalled:
                self._journal(batch_id, "open")
            try:
                # With the journal, the order of the inserts does not matter: an open batch
                # is rolled back whole. So they run at once, each on its own connection.
                futures = [
                    self._pool.submit(self.store.insert, n, t, _INSERT_SETTINGS.get(n))
                    for n, t in tables.items()
                ]
                for f in futures:
                    f.result()
            except Exception:
                if journalled:
                    try:
                        rollback(self.store, [batch_id])
                    except Exception as e:  # recovery at the next start will do it
                        log.error("store: rollback of batch %x failed: %s", batch_id, e)
                raise
            span = _time_span(tables.get("samples"))
            if journalled:
                self._journal(batch_id, "done", span)
            if span is not None:
                self._unrolled.append(rollups.Flush(batch_id, [batch_id], *span, _series(chosen)))
                with self._cond:  # (an admin's roll_up_now may have made it due already)
                    self._rollup_due = min(self._rollup_due, self._next_rollup())
            self._remember(chosen, time.time())
            self.committed_batches += 1
            self.committed_rows += sum(t.num_rows for t in tables.values())
        for w in chosen:
            if w.on_commit:
                try:
                    w.on_commit()
                except Exception as e:
                    log.error("store: after-commit hook failed: %s", e)
        for p in batch:
            if not p.future.done():
                p.future.set_result(None)

    def _journal(self, batch_id: int, state: str, span: tuple[int, int] | None = None) -> None:
        journal.write(self.store, [batch_id], state, self.replica, span)

    def _not_stored(self, works: list[Work]) -> set[int]:
        """ids (Python object ids) of the works whose key is not stored yet."""
        by_kind: dict[str, dict[tuple[str, str], list[Work]]] = {}
        out: set[int] = set()
        for w in works:
            if w.key is None:
                out.add(id(w))
                continue
            kind, tenant, ident = w.key
            group = by_kind.setdefault(kind, {}).setdefault((tenant, ident), [])
            if not group:  # the same id twice in one batch: only the first is stored
                out.add(id(w))
            group.append(w)
        for kind, groups in by_kind.items():
            col = _ID_COLUMN[kind]
            ids = sorted({ident for _, ident in groups})
            rows = self.store.rows(
                f"SELECT DISTINCT tenant, {col} FROM {self.store.db}.{kind} "
                f"WHERE {col} IN {{ids:Array(String)}}",
                {"ids": ids},
            )
            for tenant, ident in rows:
                for w in groups.get((tenant, ident), ()):
                    out.discard(id(w))
        return out

    # -- rows -> Arrow tables ---------------------------------------------------------------
    def _tables(self, works: list[Work], batch_id: int) -> dict[str, pa.Table]:
        now = time.time()
        self._written = ([], [], [])  # not those of a batch that failed
        cols: dict[str, dict[str, list]] = {}
        for w in works:
            for table, columns in w.tables.items():
                dest = cols.setdefault(table, {})
                for name, values in columns.items():
                    dest.setdefault(name, []).append(values)
        items = [it for w in works for it in w.profile_items]
        if items:
            self._profile_tables(items, cols, now)
        out: dict[str, pa.Table] = {}
        for table, columns in cols.items():
            arrays = {name: _concat(parts) for name, parts in columns.items()}
            n = len(next(iter(arrays.values())))
            if table in _JOURNALLED:
                arrays["batch_id"] = pa.array(np.full(n, batch_id, dtype=np.uint64))
            out[table] = pa.table(arrays)
        return out

    def _profile_tables(
        self, items: list[Any], cols: dict[str, dict[str, list]], now: float
    ) -> None:
        from aiflame.server.ingest.profile_rows import profile_tables

        profile_tables(items, cols, now, self)

    def _remember(self, works: list[Work], now: float) -> None:
        # The stacks and frames this batch wrote (set by profile_tables): those seen before
        # keep the time they were written, so they are written again a day later.
        stacks, frames, dictionaries = self._written
        self.stacks.add(stacks, now)
        self.frames.add(frames, now)
        for d in dictionaries:
            d.frames_stored_at = now
        self._written = ([], [], [])
        for w in works:
            for it in w.profile_items:
                for key in getattr(it, "_series_keys", ()):
                    self._series_seen[key] = now
        if len(self._series_seen) > _CACHE_LIMIT:
            self._series_seen.clear()

    def series_is_new(self, key: tuple, now: float) -> bool:
        t = self._series_seen.get(key)
        return t is None or now - t > _STALE_S


def _time_span(samples: pa.Table | None) -> tuple[int, int] | None:
    """First and last sample time (ms) of a batch; None without samples."""
    if samples is None or samples.num_rows == 0:
        return None
    span = pc.min_max(samples.column("time").cast(pa.int64()))
    return int(span["min"].as_py()), int(span["max"].as_py())


def _series(works: list[Work]) -> list[int]:
    return [s for w in works for it in w.profile_items for s in it.series_ids]


def _concat(parts: list) -> pa.Array | pa.ChunkedArray:
    if len(parts) == 1:
        p = parts[0]
        return p if isinstance(p, pa.Array | pa.ChunkedArray) else pa.array(p)
    if all(isinstance(p, np.ndarray) for p in parts):
        return pa.array(np.concatenate(parts))
    if all(isinstance(p, list) for p in parts):
        return pa.array([x for p in parts for x in p])
    return pa.chunked_array([p if isinstance(p, pa.Array) else pa.array(p) for p in parts])


# -- crash recovery -----------------------------------------------------------------------------
# The workload roll-ups are materialized views: a batch's share is in them as soon as its rows.
_ROLLUP_UNDO = {
    name: (
        "workload_telemetry",
        f"SELECT tenant, {fn}(start) AS bucket, workload_id, any(labels) AS labels, "
        "-sum(allocated_gpu_seconds), -sum(ifNull(busy_gpu_seconds, 0)), "
        "-sumIf(allocated_gpu_seconds, busy_gpu_seconds IS NOT NULL), "
        "-sum(ifNull(useful_gpu_seconds, 0)), "
        "-sumIf(allocated_gpu_seconds, useful_gpu_seconds IS NOT NULL), "
        "-sum(ifNull(est_flop, 0)), -sumIf(allocated_gpu_seconds, est_flop IS NOT NULL), "
        "-sum(ifNull(energy_joules, 0)), "
        "-sumIf(allocated_gpu_seconds, energy_joules IS NOT NULL), "
        "-sum(toFloat64(ifNull(input_bytes, 0))), "
        "-sumIf(allocated_gpu_seconds, input_bytes IS NOT NULL), -toFloat64(count()) "
        "FROM {db}.workload_telemetry WHERE batch_id IN {{ids:Array(UInt64)}} "
        "GROUP BY tenant, bucket, workload_id",
    )
    for name, fn in (("workload_1m", "toStartOfMinute"), ("workload_1h", "toStartOfHour"))
}
_ROLLUP_UNDO.update(
    {
        name: (
            "gpu_telemetry",
            f"SELECT tenant, {fn}(start) AS bucket, host, name, "
            "-sum(dateDiff('millisecond', start, end) / 1000), "
            "-sum(if(util IS NULL, 0, util * dateDiff('millisecond', start, end) / 1000)), "
            "-sumIf(dateDiff('millisecond', start, end) / 1000, util IS NOT NULL), "
            "toUInt32(0) "  # the GPUs a host has: a maximum, left as it is
            "FROM {db}.gpu_telemetry WHERE batch_id IN {{ids:Array(UInt64)}} "
            "GROUP BY tenant, bucket, host, name",
        )
        for name, fn in (
            ("gpu_capacity_1m", "toStartOfMinute"),
            ("gpu_capacity_1h", "toStartOfHour"),
        )
    }
)


def open_batches(store: Store, older_than_s: float) -> list[int]:
    rows = store.rows(
        f"SELECT batch_id FROM {store.db}.ingest_batches GROUP BY batch_id "
        "HAVING countIf(state IN ('done', 'aborted')) = 0 AND "
        "max(at) < now64(3) - toIntervalMillisecond({grace:UInt64})",
        {"grace": int(older_than_s * 1000)},
    )
    return [int(r[0]) for r in rows]


def rollback(store: Store, batch_ids: list[int]) -> None:
    """Remove every row of these batches and their share of the roll-ups."""
    if not batch_ids:
        return
    params: dict[str, Any] = {"ids": batch_ids}
    for target, (_source, select) in _ROLLUP_UNDO.items():
        store.command(f"INSERT INTO {store.db}.{target} " + select.format(db=store.db), params)
    # An open batch is rolled up into the samples' roll-ups only if it was written before
    # they were made by the writer (migration 4 marked those batches rolled).
    rolled = store.rows(
        f"SELECT DISTINCT batch_id FROM {store.db}.ingest_batches WHERE state = 'rolled' "
        "AND batch_id IN {ids:Array(UInt64)}",
        params,
    )
    if rolled:
        undo = {"ids": [int(r[0]) for r in rolled]}
        for target in rollups.TARGETS:
            select = rollups.rollup_select(
                store.db, target, "batch_id IN {ids:Array(UInt64)}", sign="-"
            )
            store.command(f"INSERT INTO {store.db}.{target} " + select, undo)
    for table in _JOURNALLED:
        store.delete_where(table, "batch_id IN {ids:Array(UInt64)}", params)
    journal.write(store, batch_ids, "aborted", "")


def recover(
    store: Store, older_than_s: float = 0.0, replica: str | None = None, *, others: bool = False
) -> int:
    """Roll back batches left open by a killed process, then finish its roll-ups (those of
    ``replica``, or with ``others`` of every other one; all when None); returns how many
    batches were rolled back."""
    ids = open_batches(store, older_than_s)
    if ids:
        log.warning("store: rolling back %d batch(es) interrupted mid-write", len(ids))
        rollback(store, ids)
    me = socket.gethostname()
    rollups.recover(store, me, older_than_s, replica, others=others)
    return len(ids)
