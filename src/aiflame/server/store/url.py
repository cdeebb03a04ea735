"""``--store URL``: ``chdb://DIR`` (embedded, the default) or ``clickhouse[s]://...``."""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit

from aiflame.errors import AiflameError

DEFAULT_STORE = "chdb://./aiflame-data"
DEFAULT_DATABASE = "aiflame"


@dataclass(frozen=True)
class StoreURL:
    kind: str  # "chdb" or "clickhouse"
    path: str = ""  # chdb: the data directory
    host: str = ""
    port: int = 0
    secure: bool = False
    user: str = "default"
    password: str = ""
    database: str = DEFAULT_DATABASE
    cluster: str | None = None  # ClickHouse cluster name: Replicated + Distributed tables

    def describe(self) -> str:
        """The URL without its password, for logs."""
        if self.kind == "chdb":
            return f"chdb://{self.path} (embedded ClickHouse engine)"
        scheme = "clickhouses" if self.secure else "clickhouse"
        cluster = f" on cluster {self.cluster}" if self.cluster else ""
        return f"{scheme}://{self.user}@{self.host}:{self.port}/{self.database}{cluster}"


def parse_store_url(text: str) -> StoreURL:
    parts = urlsplit(text)
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    if parts.scheme == "chdb":
        # chdb://relative/dir, chdb:///absolute/dir, chdb://./dir
        raw = (parts.netloc + parts.path) if parts.netloc else parts.path
        if not raw:
            raise AiflameError(f"--store {text}: chdb:// needs a directory, e.g. chdb://./data")
        return StoreURL("chdb", path=os.path.abspath(unquote(raw)))
    if parts.scheme in ("clickhouse", "clickhouses", "http", "https"):
        secure = parts.scheme in ("clickhouses", "https")
        if not parts.hostname:
            raise AiflameError(f"--store {text}: no host")
        db = parts.path.strip("/") or DEFAULT_DATABASE
        if not db.replace("_", "a").isalnum():
            raise AiflameError(f"--store {text}: invalid database name {db!r}")
        cluster = query.get("cluster") or None
        if cluster is not None and not cluster.replace("_", "a").replace("-", "a").isalnum():
            raise AiflameError(f"--store {text}: invalid cluster name {cluster!r}")
        try:
            port = parts.port or (8443 if secure else 8123)
        except ValueError:
            raise AiflameError(f"--store {text}: invalid port") from None
        return StoreURL(
            "clickhouse",
            host=parts.hostname,
            port=port,
            secure=secure,
            user=unquote(parts.username or "default"),
            password=unquote(parts.password or ""),
            database=db,
            cluster=cluster,
        )
    raise AiflameError(
        f"--store {text}: unknown store; use chdb://DIR or clickhouse://user:pass@host:8123/db"
    )
