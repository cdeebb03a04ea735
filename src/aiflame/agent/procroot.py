"""Files in another process's ``/tmp``, reached through ``/proc/PID/root`` without trusting
what that process put there.

``/proc/PID/root`` enters the process's own root, but a symbolic link met after it is
resolved from the agent's root: a program in a container could point its
``/tmp/aiflame-trace-....json`` (or ``/tmp`` itself) at ``/etc/shadow`` of the host, which
the agent, as root, would then copy into a trace and upload, or overwrite. So the
directory is opened with ``O_NOFOLLOW`` (``/tmp`` must be a real directory), every file in
it relative to that descriptor with ``O_NOFOLLOW``, and only a regular file is read (a
FIFO would block the reader; ``O_NONBLOCK`` until it is known not to be one).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator

DIRECTORY = "/tmp"


@contextlib.contextmanager
def tmp_dir(pid: int, proc: str = "/proc") -> Iterator[int]:
    """A descriptor of the process's ``/tmp`` (OSError if it is not a directory)."""
    fd = os.open(f"{proc}/{pid}/root{DIRECTORY}", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        yield fd
    finally:
        os.close(fd)


def exists(dir_fd: int, name: str) -> bool:
    """Whether ``name`` is a regular file there (a link is not followed, so not one)."""
    try:
        return stat.S_ISREG(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def open_read(dir_fd: int, name: str):
    """``name`` opened for reading (binary), only if it is a regular file, not a link."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{name}: not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def write_new(dir_fd: int, name: str, data: bytes) -> None:
    """``name`` written with ``data``; what was there (a file, never a link's target) is
    replaced."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=dir_fd)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(name, flags, 0o644, dir_fd=dir_fd)  # the program may run as any user
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def remove(dir_fd: int, *names: str) -> None:
    for name in names:
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=dir_fd)
