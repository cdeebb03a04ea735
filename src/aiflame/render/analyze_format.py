"""Shared wording of the analysis reports (terminal and HTML): units, names, evidence."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

# The parts of the GPU timeline that add up to its total (see docs/analyze.md).
PARTS = (
    ("computation", "computation"),
    ("exposed_communication", "exposed communication"),
    ("exposed_memcpy", "exposed memcpy"),
    ("idle", "idle"),
)
SEVERITIES = ("high", "medium", "low")


_PY_FRAME = re.compile(r"^(?P<file>[^()]+)\((?P<line>\d+)\): (?P<func>.+)$")
_BUILTIN = re.compile(
    r"^<built-in (?:method (?P<m>\S+) of \S+ object at 0x[0-9a-f]+|function (?P<f>[^>]+))>$"
)


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


def rank_title(r: dict[str, Any]) -> str:
    """``rank 0 · 2 x NVIDIA H100`` (devices counted), for headings."""
    rank = f"rank {r['rank']}" if r.get("rank") is not None else "rank ?"
    devices = Counter(str(d) for d in r.get("devices") or [] if d)
    named = ", ".join(f"{n} x {d}" if n > 1 else d for d, n in devices.items())
    return f"{rank} · {named}" if named else rank


def value_text(key: str, value: Any, outer: str = "") -> str:
    """An evidence value by its key's convention (or its enclosing key's): ``*_us`` times,
    ``share*``/``pct*``/``mfu*`` fractions shown as percentages."""
    if value is None:
        return "?"
    if isinstance(value, int | float) and not isinstance(value, bool):
        for k in (key, outer):
            if k.endswith("_us"):
                return time_us(float(value))
            if k.startswith(("share", "pct", "mfu")) or k.endswith(("_share", "_fraction")):
                return f"{100 * float(value):.1f}%"
        if key.endswith("bytes") or outer.endswith("bytes"):
            return size(value)
    return number(value)


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


def is_stack_list(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(v, dict) and isinstance(v.get("stack"), list) for v in value)
    )


def evidence_items(
    evidence: dict[str, Any], skip: tuple[str, ...] = ()
) -> Iterator[tuple[str, str]]:
    """(label, text) for the scalar and nested evidence; stacks and lists of rows (shown
    as tables where there is room) are left out, and so are the keys in ``skip``."""
    for key, value in evidence.items():
        if is_stack_list(value) or value is None or key in skip:
            continue
        if isinstance(value, dict):
            parts = []
            for name, sub in value.items():
                if isinstance(sub, dict):
                    inner = ", ".join(
                        f"{label(k)} {value_text(k, v, key)}"
                        for k, v in sub.items()
                        if not isinstance(v, dict | list)
                    )
                    parts.append(f"{name} ({inner})")
                elif not isinstance(sub, list):
                    parts.append(f"{label(name)} {value_text(name, sub, key)}")
            if parts:
                yield label(key), "; ".join(parts)
        elif isinstance(value, list):
            if all(not isinstance(v, dict | list) for v in value):
                yield label(key), ", ".join(number(v) for v in value[:8])
        else:
            yield label(key), value_text(key, value)


def stack_cost(entry: dict[str, Any]) -> tuple[str, float] | None:
    """The cost an evidence stack carries (``cost_us``, ``idle_us``, ``blocked_us``...)."""
    for k, v in entry.items():
        if k.endswith("_us") and isinstance(v, int | float):
            return label(k), float(v)
    return None


def evidence_stacks(evidence: dict[str, Any]) -> list[dict[str, Any]]:
    """Every stack entry of a finding's evidence (``top_stacks`` or any list of stacks)."""
    out: list[dict[str, Any]] = []
    for value in evidence.values():
        if is_stack_list(value):
            out.extend(value)
    return out
