"""A PyTorch memory snapshot read from its pickle in bounded memory.

Unpickling a snapshot builds every allocator event of its trace (a dict, its integers, its
list of frames: about 1 KB each) and the unpickler's memo keeps them all alive until the
end, so memory grows with the length of the recording. This reader is a small pickle
machine for plain data (dicts, lists, tuples, sets, strings, bytes, numbers, booleans,
None) that builds everything the way the unpickler does, except the lists of
``device_traces``: their events become rows of columns as they are read (a
:class:`~aiflame.sources.torch_memory.replay.Trace` per device) and are dropped.
What stays is the memo's other entries (strings, frame dicts, frame lists: they may be
referenced later), one memo slot per event, and a few bytes per event of columns.

Regular events are matched whole by a compiled pattern (:mod:`.events`); the
first events, and any event the pattern does not match (a frame boundary inside it, a new
string or frame dict...), are read opcode by opcode. Frame lists made of references are
interned by their bytes: a long trace repeats a few thousand stacks.

Whatever this reader does not do exactly as the unpickler would (a class or function, an
opcode outside plain data, a memo store out of order, a reference to an event it dropped,
an event with unusual values...) raises :class:`Fallback`, and the caller reads the file
again with the restricted unpickler: results never depend on which reader ran. Running
out of data raises :class:`Truncated`.
"""

from __future__ import annotations

import struct
import sys
from itertools import chain, compress
from typing import Any, BinaryIO

import numpy as np

from aiflame.sources import limits
from aiflame.sources.torch_memory.bounds import PickleLimit
from aiflame.sources.torch_memory.events import (
    INT_KEYS,
    MAX_SHAPES,
    WHOLE,
    WINDOW,
    Shape,
    TraceSink,
    decode_refs,
    int_value,
    learn_shape,
    ref_index,
)
from aiflame.sources.torch_memory.replay import ACTION_KIND, OOM, Trace, oom_of

CHUNK = 1 << 20  # bytes read at a time
MEMOIZE = 0x94
MIN_WINDOW = 1 << 12  # bytes of events matched at first, after an event read otherwise
MAX_CACHED = 1 << 16  # event entries kept (see _Machine._entry)


class Fallback(Exception):
    """The file is not read exactly by this reader: read it with the unpickler."""


class Truncated(Exception):
    """The pickle ends before its STOP opcode."""


class _Gone:
    """The memo slot of an object this reader did not keep (a trace event, a trace list):
    a reference to it is not a snapshot's usual layout."""

    __slots__ = ()


GONE = _Gone()


class SharedFrames(list):  # type: ignore[type-arg]
    """A frame list interned by its bytes, shared by the events that pickled the same
    references: the file must never change it (the pickle machine refuses to)."""

    __slots__ = ()


def read_plain_data(f: BinaryIO, stats: dict[str, int] | None = None) -> Any:
    """The object pickled in ``f``, with each trace list of the top-level dict's
    ``device_traces`` given as a :class:`Trace`. ``stats`` gets how many trace events
    there were and how many were read opcode by opcode (not by a shape's pattern)."""
    machine = _Machine(f)
    data = machine.load()
    if stats is not None:
        stats["events"] = sum(sink.count for sink in machine.sinks)
        stats["read_slowly"] = machine.read_slowly
        stats["bytes"] = machine.base + len(machine.buf)
    return data


def _trace_slot(stack: list[Any], marks: list[int]) -> bool:
    """True when the list on top of the stack will be an element of the ``device_traces``
    list of the top-level dict (the dict is at the bottom with its items' MARK, then
    ``..., "device_traces", [outer list], (MARK,) ..., [this list]``)."""
    if not marks or marks[0] != 1 or type(stack[0]) is not dict:
        return False
    if len(marks) == 1:  # the outer list gets its one element by APPEND
        key = len(stack) - 3
    elif len(marks) == 2 and len(stack) > marks[1]:  # ... by MARK ... APPENDS
        key = marks[1] - 2
    else:
        return False
    return (
        key >= 1
        and (key - 1) % 2 == 0  # a key of the top-level dict, not a value
        and type(stack[key]) is str
        and stack[key] == "device_traces"
        and type(stack[key + 1]) is list
    )


class _Machine:
    def __init__(self, f: BinaryIO) -> None:
        self.f = f
        self.buf = b""
        self.base = 0  # file offset of buf[0]
        self.eof = False
        self.memo: list[Any] = []
        self.str_index: dict[int, int] = {}  # id(stored string) -> its memo index
        self.shapes: list[Shape] = []
        self.seen_keys: set[tuple[int, ...]] = set()
        self.sinks: list[TraceSink] = []
        # Frame lists of trace events: id 0 is no list; by object, by reference bytes.
        self.frame_lists: list[Any] = [None]
        self.by_id: dict[int, int] = {id(None): 0}
        self.by_run: dict[bytes, tuple[int, tuple[int, ...]]] = {}
        self.slots = _Slots()
        self.window = MIN_WINDOW
        self.since = 0
        self.read_slowly = 0  # trace events read opcode by opcode
        self.info = _Entries()
        self.frame_end = 0  # the data every FRAME announced must be there
        self.max_token = limits.max_token()

    # -- input -------------------------------------------------------------------------

    def _fill(self, pos: int, need: int) -> tuple[bytes, int, int]:
        """Keep ``buf[pos:]`` and read until ``need`` bytes are there (or the file ends)."""
        parts = [self.buf[pos:]]
        have = len(parts[0])
        while have < need and not self.eof:
            data = self.f.read(min(max(CHUNK, need - have), 1 << 26))
            if not data:
                self.eof = True
                break
            parts.append(data)
            have += len(data)
        self.base += pos
        self.buf = b"".join(parts)
        return self.buf, 0, len(self.buf)

    # -- the pickle machine --------------------------------------------------------------

    def load(self) -> Any:
        try:
            result = self._run()
        except (Fallback, Truncated, PickleLimit):
            raise
        except Exception as e:  # anything odd: the unpickler says what it makes of it
            raise Fallback(str(e)) from None
        self.memo.clear()  # what the result does not hold goes before the columns are made
        self.slots = self.info = None  # type: ignore[assignment]
        for shape in self.shapes:
            shape.entries.clear()
        try:
            traces = result.get("device_traces") if type(result) is dict else None
            if self.sinks:
                done = [
                    t.finish(self.frame_lists) if type(t) is TraceSink else t
                    for t in traces  # type: ignore[union-attr]
                ]
                if sum(type(t) is Trace for t in done) != len(self.sinks):
                    raise Fallback("a trace list outside device_traces")
                result["device_traces"] = done
        except (Fallback, Truncated):
            raise
        except Exception as e:
            raise Fallback(str(e)) from None
        return result

    def _run(self) -> Any:  # one branch per opcode, the frequent ones first
        stack: list[Any] = []
        marks: list[int] = []
        items: Any  # the objects of a container being built
        memo = self.memo
        push = stack.append
        str_index = self.str_index
        last_list: Any = None  # the latest list built, and its first memo slot
        last_list_memo = 0
        item_memo = 0  # first memo slot of the pending trace events
        buf, pos, end = self._fill(0, CHUNK)
        from_bytes = int.from_bytes
        while True:
            if end - pos < 16 and not self.eof:
                buf, pos, end = self._fill(pos, 16)
            if pos >= end:
                raise Truncated
            op = buf[pos]
            pos += 1
            if op == 0x6A:  # LONG_BINGET
                if pos + 4 > end:
                    raise Truncated
                obj = memo[from_bytes(buf[pos : pos + 4], "little")]
                pos += 4
                if type(obj) is _Gone:
                    raise Fallback("a reference to a dropped object")
                push(obj)
            elif op == 0x68:  # BINGET
                if pos + 1 > end:
                    raise Truncated
                obj = memo[buf[pos]]
                pos += 1
                if type(obj) is _Gone:
                    raise Fallback("a reference to a dropped object")
                push(obj)
            elif op == MEMOIZE:
                if len(stack) <= (marks[-1] if marks else 0):
                    raise Fallback("stack underflow")
                obj = stack[-1]
                if type(obj) is str:
                    str_index.setdefault(id(obj), len(memo))
                memo.append(obj)
            elif op == 0x8C:  # SHORT_BINUNICODE
                if pos + 1 > end:
                    raise Truncated
                n = buf[pos]
                if pos + 1 + n > end:
                    raise Truncated
                push(str(buf[pos + 1 : pos + 1 + n], "utf-8", "surrogatepass"))
                pos += 1 + n
            elif op == 0x7D:  # EMPTY_DICT: maybe a trace event
                m = marks[-1] if marks else 0
                sink = stack[m - 1] if m else None
                if type(sink) is TraceSink and len(stack) - m <= 1:
                    if len(stack) > m:  # the event read before this one is complete
                        self._add_event(sink, stack.pop(), item_memo)
                    self.buf = buf
                    start = self.base + pos - 1
                    after = self._events(sink, pos - 1)
                    buf, end = self.buf, len(self.buf)
                    if self.base + after != start:  # read some: go on from there
                        pos = after
                        continue
                    pos = after + 1
                    item_memo = len(memo)
                push({})
            elif op == 0x28:  # MARK
                top = stack[-1] if stack else None
                if top is last_list and not top and len(marks) <= 2 and _trace_slot(stack, marks):
                    stack[-1] = sink = TraceSink()
                    self.sinks.append(sink)
                    for i in range(last_list_memo, len(memo)):
                        if memo[i] is top:
                            memo[i] = GONE
                    last_list = None
                marks.append(len(stack))
            elif op == 0x75:  # SETITEMS
                x = marks.pop()
                if x <= (marks[-1] if marks else 0):
                    raise Fallback("stack underflow")
                if len(stack) > x:
                    if (len(stack) - x) % 2:
                        raise Fallback("odd number of items for SETITEMS")
                    d = stack[x - 1]
                    if type(d) is not dict:
                        raise Fallback("SETITEMS on a non-dict")
                    items = stack[x:]
                    del stack[x:]
                    for i in range(0, len(items), 2):
                        d[items[i]] = items[i + 1]
            elif op == 0x65:  # APPENDS
                x = marks.pop()
                if x <= (marks[-1] if marks else 0):
                    raise Fallback("stack underflow")
                if len(stack) > x:
                    lst = stack[x - 1]
                    items = stack[x:]
                    del stack[x:]
                    if type(lst) is list:
                        lst.extend(items)
                    elif type(lst) is TraceSink:
                        for item in items:
                            self._add_event(lst, item, item_memo)
                        item_memo = len(memo)
                    else:
                        raise Fallback("APPENDS on a non-list")
            elif op == 0x5D:  # EMPTY_LIST
                last_list = []
                last_list_memo = len(memo)
                push(last_list)
            elif op == 0x8A:  # LONG1
                if pos + 1 > end:
                    raise Truncated
                n = buf[pos]
                if pos + 1 + n > end:
                    raise Truncated
                push(from_bytes(buf[pos + 1 : pos + 1 + n], "little", signed=True))
                pos += 1 + n
            elif op == 0x4B:  # BININT1
                if pos + 1 > end:
                    raise Truncated
                push(buf[pos])
                pos += 1
            elif op == 0x4A:  # BININT
                if pos + 4 > end:
                    raise Truncated
                push(from_bytes(buf[pos : pos + 4], "little", signed=True))
                pos += 4
            elif op == 0x4D:  # BININT2
                if pos + 2 > end:
                    raise Truncated
                push(buf[pos] | buf[pos + 1] << 8)
                pos += 2
            elif op == 0x61:  # APPEND
                if len(stack) - 1 <= (marks[-1] if marks else 0):
                    raise Fallback("stack underflow")
                item = stack.pop()
                lst = stack[-1]
                if type(lst) is list:
                    lst.append(item)
                elif type(lst) is TraceSink:
                    self._add_event(lst, item, item_memo)
                    item_memo = len(memo)
                else:
                    raise Fallback("APPEND on a non-list")
            elif op == 0x73:  # SETITEM
                if len(stack) - 2 <= (marks[-1] if marks else 0):
                    raise Fallback("stack underflow")
                d = stack[-3]
                if type(d) is not dict:
                    raise Fallback("SETITEM on a non-dict")
                value = stack.pop()
                d[stack.pop()] = value
            elif op == 0x95:  # FRAME: only says how much follows
                if pos + 8 > end:
                    raise Truncated
                n = from_bytes(buf[pos : pos + 8], "little")
                if n > sys.maxsize:
                    raise Fallback("FRAME length exceeds the system's maximum")
                self.frame_end = max(self.frame_end, self.base + pos + 8 + n)
                pos += 8
            elif op in (0x71, 0x72):  # BINPUT, LONG_BINPUT: only in order
                n = 1 if op == 0x71 else 4
                if pos + n > end:
                    raise Truncated
                if from_bytes(buf[pos : pos + n], "little") != len(memo):
                    raise Fallback("memo stores out of order")
                pos += n
                if len(stack) <= (marks[-1] if marks else 0):
                    raise Fallback("stack underflow")
                obj = stack[-1]
                if type(obj) is str:
                    str_index.setdefault(id(obj), len(memo))
                memo.append(obj)
            elif op == 0x4E:  # NONE
                push(None)
            elif op == 0x88:  # NEWTRUE
                push(True)
            elif op == 0x89:  # NEWFALSE
                push(False)
            elif op == 0x47:  # BINFLOAT
                if pos + 8 > end:
                    raise Truncated
                push(struct.unpack_from(">d", buf, pos)[0])
                pos += 8
            elif op in (0x85, 0x86, 0x87):  # TUPLE1, TUPLE2, TUPLE3
                n = op - 0x84
                if len(stack) - n < (marks[-1] if marks else 0):
                    raise Fallback("stack underflow")
                items = tuple(stack[-n:])
                del stack[-n:]
                push(items)
            elif op == 0x29:  # EMPTY_TUPLE
                push(())
            elif op == 0x74:  # TUPLE
                x = marks.pop()
                items = tuple(stack[x:])
                del stack[x:]
                push(items)
            elif op in (0x58, 0x8D, 0x42, 0x43, 0x8E, 0x96):  # longer strings, bytes
                size = {0x58: 4, 0x8D: 8, 0x42: 4, 0x43: 1, 0x8E: 8, 0x96: 8}[op]
                if pos + size > end:
                    raise Truncated
                n = from_bytes(buf[pos : pos + size], "little")
                pos += size
                if n > self.max_token:
                    raise PickleLimit(
                        limits.token_too_long("a string of the pickle", self.max_token)
                    )
                if pos + n > end:
                    buf, pos, end = self._fill(pos, n)
                    if n > end:
                        raise Truncated
                data = buf[pos : pos + n]
                pos += n
                if op in (0x58, 0x8D):
                    push(str(data, "utf-8", "surrogatepass"))
                else:
                    push(bytearray(data) if op == 0x96 else data)
            elif op == 0x8F:  # EMPTY_SET
                push(set())
            elif op == 0x90:  # ADDITEMS
                x = marks.pop()
                if x <= (marks[-1] if marks else 0):
                    raise Fallback("stack underflow")
                if len(stack) > x:
                    s = stack[x - 1]
                    if type(s) is not set:
                        raise Fallback("ADDITEMS on a non-set")
                    s.update(stack[x:])
                    del stack[x:]
            elif op == 0x91:  # FROZENSET
                x = marks.pop()
                items = frozenset(stack[x:])
                del stack[x:]
                push(items)
            elif op == 0x8B:  # LONG4
                if pos + 4 > end:
                    raise Truncated
                n = from_bytes(buf[pos : pos + 4], "little", signed=True)
                if n < 0:
                    raise Fallback("LONG pickle has negative byte count")
                if n > self.max_token:
                    raise PickleLimit(
                        limits.token_too_long("a number of the pickle", self.max_token)
                    )
                pos += 4
                if pos + n > end:
                    buf, pos, end = self._fill(pos, n)
                    if n > end:
                        raise Truncated
                push(from_bytes(buf[pos : pos + n], "little", signed=True))
                pos += n
            elif op == 0x80:  # PROTO
                if pos + 1 > end:
                    raise Truncated
                if not 4 <= buf[pos] <= 5:  # 2, 3: BINPUTs, which the patterns do not read,
                    raise Fallback("pickle protocol")  # so every event opcode by opcode: slow
                pos += 1
            elif op == 0x2E:  # STOP
                if len(stack) <= (marks[-1] if marks else 0):
                    raise Fallback("stack underflow")
                if self.frame_end > self.base + pos:  # a FRAME announced more than is there
                    need = self.frame_end - self.base
                    buf, pos, end = self._fill(0, need)  # the buffer from its start
                    if end < need:
                        raise Truncated
                return stack[-1]
            else:  # classes, functions, persistent ids, text opcodes...: not plain data
                raise Fallback(f"opcode {op:#x}")

    # -- trace events --------------------------------------------------------------------

    def _add_event(self, sink: TraceSink, event: Any, item_memo: int) -> None:
        """An event read opcode by opcode: its row, and its memo slot dropped."""
        if type(event) is not dict:
            raise Fallback("a trace event that is not a dict")
        self.read_slowly += 1
        memo = self.memo
        for i in range(item_memo, len(memo)):
            if memo[i] is event:
                memo[i] = GONE
        kind = ACTION_KIND.get(event["action"], 0)
        values = np.zeros((1, len(INT_KEYS)), dtype=np.int64)
        present = np.ones((1, len(INT_KEYS)), dtype=bool)
        fid = 0
        if kind == OOM:
            sink.ooms.append(oom_of(event))
            kind = 0
        elif kind:
            time = event.get("time_us")
            values[0] = (
                int_value(event["addr"]),
                int_value(event["size"]),
                int_value(event.get("stream", 0)),
                0 if time is None else int_value(time),
            )
            present[0, INT_KEYS.index("time_us")] = time is not None
            fid = self._frames_id(event.get("frames"))
        kinds = np.array([kind], dtype=np.int8)
        sink.add(kinds, np.array([fid], dtype=np.int32), None, (values, present))
        keys = tuple(map(id, event))
        if keys not in self.seen_keys and len(self.shapes) < MAX_SHAPES:
            self.seen_keys.add(keys)
            shape = learn_shape(event, self.str_index)
            if shape is not None:
                self.shapes.append(shape)

    def _frames_id(self, frames: Any) -> int:
        fid = self.by_id.get(id(frames))
        if fid is None:
            fid = self.by_id[id(frames)] = len(self.frame_lists)
            self.frame_lists.append(frames)  # kept: its id stays its own
        return fid

    def _run_id(self, run: bytes, limit: int) -> tuple[int, tuple[int, ...]] | None:
        """Id of the frame list made of the memo references ``run``, and the FRAMEs in it
        (pairs: offset from its end, length); None when ``run`` is not references and
        FRAMEs, or a reference is not to an object read before the event (memo slot
        ``limit`` on)."""
        found = self.by_run.get(run)
        if found is not None:
            return found
        indices: list[int] = []
        frames: list[int] = []
        i = 0
        while i < len(run):
            k = _leading_long_bingets(run, i)  # most references: numpy reads them
            if k:
                indices += np.frombuffer(run, _LONG_BINGET, k, i)["index"].tolist()
                i += 5 * k
                continue
            op = run[i]
            if op == 0x68 and i + 2 <= len(run):  # BINGET
                indices.append(run[i + 1])
                i += 2
            elif op == 0x95 and i + 9 <= len(run):  # FRAME: only says how much follows
                frames += (len(run) - i, int.from_bytes(run[i + 1 : i + 9], "little"))
                if frames[-1] > sys.maxsize:
                    return None
                i += 9
            else:
                return None
        if indices and max(indices) >= limit:
            return None
        items = SharedFrames(map(self.memo.__getitem__, indices))
        if GONE in items:
            return None
        fid = self._frames_id(items)
        if frames:  # seen once: not kept for later events
            return fid, tuple(frames)
        self.by_run[run] = (fid, ())
        return fid, ()

    def _entry(self, shape: Shape, key: tuple[bytes, ...], limit: int) -> int | None:
        """The entry id (:class:`_Entries`) of an event whose groups ``key`` picks (see
        :class:`Shape`), its dict stored at memo index ``limit``; None when it is not read
        exactly this way: a reference to something not read before the event, an action
        that is not a plain value, an OOM (read opcode by opcode: other keys)... Its frame
        list id is -1 for a list read before (see :meth:`_add_rows`); FRAMEs inside are
        pairs (offset from the event's end, length)."""
        memo = self.memo
        values, made = key[:-1], key[-1]
        if any(v[0] != 0x8C and ref_index(v) >= limit for v in values if v):
            return None
        action = memo[ref_index(values[0])]
        if type(action) not in (str, int, float, bool, bytes):
            return None
        kind = ACTION_KIND.get(action, 0)
        if kind == OOM:
            return None
        store: list[Any] = [GONE]
        for raw in values[1:]:
            if raw and raw[0] == 0x8C:  # SHORT_BINUNICODE MEMOIZE
                try:
                    store.append(str(raw[2:-1], "utf-8", "surrogatepass"))
                except UnicodeDecodeError:
                    return None
        fid = 0
        frames: tuple[int, ...] = ()
        if made:  # MEMOIZE, then MARK references APPENDS | reference APPEND | nothing
            found = self._run_id(made[2:-1] if made[1:2] == b"(" else made[1:-1], limit)
            if found is None:
                return None
            fid, frames = found  # the run is followed by APPENDS, SETITEMS
            frames = tuple(x + 2 if k % 2 == 0 else x for k, x in enumerate(frames))
            store.append(self.frame_lists[fid])
        elif shape.has_frames:
            fid = -1
        return self.info.add(kind, fid, tuple(store), frames, bool(made))

    def _events(self, sink: TraceSink, pos: int) -> int:
        """Reads the events from ``pos`` on while a shape matches them, a window of bytes
        at a time, with no Python code per event when they are like those read before;
        returns the position of the first thing not read (an event to read opcode by
        opcode, the end of the list...). Windows are twice what was read between the last
        two such events, so that little is matched for nothing where they are frequent."""
        buf = self.buf
        end = len(buf)
        while self.shapes:
            if end - pos < WINDOW and not self.eof:
                buf, pos, end = self._fill(pos, WINDOW)
            stop = min(end, pos + self.window)
            for shape in self.shapes:
                rows = shape.findall(buf, pos, stop)  # the events, then the rest (last group)
                if rows and not rows[0][-1]:
                    break
            else:  # an event read otherwise
                break
            cut = bool(rows[-1][-1])
            if cut:
                rows.pop()
            taken = self._window(sink, shape, rows, self.base + pos)
            pos += sum(map(len, map(WHOLE, rows[:taken])))
            if taken < len(rows):
                break
            if not cut:  # the window ended with an event
                self.window = min(WINDOW, 2 * self.window)
        read = self.base + pos - self.since  # since the last event read otherwise
        if read:
            self.window = min(WINDOW, max(MIN_WINDOW, 2 * read))
            self.since += read
        return pos

    def _window(self, sink: TraceSink, shape: Shape, rows: list[tuple[bytes, ...]], at: int) -> int:
        """Adds the events ``rows`` (consecutive, of one shape, from file offset ``at``) up
        to the first one that is not read exactly this way; returns how many were added.
        Each event's entry (see :meth:`_entry`) is cached by its key: a long trace repeats
        a few thousand."""
        memo = self.memo
        cache = shape.entries
        stores = self.info.stores.__getitem__
        base = len(memo)
        keys = list(map(shape.key, rows))
        entries: list[Any] = list(map(cache.get, keys))
        done = 0  # rows whose memo entries are stored
        while None in entries[done:]:  # new: checked against the memo as it is then
            i = entries.index(None, done)
            memo.extend(chain.from_iterable(map(stores, entries[done:i])))
            done = i
            entry = self._entry(shape, keys[i], len(memo))
            if entry is None:
                return self._add_rows(sink, shape, rows[:i], entries[:i], base, at)
            if len(cache) > MAX_CACHED:
                cache.clear()
            if not self.info.framed[entry]:  # one with a FRAME inside is not seen again
                cache[keys[i]] = entry
            entries[i] = entry
        memo.extend(chain.from_iterable(map(stores, entries[done:])))
        return self._add_rows(sink, shape, rows, entries, base, at)

    def _add_rows(
        self,
        sink: TraceSink,
        shape: Shape,
        rows: list[tuple[bytes, ...]],
        entries: list[Any],
        base: int,
        at: int,
    ) -> int:
        """Gives the sink the events ``rows`` (from file offset ``at``, their memo entries
        stored from ``base`` on) up to the first whose reference to a frame list read
        before does not point at one read before it (the memo is cut back to that event);
        returns how many."""
        n = len(rows)
        info = self.info
        eid = np.fromiter(entries, dtype=np.int64, count=n)
        kind, fid = info.kind[eid], info.fid[eid]
        sizes, made = info.size[eid], info.made[eid]
        starts = base + np.cumsum(sizes) - sizes  # where each event's dict is stored
        slots = self.slots
        slots.put(starts[made] + sizes[made] - 1, fid[made])  # its list: last stored
        shared = np.nonzero(fid < 0)[0]
        if len(shared):
            refs = decode_refs(list(map(shape.shared, compress(rows, fid < 0))))
            bad = refs >= starts[shared]
            found = slots.take(np.where(bad, 0, refs))
            for k in np.nonzero((found < 0) & ~bad)[0].tolist():
                obj = self.memo[int(refs[k])]  # not a list of an event: a list read before
                if type(obj) is _Gone:
                    bad[k] = True
                else:
                    found[k] = self._frames_id(obj)
                    slots.put(refs[k : k + 1], found[k : k + 1])
            if bad.any():
                k = int(np.argmax(bad))
                n = int(shared[k])
                del self.memo[int(starts[n]) :]
                slots.forget(int(starts[n]))
                shared, found = shared[:k], found[:k]
            fid[shared] = found
        framed = np.nonzero(info.framed[eid[:n]])[0]
        if len(framed):  # FRAMEs inside events: what they announce
            done = 0
            for i in framed.tolist():
                at += sum(map(len, map(WHOLE, rows[done : i + 1])))  # the event's end
                done = i + 1
                frames = info.frames[entries[i]]
                for k in range(0, len(frames), 2):
                    start = at - frames[k]
                    self.frame_end = max(self.frame_end, start + 9 + frames[k + 1])
        sink.add(kind[:n], fid[:n], shape, list(map(shape.head, rows[:n])))
        return n


_LONG_BINGET = np.dtype([("op", "u1"), ("index", "<u4")])


def _leading_long_bingets(run: bytes, i: int) -> int:
    """How many LONG_BINGETs ``run`` has one after the other from ``i``."""
    ops = run[i::5]
    k = len(ops) - len(ops.lstrip(b"j"))
    return min(k, (len(run) - i) // 5)


class _Slots:
    """Frame list id of the memo slots that hold a trace event's frame list (-1: none
    known), so that references to them are resolved in bulk."""

    def __init__(self) -> None:
        self.ids = np.full(1 << 16, -1, dtype=np.int32)

    def put(self, index: np.ndarray, fid: np.ndarray) -> None:
        if len(index):
            need = int(index.max()) + 1
            if need > len(self.ids):
                grown = np.full(max(need, 2 * len(self.ids)), -1, dtype=np.int32)
                grown[: len(self.ids)] = self.ids
                self.ids = grown
            self.ids[index] = fid

    def forget(self, start: int) -> None:
        """The memo is cut back to ``start``: what was stored from there is gone."""
        self.ids[start:] = -1

    def take(self, index: np.ndarray) -> np.ndarray:
        out = np.full(len(index), -1, dtype=np.int32)
        inside = index < len(self.ids)
        out[inside] = self.ids[index[inside]]
        return out


class _Entries:
    """What decides an event's row but for its integers and a frame list read before
    (:meth:`_Machine._entry`), by entry id: kind, frame list id, memo entries (and how
    many), whether a list is made, FRAMEs inside. Columns, looked up for many events at
    once."""

    def __init__(self) -> None:
        self.stores: list[tuple[Any, ...]] = []
        self.frames: list[tuple[int, ...]] = []
        self.kind = np.zeros(1024, dtype=np.int8)
        self.fid = np.zeros(1024, dtype=np.int32)
        self.size = np.zeros(1024, dtype=np.int64)
        self.made = np.zeros(1024, dtype=bool)
        self.framed = np.zeros(1024, dtype=bool)

    def add(
        self, kind: int, fid: int, store: tuple[Any, ...], frames: tuple[int, ...], made: bool
    ) -> int:
        i = len(self.stores)
        if i == len(self.kind):
            for name in ("kind", "fid", "size", "made", "framed"):
                old = getattr(self, name)
                setattr(self, name, np.concatenate([old, np.zeros_like(old)]))
        self.kind[i], self.fid[i], self.size[i] = kind, fid, len(store)
        self.made[i], self.framed[i] = made, bool(frames)
        self.stores.append(store)
        self.frames.append(frames)
        return i
