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


def short_frame(name: str) -> str:
    """``path/to/file.py(12): func`` (a profiler Python frame) -> ``func (file.py:12)``."""
    m = _PY_FRAME.match(name)
    if not m:
        return name
    return f"{m['func']} ({m['file'].rsplit('/', 1)[-1]}:{m['line']})"


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
        return f"{value:,.0f}" if abs(value) >= 1e4 else f"{value:.3g}"
    return str(value)


def rank_title(r: dict[str, Any]) -> str:
    """``rank 0 · 2 x NVIDIA H100`` (devices counted), for headings."""
    rank = f"rank {r['rank']}" if r.get("rank") is not None else "rank ?"
    devices = Counter(str(d) for d in r.get("devices") or [] if d)
    named = ", ".join(f"{n} x {d}" if n > 1 else d for d, n in devices.items())
    return f"{rank} · {named}" if named else rank


def value_text(key: str, value: Any) -> str:
    """An evidence value by its key's convention: ``*_us`` times, ``share*`` fractions."""
    if value is None:
        return "?"
    if isinstance(value, int | float) and not isinstance(value, bool):
        if key.endswith("_us"):
            return time_us(float(value))
        if key.startswith("share") or key.endswith("_share") or key.endswith("_fraction"):
            return f"{100 * float(value):.1f}%"
    return number(value)


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


def evidence_items(evidence: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(label, text) for the scalar and small nested evidence; stacks are left out."""
    for key, value in evidence.items():
        if is_stack_list(value) or value is None:
            continue
        if isinstance(value, dict):
            parts = []
            for name, sub in value.items():
                if isinstance(sub, dict):
                    inner = ", ".join(f"{label(k)} {value_text(k, v)}" for k, v in sub.items())
                    parts.append(f"{name} ({inner})")
                else:
                    parts.append(f"{name} {value_text(key, sub)}")
            yield label(key), "; ".join(parts)
        elif isinstance(value, list):
            if all(not isinstance(v, dict | list) for v in value):
                yield label(key), ", ".join(number(v) for v in value[:8])
        else:
            yield label(key), value_text(key, value)


def evidence_stacks(evidence: dict[str, Any]) -> list[dict[str, Any]]:
    """Every stack entry of a finding's evidence (``top_stacks`` or any list of stacks)."""
    out: list[dict[str, Any]] = []
    for value in evidence.values():
        if is_stack_list(value):
            out.extend(value)
    return out
