"""Kernel symbols from ``/proc/kallsyms``.

Each line is ``ADDRESS TYPE NAME [MODULE]``. Only root sees real addresses (others read
zeros, with ``kptr_restrict``); a table of zeros is treated as empty. kallsyms gives no
sizes, so a function reaches to the next symbol. Data symbols (listed when the kernel has
``CONFIG_KALLSYMS_ALL``) are kept as boundaries but never named, and no function reaches
further than :data:`MAX_SPAN`, so an address in a gap (a module without symbols) stays
unnamed rather than being given to a distant function.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

PATH = "/proc/kallsyms"
MAX_SPAN = 1 << 20
_TEXT_TYPES = frozenset("tTwW")


class KernelSymbolTable:
    """Sorted kernel symbols; :meth:`lookup` gives indices, :meth:`name` their names."""

    def __init__(self, entries: Iterable[tuple[int, str, str, str]]) -> None:
        addrs: list[int] = []
        data: list[bool] = []
        self._names: list[str] = []
        self._modules: list[str] = []
        for a, t, n, m in entries:
            if a:
                addrs.append(a)
                data.append(t not in _TEXT_TYPES)
                self._names.append(n)
                self._modules.append(m)
        start = np.array(addrs, dtype=np.uint64)
        is_data = np.array(data, dtype=bool)
        # Stable: among aliases at one address, the first listed (text before data) names it.
        order = np.lexsort((is_data, start))
        self._text = ~is_data
        uniq, first = np.unique(start[order], return_index=True)
        self._start = uniq
        self._first = order[first]
        nxt = np.append(uniq[1:], np.uint64(0xFFFFFFFFFFFFFFFF))
        self._end = np.minimum(nxt, uniq + np.uint64(MAX_SPAN))

    @classmethod
    def read(cls, path: str = PATH) -> KernelSymbolTable:
        """The table at ``path``; an unreadable file gives an empty table."""
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                return cls(parse_lines(f))
        except OSError:
            return cls(())

    def __len__(self) -> int:
        return len(self._names)

    def lookup(self, addrs: np.ndarray) -> np.ndarray:
        """Index of the function holding each address, -1 where none does."""
        addrs = np.asarray(addrs, dtype=np.uint64)
        if not len(self._start):
            return np.full(addrs.shape, -1, dtype=np.int64)
        i = np.searchsorted(self._start, addrs, side="right").astype(np.int64) - 1
        j = np.maximum(i, 0)
        k = self._first[j]
        ok = (i >= 0) & (addrs < self._end[j]) & self._text[k]
        return np.where(ok, k, -1)

    def name(self, i: int) -> str:
        return self._names[i]

    def module(self, i: int) -> str:
        """The kernel module a symbol belongs to, "" for the kernel image."""
        return self._modules[i]


def parse_lines(lines: Iterable[str]) -> Iterable[tuple[int, str, str, str]]:
    """``(address, type, name, module)`` of each well-formed line."""
    for line in lines:
        parts = line.split()
        if len(parts) < 3 or len(parts[1]) != 1:
            continue
        try:
            addr = int(parts[0], 16)
        except ValueError:
            continue
        module = parts[3].strip("[]") if len(parts) > 3 else ""
        yield addr, parts[1], parts[2], module
