"""Reading an ``nsys export --type sqlite`` database whatever its schema version.

Nsight Systems adds, renames and drops columns between releases and leaves out tables that
were not recorded, so every query here looks tables and columns up by name first and
returns nothing (rather than failing) for what is absent.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from aiflame.errors import InputError
from aiflame.sources.inputs import GZIP_MAGIC, Input

SQLITE_MAGIC = b"SQLite format 3\x00"

# Tables only Nsight Systems writes; one of them (with StringIds) marks an nsys export.
NSYS_TABLES = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "NVTX_EVENTS",
    "COMPOSITE_EVENTS",
    "TARGET_INFO_GPU",
    "TARGET_INFO_SESSION_START_TIME",
    "ANALYSIS_DETAILS",
    "EXPORT_META_DATA",
)

# A serialized GlobalId packs (vm, pid, tid) as ... | pid << 24 | tid.
_ID_BITS = 24
_ID_MASK = (1 << _ID_BITS) - 1


def pid_of(global_id: int | None) -> int:
    return ((global_id or 0) >> _ID_BITS) & _ID_MASK


def tid_of(global_id: int | None) -> int:
    return (global_id or 0) & _ID_MASK


def process_key(global_id: int | None) -> int:
    """The process part of a globalTid/globalPid (host and pid bits), for matching them."""
    return (global_id or 0) >> _ID_BITS


def _decode(raw: bytes) -> str:
    # Exports carry raw bytes from the target (environment, names); never fail on them.
    return raw.decode("utf-8", errors="replace")


class NsysDB:
    """A read-only connection with name-based access to tables and columns."""

    def __init__(self, conn: sqlite3.Connection, path: str) -> None:
        self.conn = conn
        self.path = path
        conn.text_factory = _decode
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")
        self.tables: set[str] = {r[0] for r in rows}
        self._columns: dict[str, set[str]] = {}
        self._strings: dict[int, str] | None = None

    def is_nsys_export(self) -> bool:
        has_strings = "StringIds" in self.tables or "StringTable" in self.tables
        return has_strings and any(t in self.tables for t in NSYS_TABLES)

    def columns(self, table: str) -> set[str]:
        cols = self._columns.get(table)
        if cols is None:
            if table not in self.tables:
                cols = set()
            else:
                cols = {r[1] for r in self.conn.execute(f'PRAGMA table_info("{table}")')}
            self._columns[table] = cols
        return cols

    def has_rows(self, table: str) -> bool:
        if table not in self.tables:
            return False
        return self.conn.execute(f'SELECT 1 FROM "{table}" LIMIT 1').fetchone() is not None

    def pick(self, table: str, *candidates: str) -> str | None:
        """The first of ``candidates`` that ``table`` has as a column."""
        cols = self.columns(table)
        return next((c for c in candidates if c in cols), None)

    def select(
        self,
        table: str,
        wanted: Sequence[str | Sequence[str]],
        where: str = "",
        order: str = "",
    ) -> Iterator[tuple]:
        """Rows of ``table`` with one value per entry of ``wanted`` (NULL where absent).

        An entry may be a list of alternative column names, the first present one wins.
        """
        if table not in self.tables:
            return iter(())
        exprs = []
        for w in wanted:
            names = (w,) if isinstance(w, str) else tuple(w)
            col = self.pick(table, *names)
            exprs.append(f'"{col}"' if col else "NULL")
        sql = f'SELECT {", ".join(exprs)} FROM "{table}"'
        if where:
            sql += f" WHERE {where}"
        if order:
            sql += f" ORDER BY {order}"
        return iter(self.conn.execute(sql))

    # -- shared lookups ---------------------------------------------------------------------
    @property
    def strings(self) -> dict[int, str]:
        """StringIds: id -> text (names of kernels, API calls, symbols, modules...)."""
        if self._strings is None:
            table = "StringIds" if "StringIds" in self.tables else "StringTable"
            self._strings = {i: v for i, v in self.select(table, ["id", "value"]) if v is not None}
        return self._strings

    def enum(self, table: str) -> dict[int, str]:
        """An ``ENUM_*`` table (id -> name); empty for exports older than these tables."""
        return {i: n for i, n in self.select(table, ["id", "name"]) if n is not None}

    def meta(self, name: str) -> str | None:
        for (value,) in self.select("EXPORT_META_DATA", ["value"], where=f"name = '{name}'"):
            return value
        return None


@contextmanager
def open_db(source: Input) -> Iterator[NsysDB]:
    """Open ``source`` read-only; stdin and gzip input are first copied to a temporary file
    because SQLite can only read a seekable file."""
    head = source.head(len(SQLITE_MAGIC))
    if not head.startswith(SQLITE_MAGIC):
        raise InputError(
            source.path, "not a SQLite database (expected 'nsys export --type sqlite')"
        )
    tmp: str | None = None
    try:
        if source.is_stdin or _is_gzip(source.path):
            fd, tmp = tempfile.mkstemp(prefix="aiflame-nsys-", suffix=".sqlite")
            with os.fdopen(fd, "wb") as out, source.open_binary(whole=True) as f:
                shutil.copyfileobj(f, out, 1 << 20)
            db_path = tmp
        else:
            db_path = source.path
        uri = Path(db_path).resolve().as_uri() + "?mode=ro"
        try:
            conn = sqlite3.connect(uri, uri=True)
        except sqlite3.Error as e:
            raise InputError(source.path, f"cannot open SQLite database ({e})") from None
        try:
            yield NsysDB(conn, source.path)
        except sqlite3.Error as e:
            raise InputError(source.path, f"corrupt or truncated SQLite database ({e})") from None
        except (TypeError, ValueError, OverflowError):
            # Only on the failure path: name the column that broke the reading, if any.
            wrong = mistyped_column(conn)
            if wrong is None:
                raise
            raise InputError(source.path, wrong) from None
        finally:
            conn.close()
    finally:
        if tmp:
            Path(tmp).unlink(missing_ok=True)


def mistyped_column(conn: sqlite3.Connection) -> str | None:
    """The first column declared numeric that holds text or a blob, said in one sentence.

    SQLite keeps whatever a row stores whatever the declared type, so a damaged or hand-made
    export can have ``'text'`` in ``start``; the readers then fail on arithmetic."""
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    for table in sorted(tables):
        for _cid, col, decl, *_ in conn.execute(f'PRAGMA table_info("{table}")'):
            if not any(t in (decl or "").upper() for t in ("INT", "REAL", "NUM", "FLOA")):
                continue
            row = conn.execute(
                f'SELECT typeof("{col}") FROM "{table}" '
                f"WHERE typeof(\"{col}\") IN ('text', 'blob') LIMIT 1"
            ).fetchone()
            if row:
                return f'column "{col}" of {table} holds {row[0]} where a number belongs'
    return None


def _is_gzip(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(2) == GZIP_MAGIC
    except OSError:
        return False


def file_has_nsys_tables(path: str) -> bool:
    """For sniffing a plain file whose first bytes do not name the nsys tables. A SQLite
    file whose schema cannot be read counts as one, so that loading it reports the damage
    rather than an unknown format."""
    try:
        uri = Path(path).resolve().as_uri() + "?mode=ro"
        conn = sqlite3.connect(uri, uri=True)
    except (sqlite3.Error, OSError, ValueError):
        return True
    try:
        return NsysDB(conn, path).is_nsys_export()
    except sqlite3.Error:
        return True
    finally:
        conn.close()
