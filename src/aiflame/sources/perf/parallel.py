"""Collapse a large ``perf script`` file with several processes, with the same result as one.

The file is cut into byte ranges that each start just after a blank line. After a blank line
stackcollapse-perf.pl's state is always empty (no open sample, no frames), so each range can
be collapsed on its own and the counts added up. The one piece of state that crosses ranges
is the event filter (by default the first event type of the file): it is found first, from
the beginning of the file, and given to every worker.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from typing import BinaryIO, cast

from aiflame.sources.perf.collapse import CHUNK_BYTES, Collapser, collapse_stream, iter_chunks
from aiflame.sources.perf.rules import EVENT, PERIOD, PerfOptions

# Below this size one process is faster than starting several.
PARALLEL_MIN_BYTES = 32 << 20
MAX_JOBS = 8
LOADAVG = "/proc/loadavg"


def default_jobs() -> int:
    """One process per idle CPU, up to 8: on a busy machine more processes only add their
    start-up and merging to the same total CPU time."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    busy = _runnable_others()
    if busy is None:
        try:
            busy = os.getloadavg()[0]
        except OSError:
            busy = 0.0
    return max(1, min(int(cpus - busy + 0.5), MAX_JOBS))


def _runnable_others(readings: int = 5, pause_s: float = 0.01) -> float | None:
    """Tasks runnable besides this one (Linux: /proc/loadavg's "running/total"), the least
    of a few readings, since one reading also catches short-lived tasks. The load average
    lags by a minute: right after another heavy command it still counts that command, on a
    machine that is idle again."""
    seen = []
    try:
        for i in range(readings):
            if i:
                time.sleep(pause_s)
            with open(LOADAVG) as f:
                seen.append(float(f.read().split()[3].split("/")[0]) - 1)
    except (OSError, IndexError, ValueError):
        return None
    return max(0.0, min(seen))


class _Range:
    """A read-only view of bytes [start, end) of a file, as a stream."""

    def __init__(self, f: BinaryIO, start: int, end: int) -> None:
        f.seek(start)
        self._f = f
        self._left = end - start

    def read(self, n: int = -1) -> bytes:
        if self._left <= 0:
            return b""
        n = self._left if n < 0 else min(n, self._left)
        data = self._f.read(n)
        self._left -= len(data)
        return data


def first_event(f: BinaryIO, end: int) -> str | None:
    """The event type Perl would filter on (the first line matching both event patterns)
    within the first ``end`` bytes, or None if there is none there."""
    for text in iter_chunks(cast(BinaryIO, _Range(f, 0, end))):
        for line in text.split("\n"):
            if line and line[0] != "#" and EVENT.match(line):
                m = PERIOD.search(line)
                if m:
                    return m.group(2)
    return None


def range_starts(f: BinaryIO, size: int, jobs: int) -> list[int]:
    """Offsets where ranges start: 0, then just after a blank line at or after each k/jobs."""
    starts = [0]
    for k in range(1, jobs):
        pos = max(size * k // jobs, starts[-1])
        f.seek(pos)
        prev = b""
        while True:
            block = f.read(1 << 16)
            if not block:
                return starts
            cut = (prev + block).find(b"\n\n")
            if cut >= 0:
                start = pos - len(prev) + cut + 2
                if start >= size:
                    return starts
                starts.append(start)
                break
            prev = block[-1:]
            pos += len(block)
    return starts


def _collapse_range(path: str, start: int, end: int, options: PerfOptions) -> Collapser:
    with open(path, "rb") as f:
        return collapse_stream(cast(BinaryIO, _Range(f, start, end)), options)


def collapse_file(path: str, options: PerfOptions | None = None, jobs: int = 0) -> Collapser:
    """Collapse a regular file, with ``jobs`` processes (0: :func:`default_jobs`) when it
    is large enough; the result is what :func:`collapse_stream` gives."""
    options = options or PerfOptions()
    jobs = jobs or default_jobs()
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        if jobs < 2 or size < PARALLEL_MIN_BYTES or f.read(2) == b"\x1f\x8b":
            f.seek(0)
            return collapse_stream(f, options)
        starts = range_starts(f, size, jobs)
        if not options.event_filter and len(starts) > 1:
            event = first_event(f, starts[1])
            if event is None:  # the first range cannot tell the others: stay serial
                starts = [0]
            else:
                options = replace(options, event_filter=event)
        if len(starts) < 2:
            f.seek(0)
            return collapse_stream(f, options)
    ends = [*starts[1:], size]
    method = "fork" if sys.platform.startswith("linux") else "spawn"
    ctx = multiprocessing.get_context(method)
    with ProcessPoolExecutor(max_workers=len(starts), mp_context=ctx) as pool:
        parts = list(
            pool.map(
                _collapse_range,
                [path] * len(starts),
                starts,
                ends,
                [options] * len(starts),
                chunksize=1,
            )
        )
    total = parts[0]
    for part in parts[1:]:
        total.merge(part)
    return total


__all__ = ["CHUNK_BYTES", "PARALLEL_MIN_BYTES", "collapse_file", "default_jobs", "range_starts"]
