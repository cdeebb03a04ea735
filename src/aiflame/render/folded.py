"""Folded stacks output: ``root;...;leaf VALUE`` lines, sorted, names exactly as stored."""

from __future__ import annotations

from collections.abc import Iterator

from aiflame.model import Profile


def format_value(v: float) -> str:
    """Integers print without a decimal point; fractions keep their digits."""
    if v == int(v):
        return str(int(v))
    return repr(v)


def folded_lines(profile: Profile, metric: str | None = None) -> Iterator[str]:
    """One line per distinct stack with a non-zero value, sorted like stackcollapse output."""
    col = profile.type_index(metric)
    lines = []
    for stack, value in profile.iter_stack_values(col):
        if value == 0 or stack < 0:
            continue
        lines.append((";".join(profile.stack_names(stack)), value))
    # Stacks may repeat once names are taken alone (frames differing only in kind/file).
    merged: dict[str, float] = {}
    for stack_str, value in lines:
        merged[stack_str] = merged.get(stack_str, 0.0) + value
    for stack_str in sorted(merged):
        yield f"{stack_str} {format_value(merged[stack_str])}"


def render_folded(profile: Profile, metric: str | None = None) -> str:
    out = "\n".join(folded_lines(profile, metric))
    return out + "\n" if out else out
