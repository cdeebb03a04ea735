"""Folded ("collapsed") stacks: ``root;child;leaf COUNT`` per line, as written by
FlameGraph's stackcollapse-*.pl, inferno, py-spy ``--format raw`` and many others.

Counts may be fractional. Lines that do not parse are skipped and counted
(``meta['ignored_lines']``), as flamegraph.pl does.
"""

from __future__ import annotations

import re

from aiflame.errors import InputError
from aiflame.model import FrameKind, Profile, ProfileBuilder, SampleType
from aiflame.sources.inputs import Input, decode_head
from aiflame.symbolize.kinds import DELIMITER, KindGuesser

FORMAT = "folded"

_LINE = re.compile(r"^\S.*?\s+(\d+(?:\.\d*)?)\s*$")


def sniff(head: bytes, path: str) -> bool:
    lines = [ln for ln in decode_head(head).splitlines()[:20] if ln.strip()]
    if not lines:
        return False
    # The last line of the head may be cut short; judge on complete ones when we can.
    complete = lines[:-1] or lines
    good = sum(1 for ln in complete if _LINE.match(ln))
    return good >= max(1, len(complete) // 2)


def parse_line(line: str) -> tuple[str, float] | None:
    """Split a folded line into (stack, count); None if it is not one."""
    stack, sep, count = line.rstrip().rpartition(" ")
    if not sep:
        stack, sep, count = line.rstrip().rpartition("\t")
    if not sep or not stack.strip():
        return None
    try:
        value = float(count)
    except ValueError:
        return None
    if value != value or value < 0:  # NaN or negative: not a sample count
        return None
    return stack.rstrip(), value


def read_counts(source: Input) -> tuple[dict[str, float], int]:
    """Stack string -> summed count, and the number of lines that were not folded stacks."""
    counts: dict[str, float] = {}
    ignored = 0
    get = counts.get
    with source.open_text() as f:
        for line in f:
            if not line.strip():
                continue
            parsed = parse_line(line)
            if parsed is None:
                ignored += 1
                continue
            stack, value = parsed
            counts[stack] = get(stack, 0.0) + value
    return counts, ignored


def build_profile(
    counts: dict[str, float], sample_type: SampleType | None = None
) -> ProfileBuilder:
    """Intern folded stacks into a builder, guessing frame kinds from their names."""
    builder = ProfileBuilder([sample_type or SampleType("samples", "count")])
    guess = KindGuesser()
    frame_ids: dict[tuple[str, bool], int] = {}
    intern_frame = builder.frames.intern
    intern_stack = builder.stacks.intern
    add = builder.add
    for stack, value in counts.items():
        ids = []
        below = False
        for name in stack.split(";"):
            key = (name, below)
            fid = frame_ids.get(key)
            if fid is None:
                kind = guess(name, below)
                fid = frame_ids[key] = intern_frame(name, kind)
            ids.append(fid)
            if name == DELIMITER:
                below = True
        add(intern_stack(ids), value)
    return builder


def load(source: Input, **_: object) -> Profile:
    counts, ignored = read_counts(source)
    if not counts:
        raise InputError(source.path, "no folded stacks found (expected lines like 'a;b;c 42')")
    builder = build_profile(counts)
    builder.meta["ignored_lines"] = ignored
    return builder.build()


__all__ = ["FORMAT", "FrameKind", "build_profile", "load", "parse_line", "read_counts", "sniff"]
