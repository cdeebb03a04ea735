"""Keeping a memory snapshot's pickle from costing more than its size.

A pickle is a program: a few bytes can make a reader do a lot. Two things bound it here.

* :func:`check_opcodes`, before the restricted unpickler reads a pickle: every opcode's
  argument must lie inside the data and every string be shorter than the token limit, and
  a memo index may not run ahead of the data (the C unpickler sizes its memo table to the
  largest index it is given: five bytes naming index 2**32 would cost 32 GiB). A bad one
  is a corrupt pickle, named as such, not an "out of memory".
* :func:`check_size`, on what either reader built: the size of the data as a tree, each
  reference to a container counted as a copy of it, since that is what walking it costs
  (a 12 KB pickle of lists holding the same large list a thousand times over, nested a
  few levels, is a billion elements to walk). It may be at most
  :func:`limits.max_objects` of the pickle's size, and a container may not hold itself.
"""

from __future__ import annotations

import pickletools
import re
from typing import Any

from aiflame.sources import limits
from aiflame.sources.torch_memory.replay import Trace


class PickleLimit(Exception):
    """The pickle is corrupt or breaks a limit; the message says which."""


_FIXED, _LINE, _LINES2, _COUNTED = range(4)
_MEMO_PUTS = {ord("q"), ord("r")}  # BINPUT, LONG_BINPUT
_PUT = ord("p")
_STOP = ord(".")
_FRAME = 0x95


def _opcode_table() -> dict[int, tuple[int, int, bool]]:
    """opcode byte -> (argument kind, size: fixed bytes or width of a length prefix,
    whether the length prefix is signed), from the pickletools descriptions."""
    table: dict[int, tuple[int, int, bool]] = {}
    for op in pickletools.opcodes:
        arg = op.arg
        code = ord(op.code)
        if arg is None:
            table[code] = (_FIXED, 0, False)
        elif arg.n >= 0:
            table[code] = (_FIXED, arg.n, False)
        elif arg.n == pickletools.UP_TO_NEWLINE:
            two = arg.name == "stringnl_noescape_pair"  # GLOBAL, INST: module and name
            table[code] = (_LINES2 if two else _LINE, 0, False)
        else:
            width = {
                pickletools.TAKEN_FROM_ARGUMENT1: 1,
                pickletools.TAKEN_FROM_ARGUMENT4: 4,
                pickletools.TAKEN_FROM_ARGUMENT4U: 4,
                pickletools.TAKEN_FROM_ARGUMENT8U: 8,
            }[arg.n]
            table[code] = (_COUNTED, width, arg.n == pickletools.TAKEN_FROM_ARGUMENT4)
    return table


_TABLE = _opcode_table()


def _plain_run() -> re.Pattern[bytes]:
    """Runs of opcodes with nothing to check (fixed-size arguments, no memo store, no
    FRAME, no STOP), skipped by the regex engine rather than one by one in Python."""
    by_size: dict[int, list[int]] = {}
    for code, (kind, size, _) in _TABLE.items():
        if kind == _FIXED and code not in (*_MEMO_PUTS, _FRAME, _STOP):
            by_size.setdefault(size, []).append(code)
    parts = [
        b"[" + b"".join(re.escape(bytes([c])) for c in sorted(codes)) + b"]" + b"." * size
        for size, codes in sorted(by_size.items())
    ]
    return re.compile(b"(?:" + b"|".join(parts) + b")*+", re.DOTALL)


_PLAIN_RUN = _plain_run()


def check_opcodes(data: bytes) -> None:
    """Walk the opcodes of ``data`` up to STOP without building anything; raise
    :class:`PickleLimit` for an argument past the end of the data, a string longer than
    the token limit, or a memo index beyond what the data so far could have stored."""
    end = len(data)
    max_token = limits.max_token()
    pos = 0
    table = _TABLE
    skip = _PLAIN_RUN.match
    while pos < end:
        pos = skip(data, pos).end()  # type: ignore[union-attr]
        if pos >= end:
            break
        op = data[pos]
        pos += 1
        entry = table.get(op)
        if entry is None:
            raise PickleLimit(f"corrupt pickle (unknown opcode {op:#04x} at byte {pos - 1:,})")
        kind, size, signed = entry
        if kind == _FIXED:
            if size:
                if pos + size > end:
                    raise PickleLimit("truncated pickle (unexpected end of data)")
                arg = int.from_bytes(data[pos : pos + size], "little")
                pos += size
                if op in _MEMO_PUTS:
                    _check_memo(arg, pos)
                elif op == _FRAME and pos + arg > end:
                    raise PickleLimit("truncated pickle (unexpected end of data)")
            elif op == _STOP:
                return
        elif kind == _COUNTED:
            if pos + size > end:
                raise PickleLimit("truncated pickle (unexpected end of data)")
            n = int.from_bytes(data[pos : pos + size], "little", signed=signed)
            pos += size
            if n < 0:
                raise PickleLimit(f"corrupt pickle (negative length at byte {pos - size:,})")
            if n > max_token:
                raise PickleLimit(
                    limits.token_too_long("a string or number of the pickle", max_token)
                )
            if pos + n > end:
                raise PickleLimit("truncated pickle (unexpected end of data)")
            pos += n
        else:
            for _ in range(2 if kind == _LINES2 else 1):
                nl = data.find(b"\n", pos, pos + max_token + 1)
                if nl < 0:
                    if end - pos > max_token:
                        what = "a text argument of the pickle"
                        raise PickleLimit(limits.token_too_long(what, max_token))
                    raise PickleLimit("truncated pickle (unexpected end of data)")
                if op == _PUT:
                    try:
                        index = int(data[pos:nl])
                    except ValueError:
                        raise PickleLimit(
                            f"corrupt pickle (bad memo index at byte {pos:,})"
                        ) from None
                    _check_memo(index, pos)
                pos = nl + 1
    raise PickleLimit("truncated pickle (unexpected end of data)")


def _check_memo(index: int, pos: int) -> None:
    # Each stored object took at least one opcode byte before this point.
    if not 0 <= index <= pos:
        raise PickleLimit(
            f"corrupt pickle (memo index {index:,} at byte {pos:,} is beyond the objects "
            "the data so far could hold)"
        )


def check_size(data: Any, nbytes: int) -> None:
    """Raise :class:`PickleLimit` when ``data`` as a tree (each reference to a container
    counted as a copy) is larger than :func:`limits.max_objects` of ``nbytes``, or holds
    a container inside itself. Linear in the distinct containers and their items: each
    container's tree size is computed once, from its items' (depth first, no recursion)."""
    limit = limits.max_objects(nbytes)
    sizes: dict[int, int] = {}  # id(container) -> tree size; -1 while its items are walked
    todo: list[tuple[Any, bool]] = [(data, False)]
    while todo:
        obj, items_done = todo.pop()
        key = id(obj)
        if items_done:
            total = 1 + _uncounted(obj)
            for item in _items(obj):
                total += sizes.get(id(item), 1)
            if total > limit:
                raise PickleLimit(_too_big(limit, nbytes))
            sizes[key] = total
            continue
        state = sizes.get(key)
        if state is not None:
            if state < 0:
                raise PickleLimit("corrupt pickle (a list or dict that contains itself)")
            continue
        sizes[key] = -1
        todo.append((obj, True))
        todo.extend((item, False) for item in _items(obj) if _is_container(item))


_CONTAINERS = (dict, list, tuple, set, frozenset, Trace)


def _is_container(x: Any) -> bool:
    return isinstance(x, _CONTAINERS)


def _items(obj: Any) -> Any:
    if isinstance(obj, dict):
        return (*obj.keys(), *obj.values())
    if isinstance(obj, Trace):
        # Rows of columns; the frame lists they share are named once each (by identity).
        return list({id(f): f for f in obj.frames if f is not None}.values())
    return obj


def _uncounted(obj: Any) -> int:
    """Elements of ``obj`` that :func:`_items` does not list: a trace's rows."""
    return len(obj.kind) if isinstance(obj, Trace) else 0


def _too_big(limit: int, nbytes: int) -> str:
    return (
        f"the snapshot holds more than {limit:,} objects once its references are followed, "
        f"the most a pickle of {nbytes:,} bytes may build (references to one large list "
        f"or dict repeated over and over; set {limits.MAX_OBJECTS_ENV} to raise it)"
    )


__all__ = ["PickleLimit", "check_opcodes", "check_size"]
