"""Shared wording of the analysis reports (terminal and HTML): units, names, evidence."""

from __future__ import annotations

from collections import Counter
from typing import Any

from aiflame.analysis.schema import Figure, RankReport
from aiflame.analysis.words import short_frame

# The parts of the GPU timeline that add up to its total (see docs/analyze.md).
PARTS = (
    ("computation", "computation"),
    ("exposed_communication", "exposed communication"),
    ("exposed_memcpy", "exposed memcpy"),
    ("idle", "idle"),
)
SEVERITIES = ("high", "medium", "low")


def time_us(us: float | None) -> str:
    """A duration given in microseconds, in the unit that reads best."""
    if us is None:
        return "?"
    a = abs(us)
    if a >= 1e6:
        return f"{us / 1e6:.3f} s"
    if a >= 1e3:
        return f"{us / 1e3:.3f} ms"
    if a >= 1:
        return f"{us:.2f} us"
    if a == 0:
        return "0"
    return f"{us * 1e3:.0f} ns"


def percent(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def number(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return f"{int(value):,}"
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return str(value)


def rank_title(r: RankReport) -> str:
    """``rank 0 · 2 x NVIDIA H100`` (devices counted), for headings; a trace without a
    rank is named by its file."""
    devices = Counter(str(d) for d in r.devices if d)
    named = ", ".join(f"{n} x {d}" if n > 1 else d for d, n in devices.items())
    return f"{r.name} · {named}" if named else r.name


def figure_text(f: Figure) -> str:
    """A finding's figure as it reads: times in their unit, shares as percentages."""
    v = f.value
    if v is None:
        return "?"
    if f.unit == "us" and isinstance(v, int | float):
        return time_us(float(v))
    if f.unit == "share" and isinstance(v, int | float):
        return f"{100 * float(v):.1f}%"
    if f.unit == "bytes" and isinstance(v, int | float):
        return size(v)
    if f.unit == "tflops" and isinstance(v, int | float):
        return f"{v:.1f} TFLOP/s"
    return number(v)


def size(n: float) -> str:
    """Bytes in the binary unit that reads best."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n):,} B"


def label(key: str) -> str:
    """``host_wait_idle_us`` -> ``host wait idle``."""
    for suffix in ("_us", "_ns"):
        key = key.removesuffix(suffix)
    return key.replace("_", " ")


__all__ = [
    "PARTS",
    "SEVERITIES",
    "figure_text",
    "label",
    "number",
    "percent",
    "rank_title",
    "short_frame",  # from analysis.words: stacks are named alike everywhere
    "size",
    "time_us",
]
