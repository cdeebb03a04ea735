"""Perf maps: the ``/tmp/perf-<pid>.map`` files in which JIT runtimes name their code.

Each line is ``START SIZE name`` with START and SIZE in hex (``0x`` optional), as defined by
Linux perf's JIT interface. oneDNN writes one with ``ONEDNN_JIT_PROFILE=2``, CPython 3.12+
with ``-X perf``, Node with ``--perf-basic-prof``. A later line for the same address wins,
because a runtime that frees code may reuse the address for a new kernel.
"""

from __future__ import annotations

import bisect
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from aiflame.model.frames import FrameKind
from aiflame.symbolize.kinds import guess_kind

# oneDNN appends a per-process instance counter (``jit_uni_reorder_kernel_f32.12``); the
# kernel is the same code generator, so folding the counter merges its samples.
_ONEDNN_COUNTER = re.compile(r"^((?:jit|brgemm|brg)_\w*|\w+_kernel\w*)\.\d+$")


@dataclass(frozen=True, slots=True)
class JitSymbol:
    start: int
    size: int
    name: str

    @property
    def kind(self) -> FrameKind:
        kind = guess_kind(self.name)
        return kind if kind == FrameKind.PYTHON else FrameKind.JIT


def map_path(pid: int, directory: str = "/tmp") -> str:
    return os.path.join(directory, f"perf-{pid}.map")


def clean_name(name: str) -> str:
    """The symbol as shown in a flame graph: oneDNN's instance counter dropped."""
    m = _ONEDNN_COUNTER.match(name)
    return m.group(1) if m else name


def parse_lines(lines: Iterable[str]) -> list[JitSymbol]:
    """Symbols of a perf map; malformed lines (a crash mid-write) are skipped."""
    out = []
    for line in lines:
        parts = line.split(None, 2)
        if len(parts) < 3:
            continue
        try:
            start = int(parts[0], 16)
            size = int(parts[1], 16)
        except ValueError:
            continue
        name = parts[2].strip()
        if size > 0 and name:
            out.append(JitSymbol(start, size, name))
    return out


class PerfMap:
    """Address -> symbol lookup over one or more perf maps."""

    def __init__(self, symbols: Iterable[JitSymbol] = ()) -> None:
        by_start: dict[int, JitSymbol] = {}
        for sym in symbols:
            by_start[sym.start] = sym  # later definitions replace earlier ones
        self._symbols = [by_start[s] for s in sorted(by_start)]
        self._starts = [s.start for s in self._symbols]

    @classmethod
    def read(cls, path: str) -> PerfMap:
        """The map at ``path``; a missing or unreadable file gives an empty map."""
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                return cls(parse_lines(f))
        except OSError:
            return cls()

    @classmethod
    def for_pid(cls, pid: int, directory: str = "/tmp") -> PerfMap:
        return cls.read(map_path(pid, directory))

    def lookup(self, address: int) -> JitSymbol | None:
        i = bisect.bisect_right(self._starts, address) - 1
        if i < 0:
            return None
        sym = self._symbols[i]
        return sym if address < sym.start + sym.size else None

    def __iter__(self) -> Iterator[JitSymbol]:
        return iter(self._symbols)

    def __len__(self) -> int:
        return len(self._symbols)

    def __bool__(self) -> bool:
        return bool(self._symbols)
