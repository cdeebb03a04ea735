"""Text from a profile made safe to show, in a terminal or in the page.

A name in a trace is whatever the traced program called its function or kernel. Written
to a terminal as it is, an escape sequence in it can set the window title, clear the
screen or forge output; a bidirectional control can make a name pose as another
(``"gnp\\u202e.exe"`` displays as ``gnp`` + ``exe.`` reversed). :func:`visible` replaces
every control character (C0, DEL, C1) and every bidirectional formatting character by
``<U+XXXX>``, so that what is shown is what is there. Everything else is kept: names are
not ASCII-only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import msgspec

_BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_SHOWN = (*range(0x20), 0x7F, *range(0x80, 0xA0), *_BIDI)
_TABLE = {c: f"<U+{c:04X}>" for c in _SHOWN}
_UNSAFE = re.compile("[" + "".join(re.escape(chr(c)) for c in _SHOWN) + "]")


def visible(text: str) -> str:
    """``text`` with control and bidirectional characters spelled ``<U+XXXX>``."""
    return text.translate(_TABLE) if _UNSAFE.search(text) else text


def visible_all(strings: Iterable[str]) -> list[str]:
    """:func:`visible` of many strings (``str.isprintable`` first: fast, and False for
    every character :func:`visible` spells out)."""
    return [s if s.isprintable() else visible(s) for s in strings]


def visible_data(value: Any) -> Any:
    """A copy of JSON-like data (dicts, lists, strings..., and typed records: msgspec
    Structs such as the analysis report) with every string, keys included, passed through
    :func:`visible`."""
    if isinstance(value, str):
        return visible(value)
    if isinstance(value, msgspec.Struct):
        fields = value.__struct_fields__
        return msgspec.structs.replace(
            value, **{f: visible_data(getattr(value, f)) for f in fields}
        )
    if isinstance(value, dict):
        return {visible_data(k): visible_data(v) for k, v in value.items()}
    if isinstance(value, list):
        return [visible_data(v) for v in value]
    if isinstance(value, tuple):
        return tuple(visible_data(v) for v in value)
    return value


__all__ = ["visible", "visible_all", "visible_data"]
