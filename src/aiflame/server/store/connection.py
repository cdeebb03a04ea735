"""One :class:`Store` over either engine: chDB in this process, or ClickHouse over HTTP.

chDB hosts one engine per process; each clickhouse-connect client on it owns a connection
handle with its own lock, so a small pool of clients lets queries of the web UI run while
the writer inserts (the engine itself is multi-threaded and releases the GIL). A ClickHouse
server gets the same pool of HTTP clients. Rows travel as Arrow tables both ways, so numpy
columns are neither converted nor copied one value at a time.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import queue
import threading
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from aiflame.errors import AiflameError
from aiflame.server.errors import BadRequest, Overloaded, RequestError
from aiflame.server.store.url import StoreURL

log = logging.getLogger("aiflame.server")

# Settings that make the same statements correct on a cluster: subqueries in IN over
# Distributed tables run once and are shipped to the shards, and an insert returns only
# once every shard holds its rows (so an acknowledged push is durable).
CLUSTER_QUERY_SETTINGS = {"distributed_product_mode": "global"}
CLUSTER_INSERT_SETTINGS = {"distributed_foreground_insert": 1}


class StoreError(AiflameError):
    pass


class Store:
    """Connections to the store in two lanes: ``read`` (queries; this object) and ``write``
    (the writer, its roll-ups and the journal; :meth:`writes`). The lanes have their own
    connections, so readers holding every read connection never keep a batch from the
    store. ``read_settings`` go with every query of the read lane (a time limit)."""

    def __init__(
        self,
        url: StoreURL,
        pool_size: int = 4,
        write_pool_size: int = 0,
        read_settings: dict[str, Any] | None = None,
    ) -> None:
        self.url = url
        self.db = url.database
        self.cluster = url.cluster
        self._clients: queue.Queue[Any] = queue.Queue()
        self._write_clients: queue.Queue[Any] = self._clients
        self._settings: dict[str, Any] | None = read_settings or None
        self._all: list[Any] = []
        self._lock = threading.Lock()
        try:
            for _ in range(pool_size):
                client = self._connect()
                self._all.append(client)
                self._clients.put(client)
            if write_pool_size:
                self._write_clients = queue.Queue()
                for _ in range(write_pool_size):
                    client = self._connect()
                    self._all.append(client)
                    self._write_clients.put(client)
        except Exception as e:
            self.close()
            raise StoreError(f"cannot open the store {url.describe()}: {_short(e)}") from None

    def writes(self) -> Store:
        """This store on the write lane's connections, without the readers' settings."""
        view = copy.copy(self)
        view._clients = self._write_clients
        view._settings = None
        return view

    def _connect(self) -> Any:
        import clickhouse_connect

        if self.url.kind == "chdb":
            return clickhouse_connect.get_client(dsn=f"chdb://{self.url.path}")
        return clickhouse_connect.get_client(
            host=self.url.host,
            port=self.url.port,
            username=self.url.user,
            password=self.url.password,
            secure=self.url.secure,
            compress=True,
            connect_timeout=10,
            send_receive_timeout=300,
            settings=CLUSTER_QUERY_SETTINGS if self.cluster else None,
        )

    @contextlib.contextmanager
    def client(self) -> Iterator[Any]:
        c = self._clients.get()
        try:
            yield c
        finally:
            self._clients.put(c)

    # -- statements -------------------------------------------------------------------------
    def command(
        self, sql: str, params: dict[str, Any] | None = None, settings: dict[str, Any] | None = None
    ) -> Any:
        """Run a statement. ``settings`` are an insert's (``INSERT ... SELECT``): on a
        cluster, it returns once every shard holds the rows, as :meth:`insert` does."""
        if settings is not None and self.cluster:
            settings = {**CLUSTER_INSERT_SETTINGS, **settings}
        with self.client() as c:
            return c.command(sql, parameters=params or None, settings=settings)

    def rows(self, sql: str, params: dict[str, Any] | None = None) -> list[tuple]:
        with self.client() as c:
            return c.query(sql, parameters=params or None, settings=self._settings).result_rows

    def arrow(self, sql: str, params: dict[str, Any] | None = None) -> pa.Table:
        with self.client() as c:
            return c.query_arrow(
                sql, parameters=params or None, use_strings=True, settings=self._settings
            )

    def insert(self, table: str, data: pa.Table, settings: dict[str, Any] | None = None) -> None:
        if data.num_rows == 0:
            return
        if self.cluster:
            settings = {**CLUSTER_INSERT_SETTINGS, **(settings or {})}
        with self.client() as c:
            c.insert_arrow(f"{self.db}.{table}", data, settings=settings)

    def delete_where(self, table: str, condition: str, params: dict[str, Any]) -> None:
        """Delete rows now (a lightweight delete; on a cluster, a synchronous mutation of
        every replica's local table)."""
        if self.cluster:
            self.command(
                f"ALTER TABLE {self.db}.{table}_local ON CLUSTER '{self.cluster}' "
                f"DELETE WHERE {condition} SETTINGS mutations_sync = 2",
                params,
            )
        else:
            self.command(f"DELETE FROM {self.db}.{table} WHERE {condition}", params)

    def close(self) -> None:
        for c in self._all:
            with contextlib.suppress(Exception):
                c.close()
        self._all.clear()


# The store's error codes (ClickHouse's ErrorCodes.cpp) that a query's own arguments cause: a
# regex RE2 will not compile, a query too large or too deep, an argument out of range.
_CLIENT_CODES = {
    36: "bad arguments",
    43: "illegal type of argument",
    69: "argument out of bound",
    167: "the query is too big",
    168: "the query is too deep",
    306: "the query is too deep",
    369: "the query is too large",
    427: "the regex cannot be compiled",
}
# ... and those of a query that costs more than the server lets one query cost.
_LIMIT_CODES = {
    159: "the query ran longer than the time limit",
    160: "the query ran too slowly",
    241: "the query needed more memory than allowed",
    158: "the query reads too many rows",
    307: "the query reads too many bytes",
}


def query_error(e: BaseException, timeout_s: float | None = None) -> RequestError | None:
    """What a store's error answers a client: a query made invalid by its arguments is a
    400, one over the limits a 503 (narrow it, or try when the server is less busy), any
    other failure of the store a 503 with Retry-After; None for what is not the store's."""
    if type(e).__module__.split(".")[0] != "clickhouse_connect":
        return None
    code = getattr(e, "code", None)
    detail = _short(e).removeprefix(f"Code: {code}. ").removeprefix("DB::Exception: ")[:200]
    if code in _CLIENT_CODES:
        return BadRequest(f"the store refused the query ({_CLIENT_CODES[code]}): {detail}")
    if code in _LIMIT_CODES:
        limit = f" of {timeout_s:g} s" if code == 159 and timeout_s else ""
        return Overloaded(
            f"{_LIMIT_CODES[code]}{limit}: narrow its time range or selector", retry_after=10
        )
    return Overloaded(f"the store failed: {detail}", retry_after=10)


def _short(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:300] if text else type(e).__name__


def open_store(
    url: StoreURL,
    pool_size: int = 4,
    write_pool_size: int = 0,
    read_settings: dict[str, Any] | None = None,
) -> Store:
    if url.kind == "chdb":
        import os

        try:
            os.makedirs(url.path, exist_ok=True)
        except OSError as e:
            raise StoreError(f"cannot create the store directory {url.path}: {e}") from None
    return Store(url, pool_size, write_pool_size, read_settings)
