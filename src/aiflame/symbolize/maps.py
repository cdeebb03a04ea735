"""``/proc/PID/maps``: which file (and which offset of it) backs each address of a process."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

DELETED = " (deleted)"


@dataclass(frozen=True, slots=True)
class Mapping:
    start: int
    end: int
    perms: str
    offset: int
    dev: str  # "major:minor" in hex, as the kernel writes it
    inode: int
    path: str  # as the process sees it, without the " (deleted)" mark; "" if anonymous
    deleted: bool = False

    @property
    def executable(self) -> bool:
        return "x" in self.perms

    @property
    def is_file(self) -> bool:
        """Backed by a file with a path (not anonymous, not ``[heap]``/``[vdso]``/...)."""
        return self.path.startswith("/")

    def file_offset(self, address: int) -> int:
        return address - self.start + self.offset


def parse_line(line: str) -> Mapping | None:
    """One line of a maps file; None for anything that is not one."""
    parts = line.split(None, 5)
    if len(parts) < 5:
        return None
    try:
        lo, hi = parts[0].split("-", 1)
        start, end = int(lo, 16), int(hi, 16)
        offset, inode = int(parts[2], 16), int(parts[4])
    except ValueError:
        return None
    path = parts[5].rstrip("\n") if len(parts) > 5 else ""
    deleted = path.endswith(DELETED)
    if deleted:
        path = path[: -len(DELETED)]
    if end <= start:
        return None
    return Mapping(start, end, parts[1], offset, parts[3], inode, path, deleted)


class Maps:
    """The mappings of one process, sorted by address, for vectorised lookups.

    Parsed as columns: a :class:`Mapping` is made only for the lines asked for (a
    continuous profiler parses the maps of every new process, and looks up the few
    mappings its samples fall in)."""

    def __init__(self, mappings: Sequence[Mapping]) -> None:
        self._mappings: list[Mapping] | None = sorted(mappings, key=lambda m: m.start)
        self._lines: list[str] = []
        self._starts = np.array([m.start for m in self._mappings], dtype=np.uint64)
        self._ends = np.array([m.end for m in self._mappings], dtype=np.uint64)
        self._made: dict[int, Mapping] = {}

    @classmethod
    def parse(cls, text: str) -> Maps:
        # only the address range now (one pass of the regex engine): the rest of a line
        # when it is looked up
        found = [(line, int(lo, 16), int(hi, 16)) for line, lo, hi in _RANGE_LINE.findall(text)]
        found = [f for f in found if f[2] > f[1]]
        starts = np.array([f[1] for f in found], dtype=np.uint64)
        ends = np.array([f[2] for f in found], dtype=np.uint64)
        lines = [f[0] for f in found]
        if len(starts) > 1 and not (starts[1:] >= starts[:-1]).all():  # (the kernel sorts)
            order = np.argsort(starts, kind="stable")
            lines = [lines[i] for i in order.tolist()]
            starts, ends = starts[order], ends[order]
        maps = cls.__new__(cls)
        maps._mappings = None
        maps._lines = lines
        maps._starts = starts
        maps._ends = ends
        maps._made = {}
        return maps

    @classmethod
    def parse_shared(cls, text: str) -> Maps:
        """:meth:`parse`, the same object for the same text while it is among the last few
        parsed: a profiler that finds a new process's interpreter, then symbolizes its
        stacks, reads one snapshot of its maps twice."""
        with _RECENT_LOCK:
            found = _RECENT.pop(text, None)
        if found is None:
            found = cls.parse(text)
        with _RECENT_LOCK:
            if len(_RECENT) >= _MAX_RECENT:
                del _RECENT[next(iter(_RECENT))]
            _RECENT[text] = found  # the most recently used last
        return found

    @property
    def mappings(self) -> list[Mapping]:
        if self._mappings is None:
            self._mappings = [self[i] for i in range(len(self._lines))]
        return self._mappings

    def named(self, pattern: re.Pattern[str]) -> list[Mapping]:
        """The mappings of files whose name (the path's last part) ``pattern`` matches in
        full; only their lines are parsed (a system-wide profiler looks for a few files in
        every new process's maps)."""
        if self._mappings is not None:
            return [m for m in self._mappings if pattern.fullmatch(os.path.basename(m.path))]
        out = []
        for i, line in enumerate(self._lines):
            name = line[line.rfind("/") + 1 :].removesuffix(DELETED)
            if pattern.fullmatch(name) and (m := self[i]).is_file:
                out.append(m)
        return out

    def of_file(self, path: str) -> list[Mapping]:
        """The mappings of the file at ``path`` (deleted or not); only their lines are parsed."""
        if self._mappings is not None:
            return [m for m in self._mappings if m.path == path]
        marked = path + DELETED
        return [
            m
            for i, line in enumerate(self._lines)
            if (line.endswith(path) or line.endswith(marked)) and (m := self[i]).path == path
        ]

    def find(self, addrs: np.ndarray) -> np.ndarray:
        """Index of the mapping holding each address, -1 where none does."""
        addrs = np.asarray(addrs, dtype=np.uint64)
        if not len(self._starts):
            return np.full(addrs.shape, -1, dtype=np.int64)
        i = np.searchsorted(self._starts, addrs, side="right").astype(np.int64) - 1
        j = np.maximum(i, 0)
        return np.where((i >= 0) & (addrs < self._ends[j]), j, -1)

    def __len__(self) -> int:
        return len(self._starts)

    def __getitem__(self, i: int) -> Mapping:
        if self._mappings is not None:
            return self._mappings[i]
        found = self._made.get(i)
        if found is None:
            found = parse_line(self._lines[i]) or Mapping(
                int(self._starts[i]), int(self._ends[i]), "---p", 0, "00:00", 0, ""
            )  # (a line whose range parsed and whose rest did not: anonymous)
            self._made[i] = found
        return found


_RANGE_LINE = re.compile(r"^(([0-9a-fA-F]+)-([0-9a-fA-F]+) [^\n]*)", re.MULTILINE)
_RECENT_LOCK = threading.Lock()  # (the agent's trace threads symbolize too)
_RECENT: dict[str, Maps] = {}  # maps text -> its parse (see Maps.parse_shared)
_MAX_RECENT = 64  # a new process's maps are read when described, and symbolized at the cut
