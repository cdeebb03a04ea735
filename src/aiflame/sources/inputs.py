"""Opening inputs: files or ``-`` (stdin), gzip detected by content, text encodings by BOM."""

from __future__ import annotations

import codecs
import gzip
import io
import os
import stat
import sys
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import BinaryIO, TextIO

from aiflame.errors import InputError
from aiflame.sources import limits

GZIP_MAGIC = b"\x1f\x8b"
SNIFF_BYTES = 64 * 1024


@dataclass
class Input:
    """A named input. Stdin (and any pipe) is read once and kept, so it can be sniffed and
    then parsed."""

    path: str
    _stdin_data: bytes | None = None

    @property
    def is_stdin(self) -> bool:
        return self.path == "-"

    def _raw(self) -> BinaryIO:
        if self._stdin_data is not None:
            return io.BytesIO(self._stdin_data)
        if self.is_stdin:
            self._stdin_data = sys.stdin.buffer.read()
            return io.BytesIO(self._stdin_data)
        try:
            f = open(self.path, "rb")  # noqa: SIM115 - returned to the caller
            if stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return f
            # A pipe such as <(zcat x.gz) can be read only once: keep it, like stdin.
            with f:
                self._stdin_data = f.read()
            return io.BytesIO(self._stdin_data)
        except FileNotFoundError:
            raise InputError(self.path, "no such file") from None
        except IsADirectoryError:
            raise InputError(self.path, "is a directory, not a profile") from None
        except PermissionError:
            raise InputError(self.path, "permission denied") from None
        except OSError as e:
            raise InputError(self.path, f"cannot open: {e.strerror or e}") from None

    @contextmanager
    def open_binary(self, max_line: int | None = None, whole: bool = False) -> Iterator[BinaryIO]:
        """The decompressed bytes of the input, as a stream.

        ``max_line``: fail (one clear line) on a line longer than this many bytes, for
        readers that hold a line whole. ``whole``: the reader reads it all into memory,
        so gzip data may inflate only so much (:func:`limits.max_decompressed`).
        """
        raw = self._raw()
        try:
            head = raw.read(2)
            raw.seek(0)
            if head != GZIP_MAGIC and not max_line:
                yield raw
                return
            limit = None
            inner: BinaryIO = raw
            if head == GZIP_MAGIC:
                inner = gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[assignment]
                if whole:
                    limit = (_size(raw), limits.max_decompressed(_size(raw)))
            guarded = _GuardedStream(inner, self.path, max_line, limit)
            try:
                yield io.BufferedReader(guarded, buffer_size=1 << 20)
            finally:
                if inner is not raw:
                    inner.close()
        finally:
            raw.close()

    def read_bytes(self) -> bytes:
        with self.open_binary(whole=True) as f:
            return f.read()

    def head(self, n: int = SNIFF_BYTES) -> bytes:
        """The first ``n`` decompressed bytes (for format detection)."""
        with self.open_binary() as f:
            return f.read(n)

    @contextmanager
    def open_text(self, max_line: int | None = None, whole: bool = False) -> Iterator[TextIO]:
        """Decoded text: UTF-8 by default, UTF-16/UTF-8 with BOM honoured, bad bytes replaced."""
        with self.open_binary(max_line, whole) as f:
            encoding = detect_encoding(self.head(4))
            text = io.TextIOWrapper(f, encoding=encoding, errors="replace", newline=None)  # type: ignore[arg-type]
            try:
                yield text
            finally:
                text.detach()

    def read_text(self) -> str:
        with self.open_text(whole=True) as f:
            return f.read()


def _size(f: BinaryIO) -> int:
    try:
        return os.fstat(f.fileno()).st_size
    except (OSError, ValueError, io.UnsupportedOperation):  # stdin kept in memory
        return len(f.getbuffer()) if isinstance(f, io.BytesIO) else 0


def detect_encoding(head: bytes) -> str:
    if head.startswith(codecs.BOM_UTF8):
        return "utf-8-sig"
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "utf-16"
    return "utf-8"


def decode_head(head: bytes) -> str:
    """Best-effort text of a sniffed head, whatever its encoding."""
    return head.decode(detect_encoding(head), errors="replace")


def corrupt_gzip(e: Exception) -> str:
    """What zlib or gzip found wrong, in words of its own: zlib says "Error -3 while
    decompressing data: invalid distance too far back", the reason is the last part."""
    reason = str(e).rpartition("decompressing data: ")[2] or str(e)
    return f"corrupt gzip data ({reason})"


class _GuardedStream(io.RawIOBase):
    """Turns gzip's exceptions on truncated / corrupt data into :class:`InputError`, and
    enforces the limits of :mod:`limits`: the length of a line (bytes since the last
    newline; UTF-16 newlines hold a 0x0A byte too) and the decompressed size."""

    def __init__(
        self,
        inner: BinaryIO,
        path: str,
        max_line: int | None,
        max_size: tuple[int, int] | None,  # (compressed size, most decompressed bytes)
    ) -> None:
        self._inner = inner
        self._path = path
        self._max_line = max_line
        self._max_size = max_size
        self._line = 0  # bytes since the last newline
        self._size = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def readinto(self, b) -> int:  # type: ignore[no-untyped-def]
        try:
            n = self._inner.readinto(b)  # type: ignore[attr-defined]
        except EOFError:
            raise InputError(self._path, "truncated gzip data") from None
        except (gzip.BadGzipFile, zlib.error, OSError) as e:
            raise InputError(self._path, corrupt_gzip(e)) from None
        if not n:
            return 0
        self._size += n
        if self._max_size is not None and self._size > self._max_size[1]:
            raise InputError(self._path, limits.inflated_too_much(*self._max_size))
        if self._max_line:
            last = bytes(memoryview(b)[:n]).rfind(b"\n")
            self._line = self._line + n if last < 0 else n - last - 1
            if self._line > self._max_line:
                raise InputError(self._path, limits.line_too_long(self._max_line))
        return n
