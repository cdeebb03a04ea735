"""Processes seen through /proc: is a PID there, may we trace it, what are its children."""

from __future__ import annotations

import os
import subprocess
from typing import Any

from aiflame.errors import AiflameError


def read_small(path: str, limit: int = 1 << 16) -> bytes | None:
    """The first ``limit`` bytes of a small file (``/proc/PID/stat``, ``comm``, ``cgroup``):
    one read, without a buffered text file around it (a system-wide profiler reads a few
    of these for every process that starts). None when it cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def _stat_fields(pid: int) -> list[str] | None:
    data = read_small(f"/proc/{pid}/stat", 4096)
    if not data:
        return None
    text = data.decode("utf-8", "replace")
    # The command name is in parentheses and may itself contain spaces or parentheses.
    return text[text.rfind(")") + 2 :].split()


def arguments(pid: int, proc: str = "/proc") -> list[str]:
    """The process's arguments (the first 8 KiB of them); [] for a kernel thread, a zombie
    or a process between fork and exec that has none yet."""
    try:
        with open(f"{proc}/{pid}/cmdline", "rb") as f:
            args = f.read(8192).split(b"\0")
    except OSError:
        return []
    return [a.decode("utf-8", "replace") for a in args if a]


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process, every thread (None once it is gone)."""
    fields = _stat_fields(pid)
    if fields is None:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, dead but not yet reaped, is not alive)."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return "?"


def children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", encoding="utf-8") as f:
                out.extend(int(c) for c in f.read().split())
        except (OSError, ValueError):
            continue
    return out


def tree(pid: int) -> list[int]:
    """``pid`` and all its living descendants."""
    seen, todo = [], [pid]
    while todo:
        p = todo.pop()
        if p in seen or not alive(p):
            continue
        seen.append(p)
        todo.extend(children(p))
    return seen


def check_attachable(pid: int) -> None:
    """One clear error if ``pid`` cannot be recorded: absent, ours, or not permitted."""
    if pid <= 0:
        raise AiflameError(f"invalid PID {pid}")
    if pid == os.getpid():
        raise AiflameError(f"PID {pid} is aiflame itself")
    if not os.path.exists(f"/proc/{pid}"):
        raise AiflameError(f"no process with PID {pid}")
    if not alive(pid):
        raise AiflameError(f"process {pid} has exited (zombie)")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        raise AiflameError(f"no process with PID {pid}") from None
    except PermissionError:
        raise AiflameError(
            f"not permitted to trace PID {pid} ({name(pid)}): it belongs to another user; "
            "run aiflame as that user or as root"
        ) from None


def start(argv: list[str], **popen: Any) -> subprocess.Popen:
    """Start the program to record; a missing or unrunnable one is one clear error."""
    try:
        return subprocess.Popen(argv, **popen)
    except FileNotFoundError:
        raise AiflameError(f"{argv[0]}: command not found") from None
    except PermissionError:
        raise AiflameError(f"{argv[0]}: permission denied (not executable?)") from None
    except OSError as e:
        raise AiflameError(f"{argv[0]}: cannot run: {e.strerror or e}") from None
