"""No orphans: the trace analysis workers and multiprocessing's resource tracker die with the
server, even when it is killed with SIGKILL, and a restart finds none of them running."""

from __future__ import annotations

import os
import time
from pathlib import Path

import payloads
from serverproc import ServerProcess
from srvclient import Client

BERT = (
    payloads.DATA
    / "kineto"
    / "tracelens"
    / "h100"
    / "gaunernst_bert-small-uncased__1016001.json.gz"
)


def _children(pid: int) -> set[int]:
    """Every live descendant of ``pid``."""
    parents: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(ppid, []).append(int(d.name))
    out: set[int] = set()
    todo = [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_sigkill_leaves_no_worker_or_resource_tracker(tmp_path):
    srv = ServerProcess(tmp_path / "data").start()
    c = Client(srv.url, tenant="orphans")
    status, data = c.post(
        "/api/v1/traces",
        BERT.read_bytes(),
        "application/octet-stream",
        headers={"X-Aiflame-Trace-Id": "orphan-1"},
    )
    assert status == 200, data
    assert srv.proc is not None
    # The upload started the analysis worker (and the resource tracker of its queues).
    deadline = time.monotonic() + 60
    children: set[int] = set()
    while time.monotonic() < deadline:
        children = _children(srv.proc.pid)
        if len(children) >= 2:
            break
        time.sleep(0.2)
    assert len(children) >= 2, f"expected a worker and the resource tracker, got {children}"
    cmdlines = {p: Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ") for p in children}
    assert any(b"resource_tracker" in c for c in cmdlines.values()), cmdlines
    assert any(b"spawn_main" in c for c in cmdlines.values()), cmdlines

    srv.kill()  # SIGKILL: no handler of the server runs
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(_alive(p) for p in children):
        time.sleep(0.1)
    left = {p: cmdlines[p] for p in children if _alive(p)}
    assert not left, f"processes outlived the server: {left}"

    # A restart starts clean, and analyzes again (the trace was queued when it died).
    srv2 = ServerProcess(tmp_path / "data").start()
    try:
        c2 = Client(srv2.url, tenant="orphans")
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            if c2.get_json("/api/v1/traces/orphan-1")["status"] != "queued":
                break
            time.sleep(0.5)
        assert c2.get_json("/api/v1/traces/orphan-1")["status"] == "done"
    finally:
        srv2.stop()
    assert srv2.proc is not None
    assert not any(_alive(p) for p in _children(srv2.proc.pid) if p != os.getpid())
