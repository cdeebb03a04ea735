"""Dictionaries of profiles seen before, so a repeated one is decoded once.

An agent pushes one profile of the same program every period, and the part of a pprof that
names the code (functions, locations, mappings, string table) is most of its bytes and of
the cost of decoding it. When a push's dictionary has the digest of one decoded before, only
its samples are decoded, and the frames of its locations are taken from here. A dictionary
changes whenever the set of sampled locations does, so a miss costs one digest more than
decoding without this cache, and a hit saves the decoding and hashing of every function
and location.

The cache is bounded by an estimate of its memory, least recently used out first; it is
shared by the request threads (a lock guards the map, never the decoding).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from aiflame.server.ingest import pprof_columns
from aiflame.server.ingest.hashing import StringHashes
from aiflame.server.ingest.pprof_columns import PprofColumns
from aiflame.server.ingest.profiles import Dictionary, dictionary

DEFAULT_BUDGET_BYTES = 128 << 20


@dataclass(frozen=True)
class _Entry:
    strings: list[str]  # the string table as pushed (the checks of the samples use it)
    frames: Dictionary
    nbytes: int


class DictionaryCache:
    def __init__(self, budget_bytes: int = DEFAULT_BUDGET_BYTES) -> None:
        self.budget_bytes = budget_bytes
        self._entries: OrderedDict[bytes, _Entry] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def decode(self, data: bytes, strings: StringHashes) -> tuple[PprofColumns, Dictionary | None]:
        """The columns of an (uncompressed) pprof, and its dictionary when it was known
        (then the columns hold the samples only). BadRequest for invalid data."""
        parsed = pprof_columns.parse_samples(data)
        key = parsed.dictionary_key
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                self.hits += 1
        if entry is not None:
            return pprof_columns.columns(parsed, data, entry.strings), entry.frames
        cols = pprof_columns.decode(data)
        frames = dictionary(cols, strings)
        with self._lock:
            self.misses += 1
        self._add(key, _Entry(cols.strings, frames, _size(cols.strings, frames)))
        return cols, frames

    def _add(self, key: bytes, entry: _Entry) -> None:
        if entry.nbytes > self.budget_bytes:
            return
        with self._lock:
            if key in self._entries:
                return
            self._entries[key] = entry
            self._bytes += entry.nbytes
            while self._bytes > self.budget_bytes:
                _, old = self._entries.popitem(last=False)
                self._bytes -= old.nbytes


def _size(strings: list[str], d: Dictionary) -> int:
    arrays = (d.loc_ids, d.loc_order, d.loc_frames, d.loc_off, d.per_loc, d.frame_ids)
    # Strings: their characters and about 50 bytes of object each.
    text = sum(map(len, d.strings)) + 50 * len(d.strings)
    dense = d.loc_dense.nbytes if d.loc_dense is not None else 0
    return sum(a.nbytes for a in arrays) + d.frame_src.nbytes + dense + text + 8 * len(strings)
