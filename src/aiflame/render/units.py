"""Human-readable values: counts, durations (ns -> s/ms/us) and sizes (bytes -> KiB/MiB/GiB)."""

from __future__ import annotations


def format_value(value: float, unit: str) -> str:
    if unit == "nanoseconds":
        for scale, suffix in ((1e9, "s"), (1e6, "ms"), (1e3, "us")):
            if abs(value) >= scale:
                return f"{value / scale:.3f} {suffix}"
        return f"{value:.0f} ns"
    if unit == "bytes":
        for scale, suffix in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
            if abs(value) >= scale:
                return f"{value / scale:.2f} {suffix}"
        return f"{value:.0f} B"
    if value == int(value):
        return f"{int(value):,}"
    return f"{value:,.2f}"
