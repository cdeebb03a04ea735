"""Allocator trace events read from a snapshot's pickle bytes, for :mod:`.stream`.

An event of a long trace is pickled the same way over and over: an empty dict, a memo
store, a mark, its keys as references to strings stored earlier, its values as integers,
references, short strings stored there (``compile_context`` is a new string object in each
event), its frame list a list of references to frame dicts stored earlier, then SETITEMS.
A :class:`Shape` is that layout for one set of keys in one order, compiled into a pattern
that matches a run of such events at C speed; the reader learns shapes from the first
events, which it reads opcode by opcode. The integers are decoded by numpy from the bytes
of the events' heads (:func:`decode_heads`), in batches; a :class:`TraceSink` keeps the
rows as columns.

A pattern matches exactly the opcodes it names, so an event it matches is the dict the
unpickler would build; anything else is read opcode by opcode.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import chain, compress
from operator import itemgetter
from typing import Any

import numpy as np

from aiflame.sources.torch_memory.replay import Trace

_ANY = re.DOTALL
# Opcodes with their arguments (``....``, not ``.{4}``: re matches it faster).
REF = rb"(?:j....|h.)"
INT = rb"(?:K.|M..|J....|\x8a(?:" + b"|".join(b"\\x%02x" % n + b"." * n for n in range(9)) + b"))"
MAX_INLINE_STR = 64  # longer strings in an event: the event is read opcode by opcode
SHORT_STR = (
    rb"\x8c(?:"
    + b"|".join(b"\\x%02x" % n + b"." * n for n in range(MAX_INLINE_STR + 1))
    + rb")\x94"
)
# A frame list's references, up to the APPENDS and SETITEMS that end the event: scanned as
# bytes (three times faster than token by token), so the reader checks each new run is
# references, maybe with a FRAME between two, and nothing else (an index may hold the
# bytes "eu": then it is not). An atomic group, not possessive quantifiers: CPython 3.11.2
# (Debian 12's python3) gets the possessive repeat of a group wrong and never matches.
RUN = rb"(?>[^e]*(?:e(?!u)[^e]*)*)"

INT_KEYS = ("addr", "size", "stream", "time_us")  # decoded, in this order
MAX_SHAPES = 8
MAX_OTHER_KEYS = 4
WINDOW = 1 << 18  # bytes of events matched by one call; a longer event: opcode by opcode

# Steps through an event's head: skip bytes, skip a reference, skip another value, read
# the integer of column ``arg``.
FIXED, SKIP_REF, SKIP_OTHER, READ_INT = range(4)


@dataclass(frozen=True)
class Shape:
    """One event layout. ``findall`` gives the events that follow each other from a
    position, one tuple of groups each, then (its last group non-empty) a tuple for the
    rest. Getters of a tuple:
    ``whole`` the event, ``head`` its bytes up to its last integer of :data:`INT_KEYS`,
    read by ``steps`` (:func:`decode_heads`).
    ``key`` the groups that decide an event's row but for its integers and a frame list
    read before: the action's reference, each other value's reference (which must point
    at an object read before the event) or string (stored in the memo) or ``b""``, then
    the list made here after its EMPTY_LIST (MEMOIZE, maybe MARK references APPENDS or
    one reference APPEND), ``b""`` when none is. ``shared`` the reference to a frame list
    read before (``b""`` when there is none). ``entries``: the reader's cache of what keys
    decide, for this shape only (the same key means something else in another)."""

    findall: Callable[..., list[tuple[bytes, ...]]]
    key: Callable[[tuple[bytes, ...]], tuple[bytes, ...]]
    head: Callable[[tuple[bytes, ...]], bytes]
    shared: Callable[[tuple[bytes, ...]], bytes]
    steps: tuple[tuple[int, int], ...]
    has_frames: bool
    entries: dict[tuple[bytes, ...], int] = field(default_factory=dict)  # key -> entry id


WHOLE = itemgetter(0)


def ref_bytes(index: int) -> bytes:
    """How CPython's picklers reference memo entry ``index``."""
    return b"h" + bytes([index]) if index < 256 else b"j" + index.to_bytes(4, "little")


def ref_index(ref: bytes) -> int:
    return ref[1] if ref[0] == 0x68 else int.from_bytes(ref[1:5], "little")


def learn_shape(event: dict[Any, Any], memo_index: dict[int, int]) -> Shape | None:
    """The shape of events with the keys of ``event``, in its order; None when such events
    are not worth a pattern (a key that is not a stored string, frames not last, ...).
    ``memo_index`` gives the memo index of each stored string, by ``id``."""
    keys = list(event)
    if "action" not in event or ("frames" in event and keys[-1] != "frames"):
        return None
    if len(set(keys) - {"action", "frames", *INT_KEYS}) > MAX_OTHER_KEYS:
        return None
    last_int = max((i for i, k in enumerate(keys) if k in INT_KEYS), default=-1)
    parts: list[bytes | None] = [None, None, rb"\}\x94\("]  # None: a group (the event, its head)
    groups = 2
    steps: list[tuple[int, int]] = [(FIXED, 3)]
    decide: list[int] = []  # the groups of the key

    def group(body: bytes) -> int:
        nonlocal groups
        parts.extend((None, body, b")"))
        groups += 1
        return groups - 1

    for i, key in enumerate(keys):
        index = memo_index.get(id(key)) if type(key) is str else None
        if index is None:
            return None
        parts.append(re.escape(ref_bytes(index)))
        steps.append((FIXED, len(ref_bytes(index))))
        if key == "action":
            decide.insert(0, group(REF))
            steps.append((SKIP_REF, 0))
        elif key in INT_KEYS:
            parts.append(INT)
            steps.append((READ_INT, INT_KEYS.index(key)))
        elif key == "frames":
            break
        else:  # a value nothing reads: a reference or a string (stored), or any other scalar
            parts.append(b"(?:")
            decide.append(group(REF + b"|" + SHORT_STR))
            parts.append(b"|" + INT + rb"|N|\x88|\x89)")
            steps.append((SKIP_OTHER, 0))
        if i == last_int:
            parts.append(b")")  # the head ends with the last integer
    if last_int < 0:
        parts.insert(3, b")")
    made = shared = -1
    if "frames" in event:
        # ] then MEMOIZE MARK references APPENDS | MEMOIZE reference APPEND | MEMOIZE; or a
        # list read before
        parts.append(rb"(?:\]")
        made = group(rb"\x94\(" + RUN + rb"e(?=u)|\x94" + REF + rb"a|\x94")
        parts.append(b"|")
        shared = group(REF)
        parts.append(b")")
    # SETITEMS; then APPENDS MARK, when the events are pickled a thousand at a time: for the
    # trace list, with nothing to append, as if they were not there
    parts.append(rb"u(?:e\()?)")
    blank = group(b"")  # always b"": stands for absent frames
    one = b"".join(b"(" if p is None else p for p in parts)
    return Shape(
        findall=re.compile(one + rb"|(.).*", _ANY).findall,  # ANY_ALL: skips to the end
        key=itemgetter(*decide, made if made >= 0 else blank),
        head=itemgetter(1),
        shared=itemgetter(shared if shared >= 0 else blank),
        steps=_merged(steps[: _head_steps(steps)]),
        has_frames="frames" in event,
    )


def _head_steps(steps: list[tuple[int, int]]) -> int:
    """How many steps read the head: up to the last integer."""
    return max((i + 1 for i, (kind, _) in enumerate(steps) if kind == READ_INT), default=0)


def _merged(steps: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    for kind, arg in steps:
        if kind == FIXED and out and out[-1][0] == FIXED:
            out[-1] = (FIXED, out[-1][1] + arg)
        else:
            out.append((kind, arg))
    return tuple(out)


def decode_heads(
    heads: list[bytes], steps: tuple[tuple[int, int], ...]
) -> tuple[np.ndarray, np.ndarray]:
    """The integers of :data:`INT_KEYS` in events' heads (one row each) read by ``steps``,
    and whether each is there: BININT1, BININT2, BININT, LONG1 of up to 8 bytes."""
    n = len(heads)
    values = np.zeros((n, len(INT_KEYS)), dtype=np.int64)
    present = np.zeros((n, len(INT_KEYS)), dtype=bool)
    if not n or not any(kind == READ_INT for kind, _ in steps):
        return values, present
    width = max(map(len, heads)) + 16  # room to read 8 bytes past any head's end
    raw = np.zeros((n, width), dtype=np.uint8)
    raw[:, : width - 16] = np.array(heads, dtype=f"S{width - 16}").view(np.uint8).reshape(n, -1)
    # The 8 bytes from each offset of each row, as one little-endian number (unaligned).
    u64 = np.ndarray((n, width - 8), dtype="<u8", buffer=raw, strides=(width, 1))
    rows = np.arange(n)
    at = np.zeros(n, dtype=np.int64)
    for kind, arg in steps:
        if kind == FIXED:
            at += arg
            continue
        op = raw[rows, at].astype(np.int64)
        size = raw[rows, at + 1].astype(np.int64)  # LONG1's, SHORT_BINUNICODE's length
        if kind == SKIP_REF:
            at += np.where(op == 0x68, 2, 5)
        elif kind == SKIP_OTHER:
            at += np.select(
                [op == 0x68, op == 0x6A, op == 0x8C, op == 0x4B, op == 0x4D, op == 0x4A],
                [2, 5, 3 + size, 2, 3, 5],
                default=np.where(op == 0x8A, 2 + size, 1),  # LONG1; NONE, NEWTRUE/FALSE
            )
        else:
            long1 = op == 0x8A
            after = u64[rows, np.where(long1, at + 2, at + 1)]
            values[:, arg], length = _int_values(after, op, size)
            present[:, arg] = True
            at += length
    return values, present


def _int_values(
    after: np.ndarray, op: np.ndarray, size: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Integers from the 8 bytes after each opcode (after LONG1's length), and the
    opcodes' lengths."""
    long1 = op == 0x8A
    nbytes = np.select([op == 0x4B, op == 0x4D, op == 0x4A], [1, 2, 4], default=size)
    bits = (nbytes * 8).astype(np.uint64)
    short = bits < 64
    safe = np.where(short, bits, 0)
    mask = np.where(short, (np.uint64(1) << safe) - np.uint64(1), ~np.uint64(0))
    u = after & mask
    signed = (op == 0x4A) | long1  # BININT1/2 are unsigned
    top = np.where(short & (bits > 0), bits - np.uint64(1), 0)
    negative = signed & short & (bits > 0) & ((u >> top) & np.uint64(1) == 1)
    value = u.view(np.int64).copy()
    value[negative] -= np.left_shift(np.int64(1), safe[negative].astype(np.int64))
    return value, np.where(long1, 2 + size, 1 + nbytes)


def decode_refs(tokens: list[bytes]) -> np.ndarray:
    """Memo indices of BINGET / LONG_BINGET opcodes."""
    n = len(tokens)
    raw = np.zeros((n, 8), dtype=np.uint8)
    raw[:, :5] = np.array(tokens, dtype="S5").view(np.uint8).reshape(n, 5)
    return raw[:, 1:5].copy().view("<u4")[:, 0].astype(np.int64)  # zero-padded past h's


class TraceSink:
    """One device's trace list while it is read. Events come in runs: their kinds, frame
    list ids and either the heads they were read from (with their shape) or their
    integers; decoded into columns every ``BATCH`` events. Events that change no memory
    are only counted (kind 0), OOMs kept apart."""

    BATCH = 8192
    __hash__ = None  # type: ignore[assignment]  # hashes like the list it stands for

    def __init__(self) -> None:
        self.count = 0  # events read
        self.pending: list[tuple[np.ndarray, np.ndarray, int, Any, Any]] = []
        self.pending_count = 0
        self.columns: dict[str, list[np.ndarray]] = {
            k: [] for k in ("index", "kind", "fid", *INT_KEYS)
        }
        self.has_time = True
        self.ooms: list[dict[str, int]] = []

    def add(self, kind: np.ndarray, fid: np.ndarray, shape: Shape | None, rows: Any) -> None:
        """The next ``len(kind)`` events of the trace: their kinds, frame list ids and
        their heads (``shape`` given) or their integers and whether each is there."""
        self.pending.append((kind, fid, self.count, shape, rows))
        self.count += len(kind)
        self.pending_count += len(kind)
        if self.pending_count >= self.BATCH:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        pending, self.pending, self.pending_count = self.pending, [], 0
        kind = np.concatenate([p[0] for p in pending])
        n = len(kind)
        values = np.zeros((n, len(INT_KEYS)), dtype=np.int64)
        present = np.zeros((n, len(INT_KEYS)), dtype=bool)
        by_shape: dict[int, tuple[Shape, list[np.ndarray], list[Iterable[bytes]]]] = {}
        at = 0
        for k, _, _, shape, rows in pending:
            if shape is None:
                values[at : at + len(k)], present[at : at + len(k)] = rows
            else:  # only the events that change memory
                _, where, heads = by_shape.setdefault(id(shape), (shape, [], []))
                where.append(at + np.nonzero(k)[0])
                heads.append(compress(rows, k))
            at += len(k)
        for shape, where, heads in by_shape.values():  # one decoding per shape
            where_all = np.concatenate(where)
            values[where_all], present[where_all] = decode_heads(
                list(chain.from_iterable(heads)), shape.steps
            )
        keep = np.nonzero(kind)[0]
        cols = self.columns
        cols["kind"].append(kind[keep])
        cols["fid"].append(np.concatenate([p[1] for p in pending])[keep])
        cols["index"].append(
            np.concatenate([c + np.arange(len(k), dtype=np.int64) for k, _, c, _, _ in pending])[
                keep
            ]
        )
        values, present = values[keep], present[keep]
        for j, key in enumerate(INT_KEYS):
            if not present[:, j].all():
                if key in ("addr", "size"):  # the unpickler's reading reports the missing key
                    raise ValueError(f"an event without {key}")
                if key == "time_us":
                    self.has_time = False
            cols[key].append(values[:, j].copy())

    def finish(self, frame_lists: list[Any]) -> Trace:
        """The columns, with ``frame_lists[i]`` the frame list of id ``i``."""
        self.flush()
        col = {}
        for key in list(self.columns):  # one column at a time, its chunks freed
            chunks = self.columns.pop(key)
            col[key] = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int64)
            del chunks
        lists = np.empty(len(frame_lists), dtype=object)
        lists[:] = frame_lists
        return Trace(
            index=col["index"],
            kind=col["kind"].astype(np.int8, copy=False),
            addr=col["addr"],
            size=col["size"],
            time_us=col["time_us"] if self.has_time else None,
            stream=col["stream"],
            frames=lists[col.pop("fid")],  # an object array: 8 bytes an event
            ooms=self.ooms,
        )


def int_value(value: object) -> int:
    """An integer read opcode by opcode, checked to fit the columns."""
    if type(value) is not int or not -(1 << 63) <= value < 1 << 63:
        raise ValueError("not a 64-bit integer")
    return value
