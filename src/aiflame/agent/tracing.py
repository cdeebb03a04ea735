"""On-demand traces: choose the processes, hand them libkineto's config, collect the files.

A request names processes (PIDs, a job, or all): every process that polls the agent's
libkineto endpoint and matches is traced (all ranks of a job on this host: there is no
limit of 3 as in Dynolog); a PID that does not poll (a launcher such as ``torchrun``, a
program without ``KINETO_USE_DAEMON=1``) is skipped with the reason, and its descendants
that poll are traced in its place. The config asks libkineto to write the trace to
``/tmp/aiflame-trace-<request>.json`` in the process's own file system (the one
directory every version of libkineto accepts for an on-demand trace; libkineto adds the
process id before ``.json``), which the agent reads through ``/proc/PID/root`` (so a
process in a container needs nothing mounted), compresses into the output directory and
removes. libkineto writes the file under a temporary name and renames it when complete,
so a file that exists is complete.

Bounds: a trace lasts at most ``max_duration_ms`` (or 1,000 iterations), waits at most
``timeout`` seconds to be written, at most 4 requests run at once, and a process has at
most one trace at a time (a second request for it is refused: :class:`TraceBusy`).
"""

from __future__ import annotations

import gzip
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from aiflame.agent import procroot
from aiflame.agent.identity import Identities
from aiflame.agent.kineto_ipc import KinetoFabric, on_demand_config
from aiflame.collectors import procs
from aiflame.errors import AiflameError

MAX_ITERATIONS = 1000
MAX_PIDS = 256
MAX_CONCURRENT = 4
POLL_S = 0.1
# libkineto polls every 5 s by default: a config is handed out within that, give it 3
HANDOUT_S = 16.0
NOT_POLLING = (
    "does not poll the agent: not a PyTorch process started with KINETO_USE_DAEMON=1 "
    "(or its profiler has not started yet)"
)


class TraceError(AiflameError):
    """A request that cannot be served as asked (400)."""


class TraceBusy(AiflameError):
    """A trace of one of these processes is running (409), or too many requests (429)."""

    def __init__(self, message: str, status: int = 409) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class TraceRequest:
    pids: list[int] = field(default_factory=list)
    job_id: str = ""
    all: bool = False
    duration_ms: int | None = None
    iterations: int | None = None
    start_time: float | None = None  # Unix seconds
    output_dir: str = ""
    upload: bool = False
    request_id: str = ""

    @classmethod
    def from_json(cls, body: dict[str, object], max_duration_ms: int) -> TraceRequest:
        def ints(name: str) -> list[int]:
            value = body.get(name) or []
            if not isinstance(value, list) or not all(
                isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value
            ):
                raise TraceError(f"{name}: expected a list of positive integers")
            return list(value)

        def opt_int(name: str, hi: int) -> int | None:
            value = body.get(name)
            if value is None:
                return None
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= hi:
                raise TraceError(f"{name}: expected an integer from 1 to {hi}")
            return value

        req = cls(
            pids=ints("pids"),
            job_id=str(body.get("job_id") or ""),
            all=bool(body.get("all")),
            duration_ms=opt_int("duration_ms", max_duration_ms),
            iterations=opt_int("iterations", MAX_ITERATIONS),
            output_dir=str(body.get("output_dir") or ""),
            upload=bool(body.get("upload")),
            request_id=str(body.get("request_id") or ""),
        )
        start = body.get("start_time")
        if start is not None:
            if isinstance(start, bool) or not isinstance(start, (int, float)) or start <= 0:
                raise TraceError("start_time: expected Unix seconds")
            req.start_time = float(start)
        if sum(bool(x) for x in (req.pids, req.job_id, req.all)) != 1:
            raise TraceError("name the processes: pids, job_id or all (one of them)")
        if len(req.pids) > MAX_PIDS:
            raise TraceError(f"at most {MAX_PIDS} PIDs per request")
        if req.duration_ms and req.iterations:
            raise TraceError("duration_ms or iterations, not both")
        if req.output_dir and not os.path.isabs(req.output_dir):
            raise TraceError("output_dir must be an absolute path")
        return req


@dataclass
class Target:
    pid: int
    ns_pid: int
    offered: float = 0.0  # monotonic: when the config was offered
    handed_out: float = 0.0  # when the process polled and took it
    written: float = 0.0  # when its trace file was seen complete
    path: str = ""
    error: str = ""


Upload = Callable[[bytes, dict[str, object]], None]  # (compressed trace, meta) -> spooled


def request_id(given: str) -> str:
    """The id of a request as files are named after it: the caller's (a server's request
    id), kept to letters, digits, ``-`` and ``_``, or a new one."""
    return "".join(c for c in given if c.isalnum() or c in "-_")[:64] or uuid.uuid4().hex[:12]


class TraceManager:
    def __init__(
        self,
        fabric: KinetoFabric,
        identities: Identities,
        output_dir: str,
        max_duration_ms: int = 60_000,
        timeout_s: float = 180.0,
        upload: Upload | None = None,
    ) -> None:
        self.fabric = fabric
        self.identities = identities
        self.output_dir = output_dir
        self.max_duration_ms = max_duration_ms
        self.timeout_s = timeout_s
        self.upload = upload
        self._busy: set[int] = set()
        self._running = 0
        self._lock = threading.Lock()
        self.completed = 0

    # -- choosing ---------------------------------------------------------------------------
    def select(self, req: TraceRequest) -> tuple[list[int], list[dict[str, object]]]:
        polling = self.fabric.processes()
        skipped: list[dict[str, object]] = []
        if req.all:
            return sorted(polling), skipped
        if req.job_id:
            chosen = [
                pid for pid, p in polling.items()
                if str(p.job_id) == req.job_id
                or self.identities.labels(pid).get("job_id") == req.job_id
            ]  # fmt: skip
            if not chosen:
                raise TraceError(f"no process of job {req.job_id} polls the agent on this host")
            return sorted(chosen), skipped
        chosen = []
        for pid in req.pids:
            if pid in polling:
                chosen.append(pid)
                continue
            if not procs.alive(pid):
                skipped.append({"pid": pid, "why": "no such process"})
                continue
            below = [p for p in procs.tree(pid) if p in polling and p != pid]
            why = (
                NOT_POLLING
                if not below
                else f"a launcher: its {len(below)} processes that poll are traced"
            )
            skipped.append({"pid": pid, "why": why})
            chosen.extend(below)
        return sorted(set(chosen)), skipped

    # -- running ----------------------------------------------------------------------------
    def run(self, req: TraceRequest) -> dict[str, object]:
        pids, skipped = self.select(req)
        if not pids:
            return {"traces": [], "skipped": skipped}
        with self._lock:
            busy = sorted(set(pids) & self._busy)
            if busy:
                listed = ", ".join(map(str, busy))
                raise TraceBusy(f"a trace of PID {listed} is already running")
            if self._running >= MAX_CONCURRENT:
                raise TraceBusy(f"{MAX_CONCURRENT} trace requests are running: try again", 429)
            self._busy.update(pids)
            self._running += 1
        try:
            return self._run(req, pids, skipped)
        finally:
            with self._lock:
                self._busy.difference_update(pids)
                self._running -= 1

    def _run(
        self, req: TraceRequest, pids: list[int], skipped: list[dict[str, object]]
    ) -> dict[str, object]:
        rid = request_id(req.request_id)
        log_file = f"/tmp/aiflame-trace-{rid}.json"
        polling = self.fabric.processes()
        targets = []
        for pid in pids:
            proc = polling.get(pid)
            if proc is None:
                skipped.append({"pid": pid, "why": NOT_POLLING})
                continue
            config = on_demand_config(
                log_file,
                duration_ms=None if req.iterations else (req.duration_ms or 2000),
                iterations=req.iterations,
                start_time_s=req.start_time,
                trace_id=rid,
            )
            if not self.fabric.offer(pid, config):
                skipped.append({"pid": pid, "why": "a config is already waiting for it"})
                continue
            targets.append(Target(pid, proc.ns_pid, offered=time.monotonic()))
        out_dir = req.output_dir or self.output_dir
        os.makedirs(out_dir, mode=0o755, exist_ok=True)
        self._wait(
            targets, req, log_file, lambda t, found: self._collect(t, found, out_dir, rid, req)
        )
        traces, failed = [], []
        for t in targets:
            if t.path:
                traces.append(
                    {
                        "pid": t.pid,
                        "path": t.path,
                        # where the time went: libkineto's poll, then tracing and writing
                        "poll_wait_s": round(t.handed_out - t.offered, 3),
                        "written_after_s": round(t.written - t.offered, 3),
                    }
                )
            else:
                self.fabric.withdraw(t.pid)
                failed.append({"pid": t.pid, "why": t.error})
        self.completed += len(traces)
        return {"request_id": rid, "traces": traces, "skipped": skipped, "failed": failed}

    def _wait(
        self,
        targets: list[Target],
        req: TraceRequest,
        log_file: str,
        collect: Callable[[Target, str], str],
    ) -> None:
        """Until every target's trace is collected (at once: a process may exit right
        after writing it, taking its /proc/PID/root along) or it failed."""
        start = time.monotonic()
        delay = max(0.0, (req.start_time or 0) - time.time())
        todo = list(targets)
        while todo:
            now = time.monotonic()
            for t in list(todo):
                if not t.handed_out:
                    t.handed_out = self.fabric.handed_out(t.pid)
                    if not t.handed_out and now - start > HANDOUT_S:
                        t.error = "did not poll for its config (it may have exited)"
                        todo.remove(t)
                    continue
                found = _written(t.pid, t.ns_pid, log_file)
                if found:
                    t.written = time.monotonic()
                    try:
                        t.path = collect(t, found)
                    except OSError as e:
                        t.error = f"trace unreadable: {e.strerror or e}"
                    todo.remove(t)
                elif not procs.alive(t.pid):
                    t.error = "exited before its trace was written"
                    todo.remove(t)
                elif now - t.handed_out > delay + (req.duration_ms or 0) / 1000 + self.timeout_s:
                    t.error = f"no trace written within {self.timeout_s:.0f} s"
                    todo.remove(t)
            if todo:
                time.sleep(POLL_S)

    def _collect(self, t: Target, found: str, out_dir: str, rid: str, req: TraceRequest) -> str:
        labels = self.identities.labels(t.pid)
        host = labels.get("host", "host")
        dest = os.path.join(out_dir, f"{host}-{t.pid}-{rid}.pt.trace.json.gz")
        tmp = dest + ".tmp"
        with procroot.tmp_dir(t.pid) as d:
            with procroot.open_read(d, found) as src, gzip.open(tmp, "wb", compresslevel=6) as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            procroot.remove(d, found)
        os.replace(tmp, dest)
        os.chmod(dest, 0o644)
        if req.upload and self.upload is not None:
            with open(dest, "rb") as f:
                data = f.read()
            meta: dict[str, object] = {"kind": "trace", "labels": labels, "request_id": rid}
            self.upload(data, meta)
        return dest


def _written(pid: int, ns_pid: int, log_file: str) -> str:
    """The name, in the process's /tmp, of the trace file libkineto wrote for this request
    ('' if none yet; a link is no trace: :mod:`.procroot`)."""
    stem = os.path.basename(log_file)[: -len(".json")]
    try:
        with procroot.tmp_dir(pid) as d:
            for name in (f"{stem}_{ns_pid}.json", f"{stem}.json"):
                if procroot.exists(d, name):
                    return name
    except OSError:
        return ""
    return ""
