"""The agent's disk spool: what is cut waits here until a destination has it.

Every profile, telemetry document and trace is written here first (so a crash of the
agent, or a server down for hours, loses nothing that was cut), then sent, oldest first,
by one sender per destination, and removed once every destination has answered for it.

Layout of ``DIR``::

    DIR/<queue>/<seq>-<id>.<ext>       the payload (``.pb.gz``: a pprof file that
                                       ``aiflame flamegraph`` reads as it is)
    DIR/<queue>/<seq>-<id>.json        what to send it with (labels, profile type, times)
    DIR/ledger.jsonl                   one line per entry spooled and per entry dropped,
                                       with its sample count: what was cut, what was lost

One queue per destination (``server``, ``pyroscope``); an entry for both is one payload
file hard-linked into both queues, so the bytes are on disk once. Without any destination
the entries stay in queue ``local``, the spool being a bounded store of recent profiles.
Writes go to a temporary name, are synced and renamed: the metadata first, then the
payload, so a payload on disk always has its metadata (a metadata file without payload is
the trace of a crash in between and is removed at start).

The spool is bounded (``max_bytes``) by what its files take on disk (their blocks: a
small profile and its metadata take two blocks each, 8 KiB on most file systems, whatever
their length): the oldest entries are dropped first, each drop counted (and written to the
ledger with its samples), so ``samples pushed == samples spooled - samples dropped`` can be
checked from the ledger and the destination alone. A disk that fills before that bound
(others write to it too) is met the same way: an entry that cannot be written makes the
oldest entries go first, one at a time, until it can; only an entry that cannot be written
even into an empty spool is lost itself, and counted as such (``reason: "disk full"``).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

LEDGER = "ledger.jsonl"
LEDGER_MAX_BYTES = 8 << 20  # then compacted into totals
NO_ROOM = (errno.ENOSPC, errno.EDQUOT)


@dataclass(eq=False, slots=True)
class Entry:
    """One thing to send. Its metadata (labels, times) stays on disk while it waits, so
    that a spool of a million entries costs little memory: :meth:`Spool.meta` reads it."""

    queue: str
    seq: int
    id: str
    ext: str  # "pb.gz", "trace.json.gz", "telemetry.json.gz"
    meta: dict[str, object] | None
    size: int = 0  # the payload's blocks, in bytes (shared by the queues it is linked into)
    kind: str = "profile"
    samples: int = 0
    meta_size: int = 0  # the metadata file's blocks, in bytes (one per queue)

    def __post_init__(self) -> None:
        if self.meta is not None:
            self.kind = str(self.meta.get("kind", "profile"))
            samples = self.meta.get("samples", 0)
            self.samples = int(samples) if isinstance(samples, int | float) else 0

    @property
    def stem(self) -> str:
        return f"{self.seq:012d}-{self.id}"


@dataclass
class SpoolStats:
    dropped_entries: int = 0
    dropped_samples: int = 0
    dropped_by_kind: dict[str, int] = field(default_factory=dict)
    write_error: str = ""  # why the last write failed ("" once one succeeds)


def disk_bytes(path: str) -> int:
    """What a file takes on disk (its blocks), 0 if it is gone."""
    try:
        return os.stat(path).st_blocks * 512
    except OSError:
        return 0


class SpoolFull(OSError):
    """An entry that cannot be written even with every older entry dropped."""


def _fsync_write(path: str, data: bytes, sync: bool = True) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
        if sync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)


def _fsync_files(paths: list[str], directories: set[str]) -> None:
    """Make these files and the directory entries naming them durable. Each file on its
    own: a ``syncfs`` would flush the whole file system, whatever else the host writes
    to it (a training job's checkpoints), and wait for it. A file already gone (sent and
    removed meanwhile) needs nothing."""
    for path in [*paths, *sorted(directories)]:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.fsync(fd)
        except OSError:
            pass  # (the next write to a full or failing disk fails, and is counted)
        finally:
            os.close(fd)


class Spool:
    def __init__(self, root: str, queues: list[str], max_bytes: int = 512 << 20) -> None:
        self.root = root
        self.queues = queues or ["local"]
        self.max_bytes = max_bytes
        self.stats = SpoolStats()
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._entries: dict[str, list[Entry]] = {q: [] for q in self.queues}
        self._bytes = 0
        self._seq = 0
        self._staged: list[tuple[list[Entry], dict[str, object]]] = []
        os.makedirs(root, mode=0o700, exist_ok=True)
        for q in self.queues:
            os.makedirs(os.path.join(root, q), mode=0o700, exist_ok=True)
        self._recover()

    # -- start ------------------------------------------------------------------------------
    def _recover(self) -> None:
        """Read back what an earlier run left (the replay after a restart)."""
        sizes: dict[tuple[int, int], int] = {}  # (dev, inode) -> size: count linked payloads once
        for q in self.queues:
            qdir = os.path.join(self.root, q)
            for name in sorted(os.listdir(qdir)):
                path = os.path.join(qdir, name)
                if ".tmp-" in name:
                    with contextlib.suppress(OSError):
                        os.unlink(path)
                    continue
                stem, _, ext = name.partition(".")
                if ext != "json":
                    continue  # a payload, or something else
                seq_text, _, entry_id = stem.partition("-")
                try:
                    with open(path, encoding="utf-8") as f:
                        meta = json.load(f)
                    ext = str(meta["ext"])
                    payload = os.path.join(qdir, f"{stem}.{ext}")
                    st = os.stat(payload)
                except (OSError, ValueError, KeyError, TypeError):
                    with contextlib.suppress(OSError):
                        os.unlink(path)  # a crash between metadata and payload
                    continue
                entry = Entry(q, int(seq_text), entry_id, ext, meta, st.st_blocks * 512)
                entry.meta = None  # read again when it is sent
                entry.meta_size = disk_bytes(path)
                self._entries[q].append(entry)
                sizes[(st.st_dev, st.st_ino)] = entry.size
                self._seq = max(self._seq, entry.seq)
                self._bytes += entry.meta_size
        for q in self.queues:
            self._entries[q].sort(key=lambda e: e.seq)
        self._bytes += sum(sizes.values())
        self._reconcile_ledger()

    def _reconcile_ledger(self) -> None:
        """An entry whose files were written but whose ledger line was not (a crash in
        between) is spooled all the same: its line is written now."""
        known = ledger_ids(os.path.join(self.root, LEDGER))
        seen: set[str] = set()
        for entry in self.iter_all():
            if entry.id not in known and entry.id not in seen:
                seen.add(entry.id)
                self._ledger(
                    {"op": "spool", "id": entry.id, "kind": entry.kind, "samples": entry.samples}
                )

    # -- writing ----------------------------------------------------------------------------
    def put(
        self,
        ext: str,
        payload: bytes,
        meta: dict[str, object],
        queues: list[str] | None = None,
        sync: bool = True,
    ) -> Entry | None:
        """Spool ``payload`` for ``queues`` (default: every queue); returns the entry of the
        first queue, None when it could not be written even after every older entry was
        dropped (it is then counted as dropped: ``reason`` "disk full", or the error).
        Durable when this returns; with ``sync=False`` it is staged: written, but synced,
        recorded in the ledger and handed to the senders at :meth:`sync` (a period's
        profiles at once)."""
        targets = [q for q in (queues or self.queues) if q in self._entries] or self.queues[:1]
        entry_id = str(meta.get("id") or uuid.uuid4())
        meta = {**meta, "id": entry_id, "ext": ext, "spooled": time.time()}
        with self._lock:
            self._seq += 1
            seq = self._seq
        try:
            staged = self._make_room_for(lambda: self._write(targets, seq, entry_id, ext, payload,
                                                             meta, sync))  # fmt: skip
        except OSError as e:
            self._lost(Entry(targets[0], seq, entry_id, ext, meta), e)
            return None
        record = {
            "op": "spool",
            "id": entry_id,
            "kind": meta.get("kind"),
            "samples": meta.get("samples", 0),
        }
        with self._lock:
            self._bytes += staged[0].size + sum(e.meta_size for e in staged)
            self._staged.append((staged, record))
        if sync:
            self.sync()
        return staged[0]

    def _write(
        self,
        targets: list[str],
        seq: int,
        entry_id: str,
        ext: str,
        payload: bytes,
        meta: dict[str, object],
        sync: bool,
    ) -> list[Entry]:
        """Write one entry's files into each queue (metadata first); on any error, remove
        what was written of it and raise."""
        staged: list[Entry] = []
        written: list[str] = []
        payload_path = ""
        encoded = json.dumps(meta, separators=(",", ":")).encode()
        try:
            for q in targets:
                entry = Entry(q, seq, entry_id, ext, meta)
                entry.meta = None  # on disk; read again when it is sent
                base = os.path.join(self.root, q, entry.stem)
                _fsync_write(f"{base}.json", encoded, sync)
                written.append(f"{base}.json")
                if not payload_path:
                    payload_path = f"{base}.{ext}"
                    _fsync_write(payload_path, payload, sync)
                else:
                    tmp = f"{base}.{ext}.tmp-{os.getpid()}"
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(tmp)
                    os.link(payload_path, tmp)
                    os.replace(tmp, f"{base}.{ext}")
                written.append(f"{base}.{ext}")
                entry.meta_size = disk_bytes(f"{base}.json")
                staged.append(entry)
        except OSError:
            for path in [*written, *(f"{w}.tmp-{os.getpid()}" for w in written)]:
                with contextlib.suppress(OSError):
                    os.unlink(path)
            for q in targets:  # a temporary file of the one being written
                base = os.path.join(self.root, q, f"{seq:012d}-{entry_id}")
                for tmp in (f"{base}.json.tmp-{os.getpid()}", f"{base}.{ext}.tmp-{os.getpid()}"):
                    with contextlib.suppress(OSError):
                        os.unlink(tmp)
            raise
        size = disk_bytes(payload_path)
        for entry in staged:
            entry.size = size
        return staged

    def _make_room_for(self, write):  # type: ignore[no-untyped-def]
        """``write()``, dropping the oldest entry after each failure for want of room, as
        long as there is one; the last error is raised."""
        while True:
            try:
                result = write()
            except OSError as e:
                if e.errno not in NO_ROOM or not self._drop_oldest("disk full"):
                    with self._lock:
                        self.stats.write_error = f"{self.root}: {e.strerror or e}"
                    raise
                continue
            if self.stats.write_error:
                with self._lock:
                    self.stats.write_error = ""
            return result

    def _lost(self, entry: Entry, e: OSError) -> None:
        """An entry that could not be written at all: counted as dropped."""
        reason = "disk full" if e.errno in NO_ROOM else f"write failed: {e.strerror or e}"
        self._count_drop(entry, reason)

    def sync(self) -> None:
        """Make what was staged durable, record it in the ledger, give it to the senders
        (only then: an entry is never sent before the ledger has it)."""
        with self._lock:
            staged, self._staged = self._staged, []
        if not staged:
            return
        paths: list[str] = []
        directories: set[str] = set()
        for entries, _ in staged:
            first = entries[0]  # its payload is the other queues' too (hard links)
            base = os.path.join(self.root, first.queue, first.stem)
            paths += [f"{base}.json", f"{base}.{first.ext}"]
            paths += [os.path.join(self.root, e.queue, f"{e.stem}.json") for e in entries[1:]]
            directories.update(os.path.join(self.root, e.queue) for e in entries)
        _fsync_files(paths, directories)
        records = [record for _, record in staged]
        with contextlib.suppress(OSError):  # (counted in write_error; the files are there)
            self._make_room_for(lambda: self._ledger_many(records))
        with self._lock:
            for entries, _ in staged:
                for e in entries:
                    self._entries[e.queue].append(e)
            self._cond.notify_all()
        self._enforce_limit()

    def _enforce_limit(self) -> None:
        while True:
            with self._lock:
                if self._bytes <= self.max_bytes:
                    return
            if not self._drop_oldest("spool full"):
                return

    def _drop_oldest(self, reason: str) -> bool:
        """Drop the oldest entry of any queue; False when there is none."""
        with self._lock:
            oldest = min(
                (es[0] for es in self._entries.values() if es),
                key=lambda e: e.seq,
                default=None,
            )
        if oldest is None:
            return False
        self.drop(oldest, reason=reason)
        return True

    # -- reading ----------------------------------------------------------------------------
    def pending(self, queue: str) -> list[Entry]:
        with self._lock:
            return list(self._entries.get(queue, ()))

    def head(self, queue: str, limit: int) -> list[Entry]:
        with self._lock:
            return list(self._entries.get(queue, ())[:limit])

    def wait(self, queue: str, timeout: float) -> bool:
        """Wait until ``queue`` has an entry (True) or ``timeout`` passes."""
        with self._cond:
            if self._entries.get(queue):
                return True
            self._cond.wait(timeout)
            return bool(self._entries.get(queue))

    def read(self, entry: Entry) -> bytes:
        with open(self.payload_path(entry), "rb") as f:
            return f.read()

    def meta(self, entry: Entry) -> dict[str, object]:
        """The entry's metadata, from its file."""
        if entry.meta is not None:
            return entry.meta
        path = os.path.join(self.root, entry.queue, f"{entry.stem}.json")
        with open(path, encoding="utf-8") as f:
            return json.load(f)

    def payload_path(self, entry: Entry) -> str:
        return os.path.join(self.root, entry.queue, f"{entry.stem}.{entry.ext}")

    def iter_all(self) -> Iterator[Entry]:
        with self._lock:
            entries = [e for es in self._entries.values() for e in es]
        yield from sorted(entries, key=lambda e: e.seq)

    @property
    def bytes(self) -> int:
        with self._lock:
            return self._bytes

    # -- removing ---------------------------------------------------------------------------
    def done(self, entry: Entry) -> None:
        """The destination of ``entry``'s queue has it."""
        self._remove(entry)

    def drop(self, entry: Entry, reason: str) -> None:
        """Give ``entry`` up (rejected by the destination, or the spool or disk is full)."""
        if self._remove(entry):
            self._count_drop(entry, reason)

    def _count_drop(self, entry: Entry, reason: str) -> None:
        with self._lock:
            self.stats.dropped_entries += 1
            self.stats.dropped_samples += entry.samples
            kind = entry.kind
            self.stats.dropped_by_kind[kind] = self.stats.dropped_by_kind.get(kind, 0) + 1
        record = {"op": "drop", "id": entry.id, "queue": entry.queue, "kind": kind,
                  "samples": entry.samples, "reason": reason}  # fmt: skip
        # (its entry's files were just removed: room for the line, unless the disk is full
        # of others' files, where the count above is what is left of it)
        with contextlib.suppress(OSError):
            self._ledger(record)

    def _remove(self, entry: Entry) -> bool:
        with self._lock:
            entries = self._entries.get(entry.queue, [])
            if entry not in entries:
                return False
            entries.remove(entry)
            linked = any(
                e.seq == entry.seq
                for q, es in self._entries.items()
                if q != entry.queue
                for e in es
            )
            self._bytes -= entry.meta_size
            if not linked:
                self._bytes -= entry.size
        base = os.path.join(self.root, entry.queue, entry.stem)
        for path in (f"{base}.{entry.ext}", f"{base}.json"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        return True

    # -- ledger -----------------------------------------------------------------------------
    def _ledger(self, record: dict[str, object]) -> None:
        self._ledger_many([record])

    def _ledger_many(self, records: list[dict[str, object]]) -> None:
        path = os.path.join(self.root, LEDGER)
        t = round(time.time(), 3)
        text = "".join(json.dumps({**r, "t": t}, separators=(",", ":")) + "\n" for r in records)
        with self._lock, open(path, "a", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
            big = f.tell() > LEDGER_MAX_BYTES
        if big:
            self._compact_ledger(path)

    def _compact_ledger(self, path: str) -> None:
        """Totals instead of the lines, except those of entries still waiting (recovery
        needs their ids)."""
        with self._lock:
            pending = {e.id for es in self._entries.values() for e in es}
        totals, kept = ledger_totals(path), []
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if rec.get("op") == "spool" and rec.get("id") in pending:
                    kept.append(line)
                    totals["spooled"] -= 1
                    totals["spooled_samples"] -= int(rec.get("samples") or 0)
        text = json.dumps({"op": "totals", **totals}) + "\n" + "".join(kept)
        with self._lock:
            _fsync_write(path, text.encode())


def ledger_ids(path: str) -> set[str]:
    """Ids of the entries the ledger records as spooled."""
    out: set[str] = set()
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if '"op":"spool"' in line:
                    with contextlib.suppress(ValueError):
                        out.add(str(json.loads(line).get("id")))
    except OSError:
        pass
    return out


def ledger_totals(path: str, queue: str | None = None) -> dict[str, int]:
    """Samples (and entries) spooled and dropped (from ``queue``, or any), from a ledger."""
    out = {"spooled_samples": 0, "dropped_samples": 0, "spooled": 0, "dropped": 0}
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue  # a line cut by a crash
                op = rec.get("op")
                if op == "totals":
                    for k in out:
                        out[k] += int(rec.get(k, 0))
                elif op == "spool":
                    out["spooled"] += 1
                    out["spooled_samples"] += int(rec.get("samples") or 0)
                elif op == "drop" and queue in (None, rec.get("queue")):
                    out["dropped"] += 1
                    out["dropped_samples"] += int(rec.get("samples") or 0)
    except OSError:
        pass
    return out
