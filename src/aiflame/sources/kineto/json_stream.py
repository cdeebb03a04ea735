"""Streaming reader for Chrome-trace JSON (PyTorch profiler / Kineto traces).

A trace is ``{"schemaVersion": ..., "traceEvents": [ {...}, {...} ], ...}`` (or a bare
array of events) and can be gigabytes. Loading it whole with ``json.load`` costs about ten
times its size in memory, so this reader walks the top-level object itself and hands the
``traceEvents`` array over in batches: it cuts the buffered text after an event's closing
``}`` and parses that slice with orjson as one JSON array. A cut is only accepted when the
slice parses, and a slice cut anywhere but between two top-level events cannot parse
(unbalanced brackets or an unterminated string), so batches are always whole events.
Memory stays at one buffer (a few MB) plus the batch being handed over.

Events are decoded with msgspec into a caller-given type (a ``msgspec.Struct`` naming only
the fields the caller reads): unknown fields are skipped without building Python objects,
which makes decoding about three times faster than orjson building whole dicts. An event
whose fields have unexpected types makes its batch fall back to plain dicts and values,
which the caller handles one by one, so odd events never abort the load.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, BinaryIO

import msgspec

from aiflame.errors import InputError
from aiflame.sources import limits

CHUNK = 4 << 20  # bytes read at a time; a batch is about this size
_WS = re.compile(rb"[ \t\r\n]*")
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_STRUCT = re.compile(rb'[\[\]{}"]')
_SCALAR = re.compile(rb"[-+0-9.eE]+|true|false|null")
_BOM = b"\xef\xbb\xbf"
_MAX_FAILED_CUTS = 4  # cut candidates tried before reading more data
_ERROR_AT = re.compile(r"\(byte (\d+)\)")
_TOO_DEEP = "JSON nested more deeply than the decoder allows"


class TraceStream:
    """Iterate :meth:`batches` of event dicts; :attr:`meta` holds the other top-level keys.

    ``meta`` is complete only once the batches are exhausted (keys may follow the events).
    ``bytes_read`` counts decompressed bytes, for progress and error positions.
    """

    def __init__(
        self,
        stream: BinaryIO,
        path: str,
        event_type: Any = Any,
        chunk: int = CHUNK,
    ) -> None:
        self._f = stream
        self._events_decoder = msgspec.json.Decoder(list[event_type])  # type: ignore[valid-type]
        self.path = path
        self._chunk = chunk
        self._buf = b""
        self._pos = 0
        self._base = 0  # absolute offset of _buf[0]
        self._eof = False
        self.meta: dict[str, Any] = {}
        self.bare_array = False
        self._last_error_at: int | None = None

    # -- buffer ----------------------------------------------------------------------------
    def _fill(self, at_least: int = 0) -> bool:
        """Append the next chunk (``at_least`` bytes, when more: what is pending, so that
        rescans of a long value stay linear); False at end of input."""
        if self._eof:
            return False
        data = self._f.read(max(self._chunk, at_least))
        if not data:
            self._eof = True
            return False
        if self._pos:
            self._base += self._pos
            self._buf = self._buf[self._pos :] + data
            self._pos = 0
        else:
            self._buf += data
        return True

    def _peek(self) -> bytes:
        """The next non-blank byte (not consumed), b'' at end of input."""
        while True:
            self._pos = _WS.match(self._buf, self._pos).end()  # type: ignore[union-attr]
            if self._pos < len(self._buf) or not self._fill():
                return self._buf[self._pos : self._pos + 1]

    def _error(self, message: str, offset: int | None = None) -> InputError:
        at = self._base + (self._pos if offset is None else offset)
        return InputError(self.path, f"invalid JSON trace at byte {at:,}: {message}")

    def _expect(self, char: bytes) -> None:
        got = self._peek()
        if got != char:
            found = f"'{got.decode(errors='replace')}'" if got else "end of file"
            raise self._error(f"expected '{char.decode()}', found {found}")
        self._pos += 1

    # -- small values (metadata) -------------------------------------------------------------
    def _value_end(self, start: int) -> int | None:
        """End offset of the JSON value at ``start``, or None if the buffer ends first."""
        buf = self._buf
        c = buf[start : start + 1]
        if c == b'"':
            m = _STRING.match(buf, start)
            return m.end() if m else None
        if c in (b"{", b"["):
            depth, i = 0, start
            while True:
                m = _STRUCT.search(buf, i)
                if m is None:
                    return None
                ch, i = m.group(), m.end()
                if ch == b'"':
                    s = _STRING.match(buf, m.start())
                    if s is None:
                        return None
                    i = s.end()
                elif ch in (b"{", b"["):
                    depth += 1
                else:
                    depth -= 1
                    if depth == 0:
                        return i
        m = _SCALAR.match(buf, start)
        if m is None:
            raise self._error(f"unexpected character '{c.decode(errors='replace')}'", start)
        return m.end() if m.end() < len(buf) or self._eof else None

    def _read_value(self) -> Any:
        if not self._peek():
            raise self._error("unexpected end of file")
        while (end := self._value_end(self._pos)) is None:
            self._check_pending("a top-level value")
            if not self._fill(len(self._buf) - self._pos):
                raise self._error("unexpected end of file (truncated trace?)")
        text = self._buf[self._pos : end]
        try:
            value = msgspec.json.decode(text)
        except msgspec.DecodeError as e:
            raise self._error(str(e)) from None
        except RecursionError:
            raise self._error(_TOO_DEEP) from None
        self._pos = end
        return value

    # -- top level --------------------------------------------------------------------------
    def batches(self) -> Iterator[list[Any]]:
        """Lists of parsed events, in file order."""
        self._fill()
        if self._buf.startswith(_BOM):
            self._pos = len(_BOM)
        first = self._peek()
        if first == b"[":
            self.bare_array = True
            self._pos += 1
            yield from self._events()
            return
        if first != b"{":
            raise self._error("not a JSON object or array")
        self._pos += 1
        if self._peek() == b"}":
            self._pos += 1
            return
        while True:
            key = self._read_value()
            if not isinstance(key, str):
                raise self._error("expected an object key")
            self._expect(b":")
            if key == "traceEvents":
                self._expect(b"[")
                yield from self._events()
            else:
                self.meta[key] = self._read_value()
            c = self._peek()
            self._pos += 1
            if c == b"}":
                return
            if not c:
                raise self._error("file ends before the closing '}' (truncated trace?)")
            if c != b",":
                raise self._error("expected ',' or '}' between top-level keys", self._pos - 1)

    def _events(self) -> Iterator[list[Any]]:
        while True:
            c = self._peek()
            if c == b"]":
                self._pos += 1
                return
            if not c:
                raise self._error("file ends inside traceEvents (truncated trace?)")
            yield self._batch()
            c = self._peek()
            self._pos += 1
            if c == b"]":
                return
            if not c:
                raise self._error("file ends inside traceEvents (truncated trace?)")
            if c != b",":
                raise self._error("expected ',' or ']' between events", self._pos - 1)

    def _batch(self) -> list[Any]:
        """Parse the longest run of whole events in the buffer (reading more if needed)."""
        while len(self._buf) - self._pos < self._chunk and self._fill():
            pass
        end = len(self._buf)
        failed = 0
        rescanned_at_eof = self._eof
        broken_inside = False  # a slice failed before its end: the text itself is bad
        while True:
            cut = self._buf.rfind(b"}", self._pos, end)
            if cut < 0 and broken_inside:
                raise self._explain()  # more data cannot mend it; do not read on
            if cut < 0 or failed >= _MAX_FAILED_CUTS:
                self._check_pending("an event")
                if self._fill(len(self._buf) - self._pos) or not rescanned_at_eof:
                    # More data, or the end of input is now known: the last '}' may do.
                    rescanned_at_eof = self._eof
                    end, failed = len(self._buf), 0
                    continue
                return self._tail()
            after = _WS.match(self._buf, cut + 1).end()  # type: ignore[union-attr]
            nxt = self._buf[after : after + 1]
            if nxt not in (b",", b"]") and not (not nxt and self._eof):
                end = cut
                continue
            events = self._decode(self._buf[self._pos : cut + 1])
            if events is not None:
                self._pos = cut + 1
                return events
            failed += 1
            # The slice is broken at or before where the decoder stopped (e.g. just after
            # the array's closing ']' when other keys follow): look for a cut before that.
            stop = self._last_error_at
            end = min(cut, self._pos + stop) if stop is not None else cut
            broken_inside = stop is not None and self._pos + stop < cut

    def _check_pending(self, what: str) -> None:
        """One event or value is held whole until it parses: it may be only so long."""
        limit = limits.max_token()
        if len(self._buf) - self._pos > limit:
            raise self._error(limits.token_too_long(what, limit))

    def _tail(self) -> list[Any]:
        """At end of input: the rest of the array when its last items are not objects."""
        end = len(self._buf)
        for _ in range(_MAX_FAILED_CUTS):
            close = self._buf.rfind(b"]", self._pos, end)
            if close < 0:
                break
            events = self._decode(self._buf[self._pos : close])
            if events is not None:
                self._pos = close
                return events
            end = close
        raise self._explain()

    def _decode(self, body: bytes) -> list[Any] | None:
        """``body`` decoded as the inside of a JSON array, or None if it is not one.

        On failure ``_last_error_at`` is the offset in ``body`` where decoding stopped.
        """
        text = b"[" + body + b"]"
        self._last_error_at = None
        try:
            return self._events_decoder.decode(text)
        except msgspec.ValidationError:
            pass  # valid JSON, but some event has fields of unexpected types
        except RecursionError:
            raise self._error(_TOO_DEEP) from None
        except msgspec.DecodeError as e:
            if "utf-8" not in str(e).lower():
                m = _ERROR_AT.search(str(e))
                self._last_error_at = max(0, int(m.group(1)) - 1) if m else None
                return None
            # Invalid UTF-8 inside a name: keep the events, with the bad bytes replaced.
            text = text.decode("utf-8", errors="replace").encode("utf-8")
            try:
                return self._events_decoder.decode(text)
            except msgspec.ValidationError:
                pass
            except msgspec.DecodeError:
                return None
        try:
            return msgspec.json.decode(text)  # plain objects: the caller copes with them
        except msgspec.DecodeError:
            return None
        except RecursionError:
            raise self._error(_TOO_DEEP) from None

    def _explain(self) -> InputError:
        """The error for events that cannot be parsed, with the decoder's reason and position."""
        try:
            msgspec.json.decode(b"[" + self._buf[self._pos :] + b"]")
        except msgspec.DecodeError as e:
            message = str(e)
            if "truncated" in message.lower():
                return self._error(
                    "file ends inside traceEvents (truncated trace?)", len(self._buf)
                )
            m = re.search(r"\s*\(byte (\d+)\)", message)
            if m is None:
                return self._error(message)
            offset = self._pos + int(m.group(1)) - 1  # -1: the '[' put in front
            if offset >= len(self._buf):  # the error is at the ']' put at the end
                return self._error("file ends inside traceEvents (truncated trace?)", offset)
            return self._error(message.replace(m.group(0), ""), offset)
        return self._error("cannot split traceEvents into events")
