"""Nothing is written beside an input: reading an Nsight Systems export in WAL mode from a
read-only directory leaves no -wal or -shm file and changes nothing there (SQLite opens it
immutable); every command reads it."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from hostile_inputs import NSYS, aiflame


def listing(folder: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir()}


@pytest.fixture
def wal_export(tmp_path: Path):  # type: ignore[no-untyped-def]
    folder = tmp_path / "shared-traces"
    folder.mkdir()
    path = folder / "run.sqlite"
    shutil.copy(NSYS, path)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
    conn.close()
    assert sorted(p.name for p in folder.iterdir()) == ["run.sqlite"]
    folder.chmod(0o555)
    yield path
    folder.chmod(0o755)


def test_a_wal_export_in_a_read_only_folder_stays_untouched(wal_export: Path, tmp_path: Path):
    folder = wal_export.parent
    before = listing(folder)
    out = tmp_path / "out"
    out.mkdir()
    runs = [
        ("info", str(wal_export)),
        ("analyze", str(wal_export), "--json", str(out / "a.json")),
        ("convert", str(wal_export), "-f", "folded", "-o", str(out / "x.folded")),
        ("convert", str(wal_export), "-f", "chrome", "-o", str(out / "x.json")),
        ("flamegraph", str(wal_export), "-o", str(out / "x.html")),
    ]
    for args in runs:
        r = aiflame(*args)
        assert r.returncode == 0, (args, r.stderr.decode())
        assert listing(folder) == before, args  # no -wal, no -shm, the export unchanged
    assert json.loads((out / "a.json").read_text())["ranks"][0]["format"] == "nsys"
    assert (out / "x.folded").read_text().strip()
