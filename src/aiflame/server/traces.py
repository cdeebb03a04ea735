"""Uploaded traces: checked and stored at once, analyzed in the background.

Analysis runs in worker processes (``aiflame analyze``'s engine through
:mod:`analysis_adapter`): a large trace takes seconds of CPU that must not stall ingest, and
a trace that exhausts memory takes down a worker, not the server. Results (the report,
its topline numbers and every finding) are written through the writer; a trace still
queued when the server stops is analyzed again at the next start.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import logging
import multiprocessing
import os
import signal
import tempfile
import time
import zlib
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import pyarrow as pa

from aiflame.server import analysis_adapter
from aiflame.server.bodies import GZIP_MAGIC
from aiflame.server.errors import BadRequest, PayloadTooLarge
from aiflame.server.store.writer import Work, Writer

log = logging.getLogger("aiflame.server")
ACCEPTED = (*analysis_adapter.ANALYZABLE, "torch-memory")
_MS = pa.timestamp("ms", tz="UTC")
_MAP = pa.map_(pa.string(), pa.string())
_WORKER_MEMORY = 16 << 30  # address space of one analysis worker


def check_upload(blob: bytes, inflated_limit: int, tmpdir: str) -> str:
    """The trace's format; 400 for what is no trace, 413 for a gzip that inflates too far."""
    if not blob:
        raise BadRequest("an empty trace")
    if blob[:2] == GZIP_MAGIC:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        size, rest = 0, blob
        try:
            while rest:
                chunk = d.decompress(rest, 1 << 22)
                size += len(chunk)
                if size > inflated_limit:
                    raise PayloadTooLarge(
                        f"the trace inflates to more than {inflated_limit:,} bytes"
                    )
                rest = d.unconsumed_tail
                if d.eof:
                    break
        except zlib.error as e:
            raise BadRequest(f"the trace is not valid gzip data ({e})") from None
        if not d.eof:
            raise BadRequest("the trace is truncated gzip data")
    path = write_temp(blob, tmpdir)
    try:
        fmt = analysis_adapter.trace_format(path)
    except Exception as e:
        raise BadRequest(f"not a trace aiflame reads: {str(e).split(': ', 1)[-1]}") from None
    finally:
        os.unlink(path)
    if fmt not in ACCEPTED:
        raise BadRequest(
            f"a {fmt} file is not a trace (expected a Kineto trace, an Nsight Systems SQLite "
            "export, a Chrome trace or a PyTorch memory snapshot)"
        )
    return fmt


def write_temp(blob: bytes, tmpdir: str) -> str:
    fd, path = tempfile.mkstemp(prefix="trace-", dir=tmpdir)
    with os.fdopen(fd, "wb") as f:
        f.write(blob)
    return path


_WORKER_NICE = 10  # analysis can wait; ingest and queries cannot


_PR_SET_PDEATHSIG = 1


def _die_with(parent: int) -> None:
    """Have the kernel kill this worker when the server dies, even by SIGKILL (a worker left
    behind would hold memory and the resource tracker for as long as it lives)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the pipe to the server is all there is
        pass
    if os.getppid() != parent:  # the server died before the line above
        os._exit(1)


def _worker_setup(parent: int) -> None:
    """A worker's setup: dies with the server, bounded memory, and below the server's
    requests in CPU priority (a process of its own: its nice value slows nothing the
    server's threads wait on)."""
    _die_with(parent)
    with contextlib.suppress(OSError):
        os.nice(_WORKER_NICE)
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (_WORKER_MEMORY, _WORKER_MEMORY))
    except (ImportError, ValueError, OSError):
        pass


def _analyze_job(path: str, name: str = "") -> dict[str, Any]:
    """In a worker process: the format and report of a trace file, or the error."""
    try:
        fmt = analysis_adapter.trace_format(path)
        if fmt not in analysis_adapter.ANALYZABLE:
            return {"format": fmt, "report": None}
        return {"format": fmt, "report": analysis_adapter.analyze_file(path, name)}
    except MemoryError:
        return {"error": "the analysis ran out of memory"}
    except Exception as e:
        return {
            "error": str(e).strip().splitlines()[0][:500] if str(e).strip() else type(e).__name__
        }
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _flame_job(path: str, title: str) -> str:
    try:
        return analysis_adapter.flame_page(path, title)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _report_job(path: str, name: str, flame_href: str) -> str:
    try:
        if analysis_adapter.trace_format(path) not in analysis_adapter.ANALYZABLE:
            raise ValueError("a memory snapshot has no analysis report: open its flame graph")
        return analysis_adapter.report_pages(path, name, flame_href)[0]
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


class TraceAnalyzer:
    def __init__(self, writer: Writer, tmpdir: str, workers: int = 1) -> None:
        self.writer = writer
        self.tmpdir = tmpdir
        Path(tmpdir).mkdir(parents=True, exist_ok=True)
        self.workers = max(1, workers)
        self.pool = self._new_pool()
        self.pending: dict[tuple[str, str], concurrent.futures.Future] = {}

    def _new_pool(self) -> concurrent.futures.ProcessPoolExecutor:
        ctx = multiprocessing.get_context("spawn")  # never fork a process hosting chDB
        return concurrent.futures.ProcessPoolExecutor(
            max_workers=self.workers,
            mp_context=ctx,
            initializer=_worker_setup,
            initargs=(os.getpid(),),
        )

    def _submit(self, fn: Any, *args: Any) -> concurrent.futures.Future:
        try:
            return self.pool.submit(fn, *args)
        except BrokenProcessPool:  # a worker died (memory, a signal): new workers
            log.warning("traces: an analysis worker died; starting new ones")
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool = self._new_pool()
            return self.pool.submit(fn, *args)

    def enqueue(self, tenant: str, trace_id: str, row: dict[str, Any], blob: bytes) -> None:
        path = write_temp(blob, self.tmpdir)
        fut = self._submit(_analyze_job, path, f"trace {trace_id}")
        self.pending[(tenant, trace_id)] = fut
        fut.add_done_callback(lambda f: self._done(tenant, trace_id, row, f))

    def flame(self, blob: bytes, title: str) -> concurrent.futures.Future:
        return self._submit(_flame_job, write_temp(blob, self.tmpdir), title)

    def report(self, blob: bytes, name: str, flame_href: str) -> concurrent.futures.Future:
        """The HTML report of ``aiflame analyze -o`` for the trace."""
        return self.pool.submit(_report_job, write_temp(blob, self.tmpdir), name, flame_href)

    def _done(
        self, tenant: str, trace_id: str, row: dict[str, Any], fut: concurrent.futures.Future
    ) -> None:
        self.pending.pop((tenant, trace_id), None)
        try:
            result = fut.result()
        except Exception as e:  # the worker died (memory, signal)
            result = {"error": f"the analysis worker failed: {type(e).__name__}"}
        try:
            self.writer.submit([analysis_work(tenant, trace_id, row, result)])
        except Exception as e:
            log.error("traces: cannot store the analysis of %s: %s", trace_id, e)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def analysis_work(tenant: str, trace_id: str, row: dict[str, Any], result: dict[str, Any]) -> Work:
    """The trace's row again, now with its status and numbers, and its findings."""
    version = time.time_ns()
    report = result.get("report")
    updated = dict(row)
    updated.update(status="failed" if "error" in result else "done", version=version)
    updated["error"] = result.get("error", "")
    if result.get("format"):
        updated["format"] = result["format"]
    tables: dict[str, dict] = {}
    if report:
        s = analysis_adapter.summary(report)
        updated.update(
            ranks=s["ranks"],
            gpu_time_us=s["gpu_time_us"],
            duration_us=s["duration_us"],
            busy_share=s["busy_share"],
            achieved_tflops=s["achieved_tflops"],
            mfu=s["mfu"],
            pct_of_roofline=s["pct_of_roofline"],
            device=s["device"],
            report=json.dumps(report, separators=(",", ":")),
        )
        found = analysis_adapter.findings(report)
        if found:
            n = len(found)
            tables["findings"] = {
                "tenant": [tenant] * n,
                "trace_id": [trace_id] * n,
                "received": pa.array([row["received"]] * n, _MS),
                "labels": pa.array([list(row["labels"].items())] * n, _MAP),
                "rank": [f["rank"] for f in found],
                "rule": [f["rule"] for f in found],
                "severity": [f["severity"] for f in found],
                "title": [f["title"] for f in found],
                "cost_us": [float(f["cost_us"]) for f in found],
                "share": [float(f.get("share_of_gpu_time") or 0.0) for f in found],
                "timeline_us": [float(f["timeline_us"]) for f in found],
                "fix": [f.get("fix", "") for f in found],
                "evidence": [
                    json.dumps(analysis_adapter.evidence(f), separators=(",", ":")) for f in found
                ],
                "version": pa.array([version] * n, pa.uint64()),
            }
    tables["traces"] = trace_columns([updated])
    # Journalled tables carry a batch id; the analysis rows are plain replacing versions.
    return Work(tables=tables, rows=1 + len(tables.get("findings", {}).get("rule", [])))


TRACE_DEFAULTS: dict[str, Any] = {
    "request_id": "",
    "format": "",
    "bytes": 0,
    "status": "queued",
    "error": "",
    "version": 0,
    "trace_start": None,
    "duration_us": 0.0,
    "ranks": 0,
    "gpu_time_us": 0.0,
    "busy_share": None,
    "achieved_tflops": None,
    "mfu": None,
    "pct_of_roofline": None,
    "device": "",
    "report": "",
}


def trace_columns(rows: list[dict[str, Any]]) -> dict[str, Any]:
    full = [{**TRACE_DEFAULTS, **r} for r in rows]
    col = lambda k: [r[k] for r in full]  # noqa: E731
    return {
        "tenant": col("tenant"),
        "trace_id": col("trace_id"),
        "received": pa.array(col("received"), _MS),
        "labels": pa.array([list(r["labels"].items()) for r in full], _MAP),
        "request_id": col("request_id"),
        "format": col("format"),
        "bytes": pa.array(col("bytes"), pa.uint64()),
        "status": col("status"),
        "error": col("error"),
        "version": pa.array(col("version"), pa.uint64()),
        "trace_start": pa.array(col("trace_start"), _MS),
        "duration_us": pa.array(col("duration_us"), pa.float64()),
        "ranks": pa.array(col("ranks"), pa.uint16()),
        "gpu_time_us": pa.array(col("gpu_time_us"), pa.float64()),
        "busy_share": pa.array(col("busy_share"), pa.float64()),
        "achieved_tflops": pa.array(col("achieved_tflops"), pa.float64()),
        "mfu": pa.array(col("mfu"), pa.float64()),
        "pct_of_roofline": pa.array(col("pct_of_roofline"), pa.float64()),
        "device": col("device"),
        "report": col("report"),
    }
