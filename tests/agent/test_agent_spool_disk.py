"""The spool on a real file system that fills up (a tmpfs of a few hundred KiB, mounted
here): it is bounded by the blocks its files take, not by their bytes; a full disk drops
the oldest entries first and counts every loss, in the ledger and in the agent's metric;
the agent's readiness probe fails while nothing can be written and its last line says so."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from agent_helpers import need

from aiflame.agent.spool import LEDGER, Spool, ledger_totals

pytestmark = pytest.mark.usefixtures("ebpf")


@pytest.fixture
def small_disk():
    """``make(kib)``: a tmpfs of that size (root only), unmounted at the end."""
    need(os.geteuid() == 0 and shutil.which("mount") is not None, "needs root to mount a tmpfs")
    made: list[str] = []

    def make(kib: int) -> Path:
        d = tempfile.mkdtemp(prefix="afs", dir="/tmp")
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kib}k,mode=0700", "tmpfs", d],
                       check=True)  # fmt: skip
        made.append(d)
        return Path(d)

    yield make
    for d in made:
        subprocess.run(["umount", "-l", d], check=False)
        with contextlib.suppress(OSError):
            os.rmdir(d)


def fill(path: Path, leave_kib: int) -> None:
    """Take the file system's space up to ``leave_kib`` free (others' files)."""
    st = os.statvfs(path)
    free = st.f_bavail * st.f_frsize - leave_kib * 1024
    with open(path / "others.bin", "ab") as f:
        f.write(b"\0" * max(free, 0))


def blocks(directory: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in directory.rglob("*") if p.is_file())


def profile_meta(samples: int) -> dict[str, object]:
    return {"kind": "profile", "profile_type": "process_cpu", "samples": samples,
            "labels": {"host": "h", "service_name": "svc"}}  # fmt: skip


def test_the_bound_is_what_the_files_take_on_disk(tmp_path):
    """300 profiles of 200 bytes: 60 KB of content, but each entry is two files of a block
    at least. A bound of 1 MiB keeps what fits in 1 MiB of blocks."""
    spool = Spool(str(tmp_path), ["local"], max_bytes=1 << 20)
    for _ in range(300):
        spool.put("pb.gz", os.urandom(200), profile_meta(1))
    kept = len(spool.pending("local"))
    assert 0 < kept < 300
    assert spool.bytes <= 1 << 20
    assert blocks(tmp_path / "local") <= 1 << 20
    assert spool.stats.dropped_entries == 300 - kept
    assert ledger_totals(str(tmp_path / LEDGER))["dropped"] == 300 - kept


def test_a_full_disk_drops_the_oldest_and_counts_every_loss(small_disk):
    disk = small_disk(1024)
    spool = Spool(str(disk / "spool"), ["local"], max_bytes=512 << 20)  # the disk is smaller
    first = [spool.put("pb.gz", os.urandom(40 << 10), profile_meta(10)) for _ in range(3)]
    assert all(first)
    fill(disk, leave_kib=100)  # others filled the disk: room for two more, not three
    later = [spool.put("pb.gz", os.urandom(40 << 10), profile_meta(10)) for _ in range(4)]
    assert all(later), "the newest are written, older ones make room"
    left = [e.id for e in spool.pending("local")]
    assert left[-4:] == [e.id for e in later if e]
    assert first[0].id not in left  # type: ignore[union-attr]
    dropped = spool.stats.dropped_entries
    assert dropped >= 1 and dropped == 3 + 4 - len(left)
    ledger = [json.loads(x) for x in (disk / "spool" / LEDGER).read_text().splitlines()]
    assert sum(1 for r in ledger if r.get("reason") == "disk full") == dropped
    assert spool.stats.write_error == ""
    # a disk full of others' files: what cannot be written even alone is lost, and counted
    for e in spool.pending("local"):
        spool.drop(e, reason="test")
    fill(disk, leave_kib=0)
    before = spool.stats.dropped_entries
    assert spool.put("pb.gz", os.urandom(40 << 10), profile_meta(10)) is None
    assert spool.stats.dropped_entries == before + 1 and spool.stats.dropped_samples >= 10
    assert "No space left" in spool.stats.write_error
    assert not [p for p in (disk / "spool" / "local").iterdir()]  # nothing half-written
    (disk / "others.bin").unlink()
    assert spool.put("pb.gz", os.urandom(1000), profile_meta(1)) is not None
    assert spool.stats.write_error == ""


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_the_agent_on_a_full_disk(agents, small_disk, short_tmp, tmp_path):
    disk = small_disk(2048)
    agent = agents(
        ["--period", "1", "--metrics-listen", "127.0.0.1:0", "--no-nvml", "--no-cuda",
         "--no-kineto-abstract", "--no-kineto-netns", "--api-socket", str(short_tmp / "a.sock"),
         "--trace-dir", str(tmp_path / "t")],
        disk / "spool",
    )  # fmt: skip
    port = agent.metrics_port
    assert get(port, "/healthz") == (200, "ok\n") and get(port, "/readyz") == (200, "ok\n")
    assert get(port, "/nothing")[0] == 404
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not list((disk / "spool" / "local").glob("*.pb.gz")):
        time.sleep(0.2)
    # another writer takes every block as soon as it is free: the agent drops its oldest
    # entries for room, in vain, until it has none and cannot write at all
    done = threading.Event()

    def other_writer() -> None:
        while not done.is_set():
            with contextlib.suppress(OSError):
                fill(disk, leave_kib=0)
            time.sleep(0.01)

    writer = threading.Thread(target=other_writer, daemon=True)
    writer.start()
    # (each block the agent frees goes to whichever writer is first: on a loaded machine
    # the agent keeps winning some for a minute or more before it has nothing left)
    deadline = time.monotonic() + 180
    ready = (200, "")
    try:
        while time.monotonic() < deadline:
            ready = get(port, "/readyz")
            if ready[0] == 503:
                break
            time.sleep(0.5)
    finally:
        done.set()
        writer.join(10)
    assert ready[0] == 503 and "the spool cannot be written" in ready[1], agent.output()
    assert get(port, "/healthz")[0] == 200  # alive all the same: no restart would help
    metrics = get(port, "/metrics")[1]
    lost = [
        x for x in metrics.splitlines()
        if x.startswith("aiflame_dropped_events_total") and 'what="spool profile"' in x
    ]  # fmt: skip
    assert lost and float(lost[0].split()[-1]) >= 1, metrics
    assert agent.stop() == 0
    assert "the last period not all spooled" in agent.output() or "lost" in agent.lines[-1]
    (disk / "others.bin").unlink()
