"""What one server process holds: the store, the writer, tokens, caches, the analyzer."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from aiflame.server.admission import QueryAdmission
from aiflame.server.auth import TokenCheck
from aiflame.server.config import ServerConfig
from aiflame.server.errors import Overloaded, RequestError
from aiflame.server.ingest.dictionaries import DictionaryCache
from aiflame.server.ingest.hashing import StringHashes
from aiflame.server.store import migrations
from aiflame.server.store.connection import Store, open_store
from aiflame.server.store.health import StoreHealth
from aiflame.server.store.url import parse_store_url
from aiflame.server.store.wal import Record, WriteAheadLog
from aiflame.server.store.writer import Work, Writer, recover
from aiflame.server.traces import TraceAnalyzer

log = logging.getLogger("aiflame.server")
_JANITOR_S = 60.0
_INSERT_THREADS = 4  # the writer's inserts of one batch, one table each, at once
_GRACE_S = 120.0  # a batch open this long on another replica was abandoned


@dataclass
class Counters:
    requests: dict[str, int] = field(default_factory=dict)
    rejected: dict[str, int] = field(default_factory=dict)
    profiles: int = 0
    samples: int = 0
    telemetry: int = 0
    traces: int = 0

    def count(self, table: dict[str, int], key: str, n: int = 1) -> None:
        table[key] = table.get(key, 0) + n


# How a logged request of one kind (push, ingest, telemetry, otlp) is decoded again when
# the write-ahead log is replayed. The routes own the decoders; the server's assembly
# (app.WAL_DECODERS) hands them over, so that the state imports no route.
Decoder = Callable[["ServerState", Record], list[Work]]


class ServerState:
    def __init__(self, config: ServerConfig, decoders: Mapping[str, Decoder]) -> None:
        self.config = config
        self.limits = config.limits
        self.tokens = TokenCheck(config.token_file)
        self.url = parse_store_url(config.store)
        # Queries run on the read lane (with their time limit), the writer on its own
        # connections: readers holding every read connection never hold up a batch.
        self.store: Store = open_store(
            self.url,
            config.store_connections,
            write_pool_size=_INSERT_THREADS + 2,
            read_settings={"max_execution_time": config.query_timeout_s},
        )
        self.write_store = self.store.writes()
        migrations.migrate(self.write_store, config.retention_s)
        # What a killed process left: batches half-written, committed ones not rolled up
        # (this replica's at once, another's once it has been gone a while).
        self.replica = socket.gethostname()
        recover(self.write_store, replica=self.replica)
        recover(self.write_store, older_than_s=_GRACE_S, replica=self.replica, others=True)
        _warm_up()
        self.writer = Writer(
            self.write_store,
            insert_threads=_INSERT_THREADS,
            flush_interval_s=config.flush_interval_s,
            logged_interval_s=config.logged_flush_interval_s,
            batch_rows=config.batch_rows,
            rollup_interval_s=config.rollup_interval_s,
        )
        self.strings = StringHashes()
        self.dictionaries = DictionaryCache()  # of the profiles that agents push every period
        self.counters = Counters()
        self.started = time.time()
        base = self.url.path if self.url.kind == "chdb" else tempfile.gettempdir()
        self.tmpdir = os.path.join(
            base, "tmp" if self.url.kind == "chdb" else f"aiflame-{os.getpid()}"
        )
        self.analyzer = TraceAnalyzer(self.writer, self.tmpdir, config.analysis_workers)
        wal_dir = os.path.join(base, "wal") if self.url.kind == "chdb" else config.wal_dir
        self.wal = WriteAheadLog(wal_dir, fsync=config.wal_fsync)
        self.wal_health = StoreHealth("wal")
        self._replay_wal(decoders)
        self.page_cache: dict[str, str] = {}
        self.admission = QueryAdmission(config.queries_per_client, config.queries_total)
        self._stop = threading.Event()
        self._janitor = threading.Thread(target=self._janitor_loop, daemon=True)
        self._janitor.start()
        self._requeue_traces()

    # -- writing --------------------------------------------------------------------------
    def accept(self, record: Record, works: list[Work]) -> None:
        """Log a decoded push and queue it: once this returns, the push may be answered."""
        rows = sum(w.rows for w in works)
        if self.writer.behind(rows) or self.wal.over_limit():
            raise Overloaded("the store is behind; retry later", retry_after=2)
        try:
            segment = self.wal.append(record)
        except OSError as e:  # a full disk: said, and retried by the client
            self.wal_health.failed(e, "logging a push")
            raise Overloaded(
                f"cannot log the push ({e.strerror or e}); retry later",
                retry_after=self.wal_health.retry_after_s(),
            ) from None
        self.wal_health.succeeded()
        fut = self.writer.submit(works, durable=True, on_reject=self._set_aside(record))
        fut.add_done_callback(lambda f: self.wal.committed(segment))

    def _set_aside(self, record: Record):  # type: ignore[no-untyped-def]
        return lambda error: self.wal.set_aside(record, str(error).strip()[:2000])

    def ready(self) -> str | None:
        """Why the server cannot take pushes now (None: it can): the store cannot write,
        or the write-ahead log cannot (probed again here while it failed)."""
        if not self.writer.health.ok:
            return f"the store cannot write: {self.writer.health.last_error}"
        if not self.wal_health.ok:
            try:
                self.wal.probe()
            except OSError as e:
                self.wal_health.failed(e, "logging a push")
                return f"the write-ahead log cannot write: {e.strerror or e}"
            self.wal_health.succeeded()
        return None

    def _replay_wal(self, decoders: Mapping[str, Decoder]) -> None:
        """Pushes acknowledged by a process that died before storing them."""
        upto = self.wal.current
        futures, skipped = [], 0
        for rec in self.wal.replay(upto):
            try:
                works = decoders[rec.kind](self, rec)
            except RequestError as e:  # e.g. older than the retention by now: kept aside
                skipped += 1
                log.warning("wal: a logged %s cannot be stored: %s", rec.kind, e.message)
                self.wal.set_aside(rec, e.message)
                continue
            futures.append(self.writer.submit(works, durable=True, on_reject=self._set_aside(rec)))
        for f in futures:
            f.result()
        if futures or skipped:
            log.info("wal: %d logged request(s) replayed into the store", len(futures))
        self.wal.drop_before(upto)

    async def store_works(self, works: list[Work], patient: bool = False) -> None:
        """Hand works to the writer and wait until they are committed (``patient``: with the
        pushes' batch, not sooner)."""
        fut = self.writer.submit(works, patient=patient)
        try:
            await asyncio.wait_for(asyncio.wrap_future(fut), self.writer.commit_timeout_s)
        except TimeoutError:
            raise Overloaded("the store did not commit in time; retry", retry_after=5) from None

    async def roll_up_now(self) -> None:
        """Roll up every committed batch now (not at the writer's next interval)."""
        fut = self.writer.roll_up_now()
        try:
            await asyncio.wait_for(asyncio.wrap_future(fut), self.writer.commit_timeout_s)
        except TimeoutError:
            raise Overloaded("the store did not roll up in time; retry", retry_after=5) from None

    def retention_floor_ms(self, group: str) -> int:
        return int((time.time() - self.config.retention_s[group]) * 1000)

    # -- background -----------------------------------------------------------------------
    def _janitor_loop(self) -> None:
        while not self._stop.wait(_JANITOR_S):
            try:
                recover(self.write_store, _GRACE_S, replica=self.replica, others=True)
            except Exception as e:
                log.warning("janitor: %s", e)

    def _requeue_traces(self) -> None:
        """Traces received but never analyzed (the server stopped first) are queued again."""
        try:
            rows = self.store.rows(
                f"SELECT t.tenant, t.trace_id, t.received, t.labels, t.request_id, t.bytes "
                f"FROM {self.store.db}.traces AS t FINAL WHERE t.status = 'queued'"
            )
        except Exception as e:
            log.warning("traces: cannot list queued traces: %s", e)
            return
        for tenant, trace_id, received, labels, request_id, size in rows:
            blob = self.trace_blob(tenant, trace_id)
            if blob is None:
                continue
            row = {
                "tenant": tenant,
                "trace_id": trace_id,
                "received": int(received.timestamp() * 1000),
                "labels": dict(labels),
                "request_id": request_id,
                "bytes": size,
            }
            self.analyzer.enqueue(tenant, trace_id, row, blob)
        if rows:
            log.info("traces: %d trace(s) queued for analysis again", len(rows))

    def trace_blob(self, tenant: str, trace_id: str) -> bytes | None:
        with self.store.client() as c:
            r = c.query(
                f"SELECT blob FROM {self.store.db}.trace_blobs WHERE tenant = {{t:String}} "
                "AND trace_id = {i:String} LIMIT 1",
                parameters={"t": tenant, "i": trace_id},
                column_formats={"blob": "bytes"},
            )
            rows = r.result_rows
        return rows[0][0] if rows else None

    def close(self) -> None:
        self._stop.set()
        self.analyzer.close()
        self.writer.close()
        self.wal.close()
        self.store.close()


def _warm_up() -> None:
    """What the first batch would otherwise pay for: pyarrow imports pandas (about a second
    of CPU) the first time it builds a dictionary column."""
    import numpy as np

    from aiflame.server.ingest.profile_rows import dictionary_column

    dictionary_column(np.zeros(1, dtype=np.int64), [""])


def run_blocking(fn, *args):  # type: ignore[no-untyped-def]
    """Run a query's work off the event loop (the readers' threads)."""
    return asyncio.get_running_loop().run_in_executor(_POOL, fn, *args)


def run_ingest(fn, *args):  # type: ignore[no-untyped-def]
    """Run ingest's work (decoding a push) off the event loop, on threads of its own that
    no reader can occupy."""
    return asyncio.get_running_loop().run_in_executor(_INGEST_POOL, fn, *args)


_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="aiflame-req")
_INGEST_POOL = concurrent.futures.ThreadPoolExecutor(
    max_workers=4, thread_name_prefix="aiflame-ingest"
)
