"""Collapse ``perf script`` text into folded stacks, exactly as FlameGraph's
``stackcollapse-perf.pl`` does (commit 41fee1f; ``--inline``/``--srcline`` excepted).

The state machine follows the Perl script, quirks included, because users compare our
output with it: a sample is only counted when a blank line ends it (a file that does not end
with one loses its last sample), ``#`` lines are skipped anywhere, only the first event type
is kept unless ``event_filter`` names one, the period (when present) is the sample's weight,
and an event line that comes without a blank line before it continues the open stack. The
per-line rules are in :mod:`aiflame.sources.perf.rules`.

Speed. Stack lines repeat, but their addresses and ``+0x`` offsets vary, so a chunk of text
is first normalised with two plain regex substitutions at C speed: the blanks and address
that start a stack line become ``\\x01`` and an offset just before `` (`` becomes ``\\x02``.
The normalised lines are looked up in a cache all at once (``map``), and only the misses
(event lines, blank lines, new functions) run Python code. A normalised line is only
trusted when its shape proves that every raw line with that normal form gives the same
frames (see :meth:`Collapser._from_key`); anything else is handled from the raw line.
Caches are bounded, so memory does not grow with the input, only with the distinct stacks.

Work on text decoded as Latin-1 to be byte-exact (Perl reads bytes, so its ``\\s``, ``\\w``,
``.`` and sort order are per byte); :func:`collapse_stream` does that.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from itertools import compress, count, islice, repeat
from operator import is_
from typing import BinaryIO, cast

from aiflame.sources.perf.rules import (
    EVENT,
    HEADER,
    PERIOD,
    TIME,
    WS,
    PerfOptions,
    event_fields,
    namer,
    parse_stack_line,
    root_frame,
    strip_offset,
)

_ADDRESS = re.compile(r"\n[ \t]+[0-9a-fA-F]+ ")  # -> "\n\x01"
_OFFSET = re.compile(r"\+0x[0-9a-f]+ \(")  # -> "\x02 ("

# Bounds of the caches (entries); a full cache is emptied and refilled.
LINE_CACHE_LIMIT = 200_000
FUNC_CACHE_LIMIT = 500_000
CHUNK_BYTES = 256 << 10

Cache = dict[str, str]


class Collapser:
    """The state machine of stackcollapse-perf.pl. Feed it text, then ask for :meth:`result`."""

    def __init__(self, options: PerfOptions | None = None) -> None:
        self.options = options or PerfOptions()
        self.event_filter = self.options.event_filter
        self.counts: dict[str, dict[str, int]] = {}  # root frame -> rest of stack -> total
        self.comms: dict[str, tuple[str, str, str]] = {}  # root frame -> (comm, pid, tid)
        self.unrecognized = 0  # lines that are neither events nor stack frames
        self.filtered = 0  # event lines of other event types
        self.samples = 0  # event lines of the event collapsed: the samples read
        self.periods = False  # whether samples carried a period
        self._addrs = self.options.addrs
        self._name = namer(self.options)
        self._pname: str | None = None  # root frame of the open sample, None between samples
        self._period = 1
        self._java = False  # whether the open sample is a Java one (names tidied further)
        self._pending: list[str] = []  # fragments of the open sample from earlier chunks
        # With options.times: (root frame, rest of stack, period, (secs, pid, tid)) of each
        # sample in input order, and that thread-and-time of the open sample.
        self.timed: list[tuple[str, str, int, tuple[str, str, str]]] = []
        self._when: tuple[str, str, str] = ("", "", "")
        # Line -> ";f1;f2" (the frames it adds, in line order) or "" (none), for normalised
        # and for raw lines, each (non-Java, Java). Only stack lines are cached.
        self._norm: tuple[Cache, Cache] = ({}, {})
        self._raw: tuple[Cache, Cache] = ({}, {})
        self._funcs: tuple[dict[tuple[str, ...], str], dict[tuple[str, ...], str]] = ({}, {})
        # The chunk being processed.
        self._text = ""
        self._keys: list[str] = []
        self._raw_lines: list[str] | None = None
        self._normalized = False

    # -- input ----------------------------------------------------------------------------------
    def feed(self, lines: Iterable[str]) -> None:
        """Process lines (without their newline), keeping state across calls."""
        it = iter(lines)
        while batch := list(islice(it, 1 << 16)):
            self.feed_text("\n".join(batch))

    def feed_text(self, text: str) -> None:
        """Process complete lines joined by ``\\n`` (no newline after the last one)."""
        self._text = text
        self._raw_lines = None
        self._normalized = "\x01" not in text and "\x02" not in text
        if self._normalized:
            norm = _OFFSET.sub("\x02 (", _ADDRESS.sub("\n\x01", "\n" + text))
            keys = norm.split("\n")
            del keys[0]
        else:  # the marks occur in the input: use raw lines as keys, in their own caches
            keys = text.split("\n")
        self._keys = keys
        cache = self._norm[0] if self._normalized else self._raw[0]
        frs: list[str | None] = list(map(cache.get, keys))
        self._walk(keys, frs)

    def _walk(self, keys: list[str], frs: list[str | None]) -> None:
        """Run the state machine over the lines whose fragment is not known yet.

        The common cases (blank line, usual event line, non-Java sample) are inline, with
        the sample's state in local variables: they run once per sample, which is often
        enough to matter. The general cases go through methods, with the state synced.
        """
        start = 0  # first line of the open sample in this chunk (if one is open)
        normalized = self._normalized
        counts = self.counts
        comms = self.comms
        event_match = EVENT.match
        header_match = HEADER.match
        opts = self.options
        plain = not (opts.pid or opts.tid)  # the root frame is the comm
        pname, period, java = self._pname, self._period, self._java
        event_filter, periods = self.event_filter, self.periods
        timed = self.options.times
        when = self._when
        # The lines to visit, found at C speed.
        misses = compress(count(), map(is_, frs, repeat(None)))
        for i in misses:
            key = keys[i]
            if not key:  # a blank line ends the sample
                if pname is None:
                    continue
                if java or self._pending:
                    self._pname, self._period, self._java = pname, period, java
                    self._when = when
                    self._flush(self._segment(frs, start, i))
                else:
                    fragments = frs[start:i]
                    fragments.reverse()  # lines go leaf first; stacks are written root first
                    rest = "".join(cast(list[str], fragments))  # misses are filled
                    by_rest = counts.get(pname)
                    if by_rest is None:
                        by_rest = counts[pname] = {}
                    by_rest[rest] = by_rest.get(rest, 0) + period
                    if timed:
                        self.timed.append((pname, rest, period, when))
                pname = None
                continue
            first = key[0]
            if first == "#":
                frs[i] = ""
                continue
            if first not in WS and (first != "\x01" or not normalized):
                # Only lines that start with a non-blank can be event lines.
                line = self._line(i) if normalized and "\x02" in key else key
                h = header_match(line) if pname is None else None
                if h:  # the usual event line, between samples
                    comm, pid, tid, secs, per, event = h.groups()
                    if event != event_filter:
                        if event_filter:
                            self.filtered += 1
                            continue
                        event_filter = self.event_filter = event
                    self.samples += 1
                    if not tid or tid == "0":  # Perl: "if (not $tid)"
                        tid, pid = pid, "?"
                    if not per or per == "0":
                        period = 1
                    else:
                        period = int(per)
                        periods = True
                    pname = comm if plain else root_frame(comm, pid, tid, opts)
                    if pname not in comms:
                        comms[pname] = (comm, pid, tid)
                    java = pname.startswith("java")
                    if timed:
                        when = (secs, pid, tid)
                    start = i + 1
                    continue
                m = event_match(line)
                if m:
                    frs[i] = ""
                    self._pname, self._period, self._java = pname, period, java
                    self.event_filter, self.periods = event_filter, periods
                    self._when = when
                    if self._event(line, m):
                        if pname is not None:  # no blank line before: keep the frames so far
                            self._pending.extend(self._segment(frs, start, i, java))
                        start = i + 1
                    pname, period, java = self._pname, self._period, self._java
                    event_filter, periods = self.event_filter, self.periods
                    when = self._when
                    continue
            frag = None
            if normalized and first == "\x01":
                frag = self._from_key(key, False)
            if frag is None:
                frag = self._stack(i, False)
            if frag is None:
                self.unrecognized += 1  # Perl warns "Unrecognized line"
                frs[i] = ""
            else:
                frs[i] = frag
        self._pname, self._period, self._java = pname, period, java
        self.event_filter, self.periods = event_filter, periods
        self._when = when
        if pname is not None:
            self._pending.extend(self._segment(frs, start, len(keys)))

    def _line(self, i: int) -> str:
        """The raw text of line ``i`` of the chunk."""
        if not self._normalized:
            return self._keys[i]
        if self._raw_lines is None:
            self._raw_lines = self._text.split("\n")
        return self._raw_lines[i]

    # -- stack lines ----------------------------------------------------------------------------
    def _segment(self, frs: list, a: int, b: int, java: bool | None = None) -> list[str]:
        """Fragments of lines a..b of the open sample, named for its Java-ness."""
        if not (self._java if java is None else java):
            return frs[a:b]
        cache = self._norm[1] if self._normalized else self._raw[1]
        out: list = list(map(cache.get, self._keys[a:b]))
        for j, frag in enumerate(out):
            if frag is None:
                # A line that adds no frame adds none for Java either (events, comments too).
                out[j] = (self._stack(a + j, True) or "") if frs[a + j] else ""
        return out

    def _stack(self, i: int, java: bool) -> str | None:
        """Fragment of line ``i`` (not an event, comment or blank line), or None if it is
        not a stack line either. Caches it."""
        key = self._keys[i]
        if self._normalized:
            if key[0] == "\x01":
                frag = self._from_key(key, java)
                if frag is not None:
                    return frag
                line = self._line(i)
            elif "\x02" in key:
                line = self._line(i)
            else:
                line = key  # untouched by the normalisation
        else:
            line = key
        parsed = parse_stack_line(line)
        if parsed is None:
            return None
        pc, rawfunc, mod = parsed
        frag = self._frames(pc, strip_offset(rawfunc), mod, java)
        if line is key:  # a raw line is its own key; others may not be trusted
            self._store((self._norm if self._normalized else self._raw)[java], key, frag)
        return frag

    def _from_key(self, key: str, java: bool) -> str | None:
        """Fragment of a normalised stack line, when its shape allows; else None.

        ``key`` is ``"\\x01" + Y'`` where the raw line was ``[ \\t]+ ADDR " " Y`` and Y' is Y
        with ``"+0xHEX ("`` replaced by ``"\\x02 ("``. If Y' is ``F [\\x02] " (" M ")"`` with
        `` (`` the last one, F non-empty, not starting with a blank and without ``\\x02``,
        then every such Y was ``F ["+0x" HEX] " (" M ")"``: Perl takes ADDR as the address,
        F plus the offset as the function (the last " (" followed by a ")"), strips the
        offset, and gets F and module M, whatever ADDR and HEX were.
        """
        if key[-1] != ")":
            return None
        p = key.rfind(" (")
        if p < 2:
            return None
        func = key[1:p]
        if func[-1] == "\x02":
            func = func[:-1]
        if not func or func[0] in WS or "\x02" in func:
            return None
        if self._addrs and "[unknown]" in func:
            return None  # the address is part of the name
        frag = self._name("", func, key[p + 2 : -1], java)
        cache = self._norm[java]
        if len(cache) >= LINE_CACHE_LIMIT:
            cache.clear()
        cache[key] = frag
        return frag

    def _frames(self, pc: str, func: str, mod: str, java: bool) -> str:
        """Fragment of a function (offset stripped) in a module, cached."""
        key: tuple[str, ...] = (func, mod)
        if self._addrs and "[unknown]" in func:
            key = (func, mod, pc)
        funcs = self._funcs[java]
        frag = funcs.get(key)
        if frag is None:
            frag = self._name(pc, func, mod, java)
            if len(funcs) >= FUNC_CACHE_LIMIT:
                funcs.clear()
            funcs[key] = frag
        return frag

    @staticmethod
    def _store(cache: Cache, key: str, frag: str) -> None:
        if len(cache) >= LINE_CACHE_LIMIT:
            cache.clear()
        cache[key] = frag

    # -- samples --------------------------------------------------------------------------------
    def _event(self, line: str, m: re.Match[str]) -> bool:
        """Start a sample from an event line; False if its event type is filtered out.
        (The usual case is inline in :meth:`_walk`; this is the general one.)"""
        comm, pid, tid = event_fields(m)
        period = ""
        pm = PERIOD.search(line)
        if pm:
            period = pm.group(1) or ""
            event = pm.group(2)
            if not self.event_filter:
                self.event_filter = event
            elif event != self.event_filter:
                self.filtered += 1
                return False  # the open sample, if any, stays open (as in Perl)
        self.samples += 1
        if not period or period == "0":
            self._period = 1
        else:
            self._period = int(period)
            self.periods = True
        pname = root_frame(comm, pid, tid, self.options)
        self._pname = pname
        if pname not in self.comms:
            self.comms[pname] = (comm, pid, tid)
        self._java = pname.startswith("java")
        if self.options.times:
            tm = TIME.search(line)
            self._when = (tm.group(1) if tm else "", pid, tid)
        return True

    def _flush(self, fragments: list[str]) -> None:
        pname = self._pname
        assert pname is not None
        if self._pending:
            fragments = self._pending + fragments
            self._pending = []
        fragments.reverse()  # lines go leaf first; stacks are written root first
        rest = "".join(fragments)
        by_rest = self.counts.get(pname)
        if by_rest is None:
            by_rest = self.counts[pname] = {}
        by_rest[rest] = by_rest.get(rest, 0) + self._period
        if self.options.times:
            self.timed.append((pname, rest, self._period, self._when))
        self._pname = None

    # -- results --------------------------------------------------------------------------------
    @property
    def open_at_end(self) -> bool:
        """Whether input ended inside a sample (no blank line after it): Perl drops it."""
        return self._pname is not None

    def merge(self, other: Collapser) -> None:
        """Add the samples of ``other``, which collapsed a later part of the same input
        (starting just after a blank line) with the same options and event filter."""
        for pname, by_rest in other.counts.items():
            mine = self.counts.setdefault(pname, {})
            for rest, value in by_rest.items():
                mine[rest] = mine.get(rest, 0) + value
        for pname, ids in other.comms.items():
            self.comms.setdefault(pname, ids)
        self.unrecognized += other.unrecognized
        self.filtered += other.filtered
        self.samples += other.samples
        self.timed.extend(other.timed)  # ``other`` is the later part: order kept
        self._pname = other._pname  # the later part decides how the input ended
        self.periods = self.periods or other.periods

    def drop_caches(self) -> None:
        """Free the caches (results and state stay)."""
        self._norm = ({}, {})
        self._raw = ({}, {})
        self._funcs = ({}, {})
        self._text = ""
        self._keys = []
        self._raw_lines = None

    def __getstate__(self) -> dict[str, object]:
        # Sent between processes: results and state, without caches or the namer closure.
        self.drop_caches()
        state = dict(self.__dict__)
        del state["_name"]
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._name = namer(self.options)

    def sorted_stacks(self) -> list[tuple[str, int]]:
        """(folded stack, total) in the order stackcollapse-perf.pl prints them."""
        counts = self.counts
        if any(";" in pname for pname in counts):
            # A root frame with ";" in it could spell another root's stack: merge by text.
            merged: dict[str, int] = {}
            for pname, by_rest in counts.items():
                for rest, value in by_rest.items():
                    key = pname + rest
                    merged[key] = merged.get(key, 0) + value
            items = list(merged.items())
        else:
            items = [(p + rest, v) for p, by_rest in counts.items() for rest, v in by_rest.items()]
        items.sort()
        return items

    def result(self) -> dict[str, int]:
        """Folded stack -> total, sorted as stackcollapse-perf.pl prints them."""
        return dict(self.sorted_stacks())


def _chomp(lines: Iterable[str]) -> Iterator[str]:
    for line in lines:
        yield line[:-1] if line.endswith("\n") else line


def collapse(lines: Iterable[str], options: PerfOptions | None = None) -> dict[str, int]:
    """Folded stacks of ``perf script`` lines (with or without their ``\\n``), sorted."""
    c = Collapser(options)
    c.feed(_chomp(lines))
    return c.result()


def iter_chunks(f: BinaryIO, chunk_bytes: int = CHUNK_BYTES) -> Iterator[str]:
    """Complete lines of a byte stream, decoded as Latin-1, a few megabytes at a time,
    joined by ``\\n`` without a final one (so Perl's lines are exactly ``split("\\n")``)."""
    parts: list[str] = []  # the line read so far (pieces: a long line is joined once)
    while True:
        chunk = f.read(chunk_bytes)
        if not chunk:
            break
        text = chunk.decode("latin-1")
        cut = text.rfind("\n")
        if cut < 0:
            parts.append(text)  # a line longer than a chunk: keep reading
            continue
        parts.append(text[:cut])
        yield "".join(parts)
        parts = [text[cut + 1 :]]
    carry = "".join(parts)
    if carry:
        yield carry  # the last line had no newline; Perl still reads it


def collapse_stream(f: BinaryIO, options: PerfOptions | None = None) -> Collapser:
    """Run a :class:`Collapser` over a binary stream; its keys are Latin-1 text (bytes)."""
    c = Collapser(options)
    for text in iter_chunks(f):
        c.feed_text(text)
    return c


def folded_text(counts: dict[str, int]) -> str:
    """The lines stackcollapse-perf.pl prints for ``counts``."""
    return "".join(f"{k} {v}\n" for k, v in counts.items())


def write_folded(items: Iterable[tuple[str, int]], out: BinaryIO) -> None:
    """Write (stack, total) pairs as stackcollapse-perf.pl prints them, a batch at a time,
    as bytes (Latin-1 text is the input's bytes)."""
    it = iter(items)
    while batch := list(islice(it, 4096)):
        out.write("".join(f"{k} {v}\n" for k, v in batch).encode("latin-1"))


__all__ = [
    "Collapser",
    "PerfOptions",
    "collapse",
    "collapse_stream",
    "folded_text",
    "iter_chunks",
    "write_folded",
]
