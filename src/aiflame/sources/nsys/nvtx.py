"""NVTX ranges open on a thread at a given time, as interned stack prefixes.

Each thread's ranges are cut into elementary segments (between consecutive range
boundaries); every segment keeps the stack id of the ranges open during it, outermost
first, so a lookup is one binary search.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict

from aiflame.model import FrameKind, ProfileBuilder
from aiflame.model.stacks import EMPTY_STACK
from aiflame.sources.nsys.db import NsysDB

# ENUM_NSYS_EVENT_TYPE ids of ranges (push/pop, start/end, and the NVTXT file variants),
# used when the export predates the ENUM tables.
_RANGE_TYPES = {59, 60, 70, 71}
_RANGE_NAMES = {"NvtxPushPopRange", "NvtxStartEndRange", "NvtxtPushPopRange", "NvtxtStartEndRange"}


def range_types(db: NsysDB) -> set[int]:
    enum = db.enum("ENUM_NSYS_EVENT_TYPE")
    found = {i for i, name in enum.items() if name in _RANGE_NAMES}
    return found or set(_RANGE_TYPES)


class NvtxIndex:
    """``stack_at(global_tid, t)``: the stack of NVTX range frames open at ``t`` (ns)."""

    def __init__(self, db: NsysDB, builder: ProfileBuilder) -> None:
        self._times: dict[int, list[int]] = {}
        self._stacks: dict[int, list[int]] = {}
        self.count = 0
        strings = db.strings
        types = range_types(db)
        per_thread: dict[int, list[tuple[int, int, str]]] = defaultdict(list)
        rows = db.select(
            "NVTX_EVENTS",
            ["start", "end", "eventType", "text", "textId", "globalTid"],
            where='"end" IS NOT NULL',
        )
        for start, end, etype, text, text_id, gtid in rows:
            if etype not in types or end < start:
                continue
            name = text if text is not None else strings.get(text_id, "") if text_id else ""
            per_thread[gtid or 0].append((start, end, name or "[unnamed NVTX range]"))
            self.count += 1
        for gtid, ranges in per_thread.items():
            self._index_thread(gtid, ranges, builder)

    def _index_thread(
        self, gtid: int, ranges: list[tuple[int, int, str]], builder: ProfileBuilder
    ) -> None:
        # Boundaries: a range is open on [start, end). At equal times ends go first.
        events = [(s, 1, i) for i, (s, _, _) in enumerate(ranges)]
        events += [(e, 0, i) for i, (_, e, _) in enumerate(ranges)]
        events.sort()
        frames = [builder.frame(name, FrameKind.LABEL) for _, _, name in ranges]
        child = builder.stacks.child
        # Open ranges, outermost first (earlier start, then longer), and the stack id of
        # each prefix of them: push/pop ranges only ever add or drop the innermost one.
        open_keys: list[tuple[int, int, int]] = []
        prefix: list[int] = []
        times: list[int] = []
        stacks: list[int] = []
        for t, is_start, i in events:
            start, end, _ = ranges[i]
            key = (start, -end, i)
            if is_start:
                at = bisect_right(open_keys, key)
                open_keys.insert(at, key)
            else:
                at = open_keys.index(key)
                del open_keys[at]
            del prefix[at:]
            parent = prefix[-1] if prefix else EMPTY_STACK
            for _, _, j in open_keys[at:]:
                parent = child(parent, frames[j])
                prefix.append(parent)
            stack = prefix[-1] if prefix else EMPTY_STACK
            if times and times[-1] == t:
                stacks[-1] = stack
            else:
                times.append(t)
                stacks.append(stack)
        self._times[gtid] = times
        self._stacks[gtid] = stacks

    def stack_at(self, gtid: int | None, t: int) -> int:
        times = self._times.get(gtid or 0)
        if not times:
            return EMPTY_STACK
        i = bisect_right(times, t) - 1
        return self._stacks[gtid or 0][i] if i >= 0 else EMPTY_STACK
