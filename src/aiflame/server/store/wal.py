"""The write-ahead log: an accepted push is appended here before it is acknowledged.

A push is decoded and checked first (a bad one is a 4xx and never logged), then its body is
appended to the current segment file and answered at once; the writer commits it to the
store in the next batch. A segment is deleted once every record in it is committed. When
the process is killed, the next start replays the segments left (their ids make the
already-stored ones no-ops), so every acknowledged push reaches the store, and a push is
answered in milliseconds rather than after a commit of many tables.

Records survive the process (they are in the kernel's page cache when ``write`` returns),
not a power loss; ``fsync=True`` syncs every record for that. Segments live beside the
embedded store, or in the server's own directory when the store is a ClickHouse server.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import msgspec

log = logging.getLogger("aiflame.server")

_MAGIC = b"AFW1"
_HEAD = struct.Struct("<4sII")  # magic, payload length, crc32 of the payload
_ROTATE_S = 2.0
_ROTATE_BYTES = 64 << 20
MAX_SET_ASIDE = 1000  # records the store refused, kept for inspection


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class Record(msgspec.Struct):
    kind: str  # "push", "ingest", "telemetry"
    tenant: str
    received_ms: int
    meta: dict[str, str]  # what decoding needs: content type, encoding, query parameters
    body: bytes


_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(Record)


class WriteAheadLog:
    def __init__(self, directory: str, max_bytes: int = 4 << 30, fsync: bool = False) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.fsync = fsync
        self._lock = threading.Lock()
        self._pending: dict[int, int] = {}  # segment -> records not yet committed
        self._closed: set[int] = set()
        self._sizes: dict[int, int] = {}
        existing = self.segments()
        self._number = (existing[-1] + 1) if existing else 1
        self._file = open(self._path(self._number), "ab", buffering=0)  # noqa: SIM115
        self._opened = time.monotonic()

    def _path(self, number: int) -> Path:
        return self.dir / f"segment-{number:012d}.wal"

    @property
    def current(self) -> int:
        """The segment being written (those before it were left by earlier processes)."""
        return self._number

    def segments(self) -> list[int]:
        return sorted(int(p.stem.split("-")[1]) for p in self.dir.glob("segment-*.wal"))

    @property
    def size(self) -> int:
        with self._lock:
            return sum(self._sizes.values())

    def append(self, record: Record) -> int:
        """Log one record; returns its segment (hand it to :meth:`committed` later)."""
        payload = _ENCODER.encode(record)
        data = _HEAD.pack(_MAGIC, len(payload), zlib.crc32(payload)) + payload
        with self._lock:
            if (
                time.monotonic() - self._opened > _ROTATE_S
                or self._sizes.get(self._number, 0) > _ROTATE_BYTES
            ):
                self._rotate()
            n = self._number
            at = self._sizes.get(n, 0)
            try:
                _write_all(self._file.fileno(), data)
                if self.fsync:
                    os.fsync(self._file.fileno())
            except OSError:
                # A full disk: the torn record is cut off again, so the segment stays whole
                # for the records before it and after it (the push is answered 503).
                with contextlib.suppress(OSError):
                    os.ftruncate(self._file.fileno(), at)
                raise
            self._pending[n] = self._pending.get(n, 0) + 1
            self._sizes[n] = self._sizes.get(n, 0) + len(data)
            return n

    def probe(self) -> None:
        """Write and remove a small file beside the segments (OSError while the disk is
        full)."""
        path = self.dir / ".probe"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                _write_all(fd, b"\0" * 4096)
            finally:
                os.close(fd)
        finally:
            with contextlib.suppress(OSError):
                path.unlink()

    def over_limit(self) -> bool:
        return self.size > self.max_bytes

    def committed(self, segment: int, count: int = 1) -> None:
        with self._lock:
            left = self._pending.get(segment, 0) - count
            self._pending[segment] = left
            if left <= 0 and segment in self._closed:
                self._delete(segment)

    def _rotate(self) -> None:
        # The next segment is opened first: should that fail (a full disk), the current one
        # stays open and whole.
        new = open(self._path(self._number + 1), "ab", buffering=0)  # noqa: SIM115
        self._file.close()
        old = self._number
        self._closed.add(old)
        if self._pending.get(old, 0) <= 0:
            self._delete(old)
        self._number += 1
        self._file = new
        self._opened = time.monotonic()

    def _delete(self, segment: int) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(segment).unlink()
        self._pending.pop(segment, None)
        self._sizes.pop(segment, None)
        self._closed.discard(segment)

    def replay(self, upto: int) -> Iterator[Record]:
        """Records of the segments before ``upto`` (left by an earlier process)."""
        for number in self.segments():
            if number >= upto:
                continue
            data = self._path(number).read_bytes()
            pos = 0
            while pos + _HEAD.size <= len(data):
                magic, length, crc = _HEAD.unpack_from(data, pos)
                payload = data[pos + _HEAD.size : pos + _HEAD.size + length]
                if magic != _MAGIC or len(payload) != length or zlib.crc32(payload) != crc:
                    log.warning("wal: segment %d ends in a torn record (ignored)", number)
                    break  # the process died mid-write: that push was never acknowledged
                pos += _HEAD.size + length
                yield _DECODER.decode(payload)

    def set_aside(self, record: Record, reason: str) -> Path | None:
        """Keep a record the store refused under ``rejected/`` (framed as in a segment, and
        its reason beside it), for inspection; at most ``MAX_SET_ASIDE`` are kept."""
        folder = self.dir / "rejected"
        try:
            folder.mkdir(exist_ok=True)
            if sum(1 for _ in folder.glob("*.wal")) >= MAX_SET_ASIDE:
                log.warning(
                    "wal: %d records set aside already; this one is not kept", MAX_SET_ASIDE
                )
                return None
            payload = _ENCODER.encode(record)
            name = f"{record.kind}-{record.received_ms}-{os.urandom(4).hex()}"
            path = folder / f"{name}.wal"
            path.write_bytes(_HEAD.pack(_MAGIC, len(payload), zlib.crc32(payload)) + payload)
            (folder / f"{name}.txt").write_text(
                f"kind: {record.kind}\ntenant: {record.tenant}\n"
                f"received_ms: {record.received_ms}\nreason: {reason}\n"
            )
        except OSError as e:
            log.warning("wal: cannot keep a refused record: %s", e)
            return None
        return path

    def drop_before(self, upto: int) -> None:
        with self._lock:
            for number in self.segments():
                if number < upto:
                    self._delete(number)

    def close(self) -> None:
        with self._lock:
            self._file.close()
            if self._pending.get(self._number, 0) <= 0:
                self._delete(self._number)
