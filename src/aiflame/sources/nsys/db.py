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
        self._columns: dict[str, dict[str, str]] = {}
        self._strings: dict[int, str] | None = None

    def require(self, table: str, *names: str) -> None:
        """Fail in one line naming what a table present lacks of the columns every
        Nsight Systems release writes in it (a damaged or hand-made export)."""
        if table not in self.tables:
            return
        missing = [n for n in names if self.pick(table, n) is None]
        if missing:
            cols = ", ".join(f'"{n}"' for n in missing)
            raise InputError(self.path, f"table {table} has no column {cols}: a damaged export")

    def is_nsys_export(self) -> bool:
        has_strings = "StringIds" in self.tables or "StringTable" in self.tables
        return has_strings and any(t in self.tables for t in NSYS_TABLES)

    def columns(self, table: str) -> dict[str, str]:
        """The columns of ``table`` and their declared types (upper case)."""
        cols = self._columns.get(table)
        if cols is None:
            if table not in self.tables:
                cols = {}
            else:
                rows = self.conn.execute(f'PRAGMA table_info("{table}")')
                cols = {r[1]: str(r[2] or "").upper() for r in rows}
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
        cols = self.columns(table)
        for w in wanted:
            names = (w,) if isinstance(w, str) else tuple(w)
            col = self.pick(table, *names)
            if col is None:
                exprs.append("NULL")
            elif "TEXT" in cols[col] or "CHAR" in cols[col]:
                # SQLite keeps whatever a row stores: a blob or a number in a column of
                # names is read as text (its bytes decoded as the rest are).
                exprs.append(f'CAST("{col}" AS TEXT)')
            else:
                exprs.append(f'"{col}"')
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
        try:
            conn = connect_read_only(db_path)
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


def connect_read_only(path: str) -> sqlite3.Connection:
    """Open an export for reading only, writing nothing beside it: ``immutable`` takes no
    locks and keeps no write-ahead log, so a database in WAL mode leaves no ``-wal`` or
    ``-shm`` file (a read-only directory or a shared trace folder stays untouched)."""
    uri = Path(path).resolve().as_uri() + "?mode=ro&immutable=1"
    return sqlite3.connect(uri, uri=True)


def mistyped_column(conn: sqlite3.Connection) -> str | None:
    """The first column declared numeric that holds what the readers cannot count with,
    said in one sentence: text or a blob, a real number where an integer belongs, or an
    integer so large that adding a duration to it leaves 64 bits.

    SQLite keeps whatever a row stores whatever the declared type, so a damaged or hand-made
    export can have ``'text'`` in ``start``; the readers then fail on arithmetic."""
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    numeric: list[tuple[str, str, bool]] = []  # (table, column, declared an integer)
    for table in sorted(tables):
        for _cid, col, decl, *_ in conn.execute(f'PRAGMA table_info("{table}")'):
            kind = (decl or "").upper()
            if any(t in kind for t in ("INT", "REAL", "NUM", "FLOA")):
                numeric.append((table, col, "INT" in kind))
    checks = (
        ("typeof(\"{c}\") IN ('text', 'blob')", "{kind} where a number belongs", False),
        ("typeof(\"{c}\") = 'real'", "the real number {value} where an integer belongs", True),
        (
            "typeof(\"{c}\") = 'integer' "
            'AND ("{c}" > 4611686018427387904 OR "{c}" < -4611686018427387904)',
            "{value}, beyond the 64 bits of a time or size with a duration added",
            True,
        ),
    )
    for where, says, integers_only in checks:
        for table, col, is_int in numeric:
            if integers_only and not is_int:
                continue
            row = conn.execute(
                f'SELECT typeof("{col}"), "{col}" FROM "{table}" WHERE '
                + where.format(c=col)
                + " LIMIT 1"
            ).fetchone()
            if row:
                value = row[1] if isinstance(row[1], int | float) else None
                said = says.format(
                    kind=row[0], value=f"{value:g}" if isinstance(value, float) else value
                )
                return f'column "{col}" of {table} holds {said}'
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
        conn = connect_read_only(path)
    except (sqlite3.Error, OSError, ValueError):
        return True
    try:
        return NsysDB(conn, path).is_nsys_export()
    except sqlite3.Error:
        return True
    finally:
        conn.close()
