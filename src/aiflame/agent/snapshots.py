"""GPU memory snapshots on request, of processes that run the aiflame bootstrap with
``AIFLAME_SNAPSHOT=1`` (``collectors/torch_bootstrap/aiflame_snapshot.py`` is the other
side): the agent finds the signal a process announced in its ``/tmp``, checks in
``/proc/PID/status`` that the process still catches it (an uncaught real-time signal would
kill it), writes the request id, sends the signal and waits, bounded, for the pickled
``torch.cuda.memory._snapshot()``, which it compresses into the output directory
(``aiflame memory`` reads it). With ``upload`` (``aiflame trace --memory-snapshot --server``,
or a fleet request of the server) the compressed snapshot is also spooled for the server,
with the process's workload labels, like a trace."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import threading
import time
from dataclasses import dataclass

from aiflame.agent import procroot
from aiflame.agent.identity import Identities
from aiflame.agent.tracing import TraceBusy, TraceError, Upload, request_id

STEM = "aiflame-snapshot-"  # in the process's /tmp: <pid>.json, <pid>.request, <pid>-<id>.*
POLL_S = 0.1
TIMEOUT_S = 60.0  # the handler waits for the main thread's next bytecode
MAX_PROCESSES = 256


@dataclass
class SnapshotRequest:
    pids: list[int]
    job_id: str = ""
    all: bool = False
    output_dir: str = ""
    upload: bool = False
    request_id: str = ""  # the server's, for a fleet request

    @classmethod
    def from_json(cls, body: dict[str, object]) -> SnapshotRequest:
        pids = body.get("pids") or []
        if not isinstance(pids, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and p > 0 for p in pids
        ):
            raise TraceError("pids: a list of process ids")
        job_id = str(body.get("job_id") or "")
        every = body.get("all") is True
        if sum((bool(pids), bool(job_id), every)) != 1:
            raise TraceError("one of pids, job_id or all")
        if len(pids) > MAX_PROCESSES:
            raise TraceError(f"at most {MAX_PROCESSES} processes")
        out = body.get("output_dir") or ""
        if not isinstance(out, str):
            raise TraceError("output_dir: a path")
        given = str(body.get("request_id") or "")
        return cls(list(pids), job_id, every, out, bool(body.get("upload")), given)


def namespace_pid(pid: int, proc: str = "/proc") -> int | None:
    """The process's id in its own PID namespace (the last of ``NSpid``)."""
    try:
        with open(f"{proc}/{pid}/status") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError, IndexError):
        return None
    return pid


def catches(pid: int, signum: int, proc: str = "/proc") -> bool:
    """Whether the process has a handler for ``signum`` (``SigCgt``, the kernel's record)."""
    try:
        with open(f"{proc}/{pid}/status") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    except (OSError, ValueError, IndexError):
        return False
    return False


def announced_signal(pid: int, proc: str = "/proc") -> int | None:
    ns = namespace_pid(pid, proc)
    if ns is None:
        return None
    try:
        with procroot.tmp_dir(pid, proc) as d, procroot.open_read(d, f"{STEM}{ns}.json") as f:
            signum = json.loads(f.read(4096)).get("signal")
    except (OSError, ValueError, AttributeError):
        return None
    return signum if isinstance(signum, int) and 32 <= signum <= 64 else None


class SnapshotManager:
    def __init__(
        self,
        identities: Identities,
        output_dir: str,
        proc: str = "/proc",
        upload: Upload | None = None,
    ) -> None:
        self.identities = identities
        self.output_dir = output_dir
        self.proc = proc
        self.upload = upload
        self._busy: set[int] = set()
        self._lock = threading.Lock()

    def select(self, req: SnapshotRequest) -> tuple[list[int], list[dict[str, object]]]:
        if req.pids:
            return sorted(set(req.pids)), []
        found = []
        for name in os.listdir(self.proc):
            if name.isdigit() and announced_signal(int(name), self.proc) is not None:
                pid = int(name)
                if req.all or self.identities.labels(pid).get("job_id") == req.job_id:
                    found.append(pid)
        return sorted(found)[:MAX_PROCESSES], []

    def run(self, req: SnapshotRequest) -> dict[str, object]:
        pids, skipped = self.select(req)
        failed: list[dict[str, object]] = []
        signals: dict[int, int] = {}
        for pid in pids:
            signum = announced_signal(pid, self.proc)
            if signum is None:
                why = "does not serve memory snapshots (run it with the aiflame bootstrap "
                why += "and AIFLAME_SNAPSHOT=1)"
                failed.append({"pid": pid, "why": why})
            elif not catches(pid, signum, self.proc):
                why = f"no longer catches signal {signum} (the program took it): not sent"
                failed.append({"pid": pid, "why": why})
            else:
                signals[pid] = signum
        with self._lock:
            busy = sorted(set(signals) & self._busy)
            if busy:
                listed = ", ".join(map(str, busy))
                raise TraceBusy(f"a memory snapshot of PID {listed} is already being taken")
            self._busy.update(signals)
        try:
            snapshots = self._take(signals, req, failed)
        finally:
            with self._lock:
                self._busy.difference_update(signals)
        return {"snapshots": snapshots, "skipped": skipped, "failed": failed}

    def _take(
        self, signals: dict[int, int], req: SnapshotRequest, failed: list[dict[str, object]]
    ) -> list[dict[str, object]]:
        out_dir = req.output_dir or self.output_dir
        rid = request_id(req.request_id)
        os.makedirs(out_dir, exist_ok=True)
        waiting: dict[int, str] = {}  # pid -> its files' stem in its /tmp
        for pid, signum in signals.items():
            stem = f"{STEM}{namespace_pid(pid, self.proc)}"
            try:
                with procroot.tmp_dir(pid, self.proc) as d:
                    procroot.write_new(d, f"{stem}.request", rid.encode())
                os.kill(pid, signum)
            except OSError as e:
                failed.append({"pid": pid, "why": f"could not be asked: {e.strerror or e}"})
                continue
            waiting[pid] = stem
        done: list[dict[str, object]] = []
        deadline = time.monotonic() + TIMEOUT_S
        while waiting and time.monotonic() < deadline:
            for pid, stem in list(waiting.items()):
                pickled, error = f"{stem}-{rid}.pickle", f"{stem}-{rid}.error"
                try:
                    with procroot.tmp_dir(pid, self.proc) as d:
                        if procroot.exists(d, error):
                            with procroot.open_read(d, error) as f:
                                why = f.read(500).decode("utf-8", "replace").strip()
                            why = why.splitlines()[0] if why else "failed"
                            failed.append({"pid": pid, "why": f"the snapshot failed: {why}"})
                        elif procroot.exists(d, pickled):
                            path = self._collect(pid, d, pickled, out_dir, rid)
                            done.append({"pid": pid, "path": path})
                            if req.upload and self.upload is not None:
                                self._upload(pid, path, rid if req.request_id else "")
                        else:
                            continue
                        procroot.remove(d, pickled, error, f"{stem}.request")
                except OSError as e:
                    gone = not os.path.exists(f"{self.proc}/{pid}")
                    why = "exited before its snapshot was written" if gone else str(e)
                    failed.append({"pid": pid, "why": why})
                del waiting[pid]
            if waiting:
                time.sleep(POLL_S)
        for pid in waiting:
            why = f"no snapshot within {TIMEOUT_S:.0f} s (its main thread may be blocked)"
            failed.append({"pid": pid, "why": why})
        return done

    def _upload(self, pid: int, path: str, server_request: str) -> None:
        assert self.upload is not None
        with open(path, "rb") as f:
            data = f.read()
        meta: dict[str, object] = {
            "kind": "trace",  # the server takes snapshots where it takes traces
            "ext": "memory-snapshot.pickle.gz",
            "labels": self.identities.labels(pid),
        }
        if server_request:
            meta["request_id"] = server_request
        self.upload(data, meta)

    def _collect(self, pid: int, dir_fd: int, name: str, out_dir: str, rid: str) -> str:
        host = self.identities.labels(pid).get("host", "host")
        dest = os.path.join(out_dir, f"{host}-{pid}-{rid}.memory-snapshot.pickle.gz")
        tmp = dest + ".tmp"
        with procroot.open_read(dir_fd, name) as src, gzip.open(tmp, "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        os.replace(tmp, dest)
        os.chmod(dest, 0o644)
        return dest
