"""Processes the CUDA/HIP probes stopped until they are set up, and their release.

``bpf/cuda.bpf.c`` stops a recorded process (SIGSTOP) the moment its dynamic loader reports
a CUDA/HIP library it is not set up for (or at its exec, when its loader is not watched
yet), so that the calls it makes right after ``dlopen()`` are seen: user space attaches the
library's probes, describes the process (its Python, its libraries' code ranges) and
continues it (SIGCONT), milliseconds later.

A process must never stay stopped because this one died meanwhile (killed, or crashed
before it read the announcement): a watchdog process, in a session of its own, holds the
BPF object's ``pending`` map (the processes announced and not yet handled), and once its
pipe from this process closes, which the kernel does however this process ends, it
continues every process still listed there.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from typing import IO

STOP_WAIT_S = 1.0  # for the stop to take effect before going on anyway
# argv: the pending map's descriptor (inherited), the libbpf to read it with
_WATCHDOG = """
import ctypes, os, signal, sys
fd, libbpf = int(sys.argv[1]), sys.argv[2]
sys.stdin.read()
lib = ctypes.CDLL(libbpf)
key, nxt = ctypes.c_uint32(), ctypes.c_uint32()
first, pids = True, []
while lib.bpf_map_get_next_key(fd, None if first else ctypes.byref(key), ctypes.byref(nxt)) == 0:
    pids.append(nxt.value)
    key.value, first = nxt.value, False
for pid in pids:
    try:
        os.kill(pid, signal.SIGCONT)
    except OSError:
        pass
"""


class Holds:
    """The processes stopped now, their count and the longest stop (seconds)."""

    def __init__(self) -> None:
        self.held: dict[int, float] = {}  # pid -> when it was announced
        self.count = 0
        self.longest_s = 0.0
        self._watchdog: subprocess.Popen | None = None
        self._pipe: IO[str] | None = None

    def start_watchdog(self, pending_fd: int, libbpf: str) -> int:
        """Start the watchdog over the ``pending`` map (``pending_fd``), read with the
        ``libbpf`` library file this process uses; its pid."""
        if self._watchdog is not None:
            return self._watchdog.pid
        self._watchdog = subprocess.Popen(
            [sys.executable, "-S", "-c", _WATCHDOG, str(pending_fd), libbpf],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(pending_fd,),
            text=True,
            start_new_session=True,  # a terminal's Ctrl-C is not for it
        )
        self._pipe = self._watchdog.stdin
        return self._watchdog.pid

    def stopped(self, pid: int, tid: int) -> bool:
        """Note a stopped process and wait until its thread has really stopped (back from
        the probe's trap or the exec); False if it is gone."""
        self.held[pid] = time.monotonic()
        self.count += 1
        deadline = time.monotonic() + STOP_WAIT_S
        while time.monotonic() < deadline:
            state = _state(pid, tid)
            if state is None:
                return False
            if state in "Tt":
                return True
            time.sleep(0.0005)
        return True  # traced by another tool, say: it is set up all the same

    def release(self, pid: int) -> None:
        since = self.held.pop(pid, None)
        if since is None:
            return
        self.longest_s = max(self.longest_s, time.monotonic() - since)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)

    def close(self) -> None:
        """Continue every process still stopped, then end the watchdog."""
        for pid in list(self.held):
            self.release(pid)
        if self._pipe is not None:
            with contextlib.suppress(OSError, ValueError):
                self._pipe.close()
            self._pipe = None
        if self._watchdog is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._watchdog.wait(timeout=5)
            self._watchdog = None


def _state(pid: int, tid: int) -> str | None:
    """The scheduler state letter of a thread (``T``: stopped), None if it is gone."""
    try:
        with open(f"/proc/{pid}/task/{tid}/stat", "rb") as f:
            text = f.read()
    except OSError:
        return None
    after = text.rsplit(b")", 1)[-1].split()
    return after[0].decode() if after else None
