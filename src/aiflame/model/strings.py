"""Interned strings: every name, file and label is stored once and referred to by index."""

from __future__ import annotations

import re

_DIGITS = re.compile(r"\d+")


def _sized(m: re.Match[str]) -> str:
    digits = m.group()
    return chr(0x2F + len(digits)) + digits


def natural_key(text: str) -> str:
    """Sort key that puts ``Layer_2`` before ``Layer_10``: each run of digits is prefixed
    with a character that grows with its length ('0' for one digit, '1' for two...), so
    shorter numbers sort first and numbers of one length compare digit by digit. A string
    key sorts several times faster than a list of parts, and text without digits is its
    own key."""
    return _DIGITS.sub(_sized, text)


class StringTable:
    """An append-only list of unique strings; index 0 is always the empty string."""

    __slots__ = ("_index", "strings")

    def __init__(self) -> None:
        self.strings: list[str] = [""]
        self._index: dict[str, int] = {"": 0}

    def intern(self, s: str) -> int:
        """Return the index of ``s``, adding it if new."""
        i = self._index.get(s)
        if i is None:
            i = len(self.strings)
            self._index[s] = i
            self.strings.append(s)
        return i

    def lookup(self, s: str) -> int | None:
        """Index of ``s`` if present, else None (does not add)."""
        return self._index.get(s)

    def __getitem__(self, i: int) -> str:
        return self.strings[i]

    def __len__(self) -> int:
        return len(self.strings)
