"""Kernel symbols from ``/proc/kallsyms``.

Each line is ``ADDRESS TYPE NAME`` and, for modules, ``\\t[MODULE]``. Only root sees real
addresses (others read zeros, with ``kptr_restrict``); zero addresses are dropped. kallsyms
gives no sizes, so a function reaches to the next symbol. Data symbols (listed when the kernel
has ``CONFIG_KALLSYMS_ALL``) are kept as boundaries but never named, and no function reaches
further than :data:`MAX_SPAN`, so an address in a gap (a module without symbols) stays
unnamed rather than being given to a distant function.

The file (120k+ lines) is parsed with numpy, not line by line: the address column has one
width, so the hex digits are a 2-D byte array; names are decoded only when looked up.
"""

from __future__ import annotations

import numpy as np

PATH = "/proc/kallsyms"
MAX_SPAN = 1 << 20
_TEXT_TYPES = b"tTwW"
_HEX = np.full(256, 255, dtype=np.uint8)
for _i, _c in enumerate(b"0123456789abcdef"):
    _HEX[_c] = _i
for _i, _c in enumerate(b"ABCDEF"):
    _HEX[_c] = 10 + _i


class KernelSymbolTable:
    """Sorted kernel symbols; :meth:`lookup` gives indices, :meth:`name` their names."""

    def __init__(self, text: bytes) -> None:
        if text and not text.endswith(b"\n"):
            text += b"\n"
        self._text = text
        addr, typ, self._name_at, self._name_end, self._mod_end = _columns(text)
        # Stable: among aliases at one address, the first listed (text before data) names it.
        is_data = ~np.isin(typ, np.frombuffer(_TEXT_TYPES, dtype=np.uint8))
        order = np.lexsort((is_data, addr))
        self._is_text = ~is_data
        s = addr[order]
        first = np.ones(len(s), dtype=bool)
        first[1:] = s[1:] != s[:-1]
        self._start = s[first]
        self._first = order[first]
        nxt = np.append(self._start[1:], np.uint64(0xFFFFFFFFFFFFFFFF))
        self._end = np.minimum(nxt, self._start + np.uint64(MAX_SPAN))

    @classmethod
    def read(cls, path: str = PATH) -> KernelSymbolTable:
        """The table at ``path``; an unreadable file gives an empty table."""
        try:
            with open(path, "rb") as f:
                return cls(f.read())
        except OSError:
            return cls(b"")

    def __len__(self) -> int:
        return len(self._name_at)

    def lookup(self, addrs: np.ndarray) -> np.ndarray:
        """Index of the function holding each address, -1 where none does."""
        addrs = np.asarray(addrs, dtype=np.uint64)
        if not len(self._start):
            return np.full(addrs.shape, -1, dtype=np.int64)
        i = np.searchsorted(self._start, addrs, side="right").astype(np.int64) - 1
        j = np.maximum(i, 0)
        k = self._first[j]
        ok = (i >= 0) & (addrs < self._end[j]) & self._is_text[k]
        return np.where(ok, k, -1)

    def name(self, i: int) -> str:
        return self._text[self._name_at[i] : self._name_end[i]].decode("utf-8", "replace")

    def module(self, i: int) -> str:
        """The kernel module a symbol belongs to, "" for the kernel image."""
        lo, hi = int(self._name_end[i]) + 2, int(self._mod_end[i]) - 1  # "\t[" ... "]"
        return self._text[lo:hi].decode("utf-8", "replace") if hi > lo else ""


def _columns(text: bytes) -> tuple[np.ndarray, ...]:
    """Address, type byte, name start and end, module end (= name end when none) of each
    well-formed line with a non-zero address."""
    empty = np.zeros(0, dtype=np.int64)
    buf = np.frombuffer(text, dtype=np.uint8)
    width = text.find(b" ")
    if width <= 0 or width > 16:
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.uint8), empty, empty, empty
    ends = np.nonzero(buf == 10)[0]
    starts = np.concatenate(([0], ends[:-1] + 1))
    ok = ends - starts >= width + 4  # "ADDR T N"
    starts, ends = starts[ok], ends[ok]
    ok = (buf[starts + width] == 32) & (buf[starts + width + 2] == 32)
    digits = _HEX[buf[starts[:, None] + np.arange(width)]]
    ok &= (digits != 255).all(axis=1)
    starts, ends, digits = starts[ok], ends[ok], digits[ok]
    addr = np.zeros(len(starts), dtype=np.uint64)
    for k in range(width):
        addr = (addr << np.uint64(4)) | digits[:, k].astype(np.uint64)
    nonzero = addr != 0
    starts, ends, addr = starts[nonzero], ends[nonzero], addr[nonzero]
    typ = buf[starts + width + 1]
    name_at = starts + width + 3
    tabs = np.nonzero(buf == 9)[0]
    name_end = ends
    if len(tabs):
        t = tabs[np.minimum(np.searchsorted(tabs, name_at), len(tabs) - 1)]
        name_end = np.where((t >= name_at) & (t < ends), t, ends)
    return addr, typ, name_at, name_end, ends
