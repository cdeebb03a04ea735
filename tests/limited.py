"""Running code under resource limits, so that a test fails instead of the machine swapping.

:func:`run_limited` runs a function in a forked child whose address space may grow by at
most ``memory`` bytes over what it started with (``RLIMIT_AS``) and which is killed after
``timeout`` seconds; :func:`limit_command` is the ``preexec_fn`` that does the same for a
command run with :mod:`subprocess`.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import resource
import select
import signal
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

GIB = 1 << 30


@dataclass
class Outcome:
    """How a limited run ended: ``status`` is one of ok (``value`` is what the function
    returned), raised (``value`` is (exception type name, message, traceback text)),
    memory (MemoryError), timeout, or crashed (``value`` is the signal or exit status)."""

    status: str
    value: Any = None
    seconds: float = 0.0


def _address_space() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def run_limited(
    fn: Callable[..., Any], *args: Any, memory: int = 2 * GIB, timeout: float = 60.0
) -> Outcome:
    """``fn(*args)`` in a child process limited to ``memory`` more bytes of address space
    and ``timeout`` seconds. What it returns must pickle."""
    read_end, write_end = os.pipe()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the test runner
        os.close(read_end)
        status = 0
        try:
            limit = _address_space() + memory
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            try:
                result = Outcome("ok", fn(*args))
            except MemoryError:
                result = Outcome("memory")
            except BaseException as e:
                result = Outcome(
                    "raised", (type(e).__name__, str(e)[:2000], traceback.format_exc())
                )
            data = pickle.dumps(result)
            with os.fdopen(write_end, "wb") as f:
                f.write(data)
        except BaseException:
            status = 3
        os._exit(status)
    os.close(write_end)
    chunks: list[bytes] = []
    deadline = start + timeout
    with os.fdopen(read_end, "rb", buffering=0) as f:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return Outcome("timeout", seconds=timeout)
            ready, _, _ = select.select([f], [], [], min(left, 1.0))
            if ready:
                chunk = f.read(1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    seconds = time.monotonic() - start
    if not chunks:
        return Outcome("crashed", status, seconds)
    result: Outcome = pickle.loads(b"".join(chunks))
    result.seconds = seconds
    return result


def limit_command(memory: int = 2 * GIB) -> Callable[[], None]:
    """A ``preexec_fn`` limiting a new process to ``memory`` bytes of address space."""

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


__all__ = ["GIB", "Outcome", "limit_command", "run_limited"]
