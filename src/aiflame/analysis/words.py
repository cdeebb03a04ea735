"""How findings word numbers and stacks: durations in the unit that reads best, and a stack
named by its innermost frames as a person knows them."""

from __future__ import annotations

import re

_PY_FRAME = re.compile(r"^(?P<file>[^()]+)\((?P<line>\d+)\): (?P<func>.+)$")
_BUILTIN = re.compile(
    r"^<built-in (?:method (?P<m>\S+) of \S+ object at 0x[0-9a-f]+|function (?P<f>[^>]+))>$"
)
FRAMES = 3  # innermost frames that name a stack in a sentence


def short_frame(name: str) -> str:
    """A profiler Python frame as a reader knows it: ``path/to/file.py(12): func`` ->
    ``func (file.py:12)``, ``<built-in method mm of type object at 0x7f..>`` -> ``mm``."""
    m = _PY_FRAME.match(name)
    if m:
        return f"{m['func']} ({m['file'].rsplit('/', 1)[-1]}:{m['line']})"
    m = _BUILTIN.match(name)
    if m:
        return m["m"] or m["f"]
    return name


def frames(stack: list[str], n: int = FRAMES) -> str:
    """``resize (image_processing_owlv2.py:301) > zoom (_interpolation.py:739) > zoom_shift``."""
    shown = [short_frame(f) for f in stack[-n:]]
    return ("… > " if len(stack) > n else "") + " > ".join(shown)


def duration(ns: float) -> str:
    """A duration given in nanoseconds, in the unit that reads best."""
    us = ns / 1e3
    a = abs(us)
    if a >= 1e6:
        return f"{us / 1e6:.2f} s"
    if a >= 1e3:
        return f"{us / 1e3:.1f} ms"
    if a >= 1:
        return f"{us:.1f} us"
    return f"{ns:.0f} ns"


def shape_params(p: dict[str, object] | None) -> str:
    """A shape's parameters, short: GEMMs as ``[Bx]MxNxK``, others as ``key=value``."""
    if not p:
        return ""
    if all(k in p for k in ("M", "N", "K")):
        b = p.get("B", 1)
        return (f"{b}x" if b not in (1, None) else "") + f"{p['M']}x{p['N']}x{p['K']}"
    return " ".join(
        f"{k}={'x'.join(map(str, v)) if isinstance(v, list) else v}"
        for k, v in p.items()
        if not isinstance(v, bool)
    )
