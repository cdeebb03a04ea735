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
    def open_binary(self) -> Iterator[BinaryIO]:
        """The decompressed bytes of the input, as a stream."""
        raw = self._raw()
        try:
            head = raw.read(2)
            raw.seek(0)
            if head == GZIP_MAGIC:
                with gzip.GzipFile(fileobj=raw, mode="rb") as gz:
                    yield io.BufferedReader(_GuardedStream(gz, self.path), buffer_size=1 << 20)
            else:
                yield raw
        finally:
            raw.close()

    def read_bytes(self) -> bytes:
        with self.open_binary() as f:
            return f.read()

    def head(self, n: int = SNIFF_BYTES) -> bytes:
        """The first ``n`` decompressed bytes (for format detection)."""
        with self.open_binary() as f:
            return f.read(n)

    @contextmanager
    def open_text(self) -> Iterator[TextIO]:
        """Decoded text: UTF-8 by default, UTF-16/UTF-8 with BOM honoured, bad bytes replaced."""
        with self.open_binary() as f:
            encoding = detect_encoding(self.head(4))
            text = io.TextIOWrapper(f, encoding=encoding, errors="replace", newline=None)  # type: ignore[arg-type]
            try:
                yield text
            finally:
                text.detach()

    def read_text(self) -> str:
        with self.open_text() as f:
            return f.read()


def detect_encoding(head: bytes) -> str:
    if head.startswith(codecs.BOM_UTF8):
        return "utf-8-sig"
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "utf-16"
    return "utf-8"


def decode_head(head: bytes) -> str:
    """Best-effort text of a sniffed head, whatever its encoding."""
    return head.decode(detect_encoding(head), errors="replace")


class _GuardedStream(io.RawIOBase):
    """Turns gzip's exceptions on truncated / corrupt data into :class:`InputError`."""

    def __init__(self, inner: gzip.GzipFile, path: str) -> None:
        self._inner = inner
        self._path = path

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def _guard(self, fn, *args):  # type: ignore[no-untyped-def]
        try:
            return fn(*args)
        except EOFError:
            raise InputError(self._path, "truncated gzip data") from None
        except (gzip.BadGzipFile, zlib.error, OSError) as e:
            raise InputError(self._path, f"corrupt gzip data ({e})") from None

    def readinto(self, b) -> int:  # type: ignore[no-untyped-def]
        return self._guard(self._inner.readinto, b)

    def read(self, n: int = -1) -> bytes:
        return self._guard(self._inner.read, n)

    def readline(self, size: int | None = -1) -> bytes:
        return self._guard(self._inner.readline, size if size is not None else -1)
