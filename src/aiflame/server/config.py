"""The server's settings, from the command line (``aiflame server --help``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from aiflame.errors import AiflameError
from aiflame.server.ingest.push import Limits
from aiflame.server.store.schema import DEFAULT_RETENTION_S, RETENTION_GROUPS
from aiflame.server.store.url import DEFAULT_STORE

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str) -> int:
    """``90s``, ``15m``, ``12h``, ``30d``, ``2w`` -> seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text)
    if not m:
        raise AiflameError(f"invalid duration {text!r} (e.g. 30d, 12h, 90m)")
    seconds = int(float(m.group(1)) * _UNITS[m.group(2)])
    if seconds < 3600:
        raise AiflameError(f"a retention of {text} is too short (at least 1h)")
    return seconds


def parse_retention(values: list[str]) -> dict[str, int]:
    """``--retention 30d`` (every group) and ``--retention traces=90d`` (one group)."""
    out = dict(DEFAULT_RETENTION_S)
    for v in values:  # a plain duration sets every group, whatever its position
        if "=" not in v:
            out = dict.fromkeys(RETENTION_GROUPS, parse_duration(v))
    for v in values:
        group, eq, duration = v.partition("=")
        if not eq:
            continue
        if group not in RETENTION_GROUPS:
            raise AiflameError(
                f"--retention {v}: unknown group {group!r} (groups: {', '.join(RETENTION_GROUPS)})"
            )
        out[group] = parse_duration(duration)
    return out


@dataclass
class ServerConfig:
    store: str = DEFAULT_STORE
    listen: str = "127.0.0.1:4040"
    otlp_grpc_listen: str = ""  # OTLP/gRPC profiles (HOST:PORT, e.g. 127.0.0.1:4317); "" off
    tls_cert: str | None = None
    tls_key: str | None = None
    token_file: str | None = None
    retention_s: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_RETENTION_S))
    limits: Limits = field(default_factory=Limits)
    analysis_workers: int = 1
    # A batch of the writer is committed once its first request is due: one that waits for
    # its commit (a flush, a trace upload) after flush_interval_s, a push (answered once in
    # the write-ahead log) after logged_flush_interval_s: fewer, larger batches cost the
    # store much less CPU per profile, and the pushes are queryable that much later.
    flush_interval_s: float = 1.0
    logged_flush_interval_s: float = 10.0
    # ... or sooner, once a batch holds this many rows (samples and telemetry): about 3 s of
    # 1,000 agents' pushes, whose batch takes ~0.3 s of Python to build.
    batch_rows: int = 200_000
    # Committed batches are rolled up into the 10-minute and hourly roll-ups once a 10-minute
    # bucket is over (30 s after the wall clock's multiple of this): each series' rows of the
    # bucket are summed into one. Queries read the samples themselves for what is newer
    # (store/rollups.py).
    rollup_interval_s: float = 600.0
    store_connections: int = 8  # the queries' lane; the writer has connections of its own
    # Readers cannot starve ingest: every query runs with a time limit in the store, and at
    # most this many at once per token and tenant (and in all); beyond, a 429 + Retry-After.
    query_timeout_s: float = 30.0
    queries_per_client: int = 4
    queries_total: int = 16
    # Connections: a request's headers must arrive within header_timeout_s of its first byte
    # (and that byte within idle_timeout_s of the connection or the previous answer), its body at
    # body_min_bytes_per_s on average after body_timeout_s; a client address holds at most
    # max_client_connections open connections (0: no cap). See server/connections.py.
    idle_timeout_s: float = 30.0  # a connection waiting for its first or next request
    header_timeout_s: float = 10.0
    body_timeout_s: float = 10.0
    body_min_bytes_per_s: int = 16 << 10
    max_client_connections: int = 256
    wal_dir: str = "./aiflame-wal"  # the write-ahead log when the store is a ClickHouse server
    wal_fsync: bool = False
    log_level: str = "info"

    def host_port(self) -> tuple[str, int]:
        host, sep, port = self.listen.rpartition(":")
        if not sep or not port.isdigit():
            raise AiflameError(f"--listen {self.listen}: expected HOST:PORT")
        host = host.strip("[]") or "0.0.0.0"
        return host, int(port)
