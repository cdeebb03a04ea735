"""Writing an output file: complete or not at all, never over a device, with the user's
permissions, and every failure as one line.

* A regular file is written to a temporary file beside it and renamed over it, so that a
  failure (a full disk, an error while rendering, Ctrl-C) never leaves half a file, and an
  existing file is replaced only once the new one is whole. A symbolic link is followed:
  the file it points to is replaced, the link stays.
* A character device or a FIFO (``/dev/null``, ``/dev/stdout``, ``<(...)``, a named pipe),
  and any path under ``/dev`` or ``/proc``, is opened and written as a stream, as a shell's
  ``>`` would: renaming a file over ``/dev/null`` would replace the device itself. Block
  devices and sockets are refused.
* A new file gets the permissions of the user's umask (``0666 & ~umask``, as ``>``
  creates files); an existing file keeps its mode (a 0600 file stays 0600) and, when
  aiflame runs as root, its owner.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
from collections.abc import Iterable
from typing import BinaryIO

from aiflame.errors import AiflameError

Data = str | bytes | Iterable[bytes]

NAME_MAX = 255  # bytes in one file name on Linux file systems
# The kernel's names for open files (the shell's redirection of stdout...): written as
# streams even where they lead to a regular file, never renamed over.
_STREAM_ROOTS = ("/dev/stdout", "/dev/stderr", "/dev/fd/", "/proc/")


def write_output(path: str, data: Data) -> None:
    """Write ``data`` (text, bytes, or chunks of bytes) to ``path`` ('-' is stdout)."""
    write_outputs([(path, data)])


def write_outputs(outputs: list[tuple[str, Data]]) -> None:
    """Write several files that go together (a report and the page it links to): all of
    them or none. Regular files are each written to a temporary file first and renamed
    only once all are whole; streams (stdout, devices, FIFOs) are written after that."""
    staged: list[tuple[str, str]] = []  # (temporary file, file it replaces)
    streams: list[tuple[str, os.stat_result | None, Data]] = []
    try:
        for path, data in outputs:
            if path == "-":
                streams.append((path, None, data))
                continue
            real, existing = _resolve(path)
            if (existing is not None and not stat.S_ISREG(existing.st_mode)) or _is_special(path):
                streams.append((path, existing, data))
            else:
                staged.append((_write_temporary(path, real, existing, data), real))
        for tmp, real in staged:
            try:
                os.replace(tmp, real)
            except OSError as e:
                raise _error(real, e) from None
        staged = []
    finally:
        for tmp, _ in staged:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    for path, existing, data in streams:
        if path == "-":
            write_stdout(data)
        else:
            _write_stream(path, existing, data)


def write_stdout(data: Data) -> None:
    sys.stdout.flush()  # what was printed before comes first
    try:
        _write_chunks(sys.stdout.buffer, data)
        sys.stdout.buffer.flush()
    except BrokenPipeError:
        raise  # the reader went away (| head): not an error of ours
    except OSError as e:
        drop_stdout()
        raise AiflameError(f"cannot write to standard output: {_reason(e)}") from None


def drop_stdout() -> None:
    """Point stdout at /dev/null after a failed write (a full disk), so that the bytes still
    buffered, flushed when the interpreter exits, have nowhere to fail: the error is said
    once, and the exit status stays ours."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def _write_chunks(f: BinaryIO, data: Data) -> None:
    if isinstance(data, str):
        f.write(data.encode("utf-8", "surrogateescape"))
    elif isinstance(data, bytes | bytearray | memoryview):
        f.write(data)
    else:
        for chunk in data:
            f.write(chunk)


def _resolve(path: str) -> tuple[str, os.stat_result | None]:
    """The file to write (symbolic links followed) and its status, None if it is new."""
    try:
        existing: os.stat_result | None = os.stat(path)
    except FileNotFoundError:
        existing = None
    except OSError as e:
        raise _error(path, e) from None
    if existing is not None and stat.S_ISDIR(existing.st_mode):
        raise AiflameError(f"{path}: is a directory; give a file name with -o")
    real = os.path.realpath(path)
    if existing is None:
        directory = os.path.dirname(real) or "."
        if not os.path.isdir(directory):
            shown = os.path.dirname(path) or "."
            raise AiflameError(f"{path}: directory {shown} does not exist")
        if len(os.fsencode(os.path.basename(real))) > NAME_MAX:
            too_long = OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG))
            raise _error(path, too_long)
    return real, existing


def _is_special(path: str) -> bool:
    return os.path.abspath(path).startswith(_STREAM_ROOTS)


def _write_stream(path: str, existing: os.stat_result | None, data: Data) -> None:
    mode = existing.st_mode if existing is not None else 0
    if stat.S_ISBLK(mode) or stat.S_ISSOCK(mode):
        kind = "a block device" if stat.S_ISBLK(mode) else "a socket"
        raise AiflameError(f"{path}: is {kind}; refusing to write a profile onto it")
    try:
        with open(path, "wb") as f:
            _write_chunks(f, data)
    except OSError as e:
        raise _error(path, e) from None


def _write_temporary(path: str, real: str, existing: os.stat_result | None, data: Data) -> str:
    """``data`` in a new temporary file beside ``real``, with the permissions ``real``
    will have; returns its path (the caller renames it, or removes it)."""
    if existing is not None:
        _check_writable(path, real)
    directory, name = os.path.split(real)
    tmp = os.path.join(directory, _temporary_name(name))
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except OSError as e:
        raise _error(path, e) from None
    try:
        with os.fdopen(fd, "wb") as f:
            _write_chunks(f, data)
            f.flush()
            _keep_permissions(f.fileno(), existing)
        return tmp
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError) and not isinstance(e, BrokenPipeError):
            raise _error(path, e) from None
        raise


def _check_writable(path: str, real: str) -> None:
    """Fail as ``>`` would on a file we may not write (read-only, immutable), although
    the directory would let us rename another file over it. Opening without O_TRUNC
    changes nothing."""
    try:
        os.close(os.open(real, os.O_WRONLY | os.O_CLOEXEC | os.O_NONBLOCK))
    except OSError as e:
        raise _error(path, e) from None


def _temporary_name(name: str) -> str:
    """``.NAME.XXXXXXXX.tmp`` in the same directory (so the rename is atomic), the name
    cut so that it stays within NAME_MAX bytes."""
    stem = os.fsencode(name)[: NAME_MAX - 32]
    return f".{os.fsdecode(stem)}.{os.urandom(6).hex()}.tmp"


def _keep_permissions(fd: int, existing: os.stat_result | None) -> None:
    if existing is None:
        os.fchmod(fd, 0o666 & ~_umask())
        return
    os.fchmod(fd, stat.S_IMODE(existing.st_mode))
    if os.geteuid() == 0 and (existing.st_uid, existing.st_gid) != (0, 0):
        # A file system without owners may refuse: the content matters more.
        with contextlib.suppress(OSError):
            os.fchown(fd, existing.st_uid, existing.st_gid)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _reason(e: OSError) -> str:
    if e.errno == errno.EROFS:
        return "read-only file system"
    if e.errno == errno.EPERM:
        return "operation not permitted (an immutable or append-only file?)"
    if e.errno == errno.ENAMETOOLONG:
        return f"file name too long ({NAME_MAX} bytes at most)"
    return e.strerror.lower() if e.strerror else str(e)


def _error(path: str, e: OSError) -> AiflameError:
    return AiflameError(f"cannot write {path}: {_reason(e)}")


__all__ = ["write_output", "write_outputs", "write_stdout"]
