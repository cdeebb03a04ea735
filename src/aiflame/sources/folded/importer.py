"""Folded ("collapsed") stacks: ``root;child;leaf COUNT`` per line, as written by
FlameGraph's stackcollapse-*.pl, inferno, py-spy ``--format raw`` and many others.

Counts may be fractional. Lines that start with ``#`` are comments (Austin's metadata,
the headers some tools write), never frames (aiflame writes a root frame starting with
``#`` as ``\\#``); other lines that do not parse are skipped and counted
(``meta['ignored_lines']``), as flamegraph.pl does. ``\\;`` inside a frame name is a
``;`` of the name (see :mod:`aiflame.model.folded`).
"""

from __future__ import annotations

import gc
import math
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import cast

import numpy as np

from aiflame.errors import InputError
from aiflame.model import FrameKind, Profile, ProfileBuilder, SampleType
from aiflame.model.folded import ESCAPED, split_stack
from aiflame.model.stacks import EMPTY_STACK
from aiflame.sources import limits
from aiflame.sources.inputs import SNIFF_BYTES, Input, decode_head
from aiflame.symbolize.kinds import DELIMITER, KindGuesser

FORMAT = "folded"

_COUNT = re.compile(r"\d+(?:\.\d*)?")


def sniff(head: bytes, path: str) -> bool:
    lines = [ln for ln in decode_head(head).splitlines()[:40] if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith("#")][:20]  # comments are not stacks
    if not lines:
        return False
    if len(lines) == 1 and len(head) >= SNIFF_BYTES:
        # One line longer than the head (a stack thousands of frames deep), cut short:
        # a stack of frames so far. Folded is tried last, so little else can claim it.
        line = lines[0]
        return ";" in line and not line[0].isspace() and line.isprintable()
    # The last line of the head may be cut short; judge on complete ones when we can.
    complete = lines[:-1] or lines
    good = sum(1 for ln in complete if looks_folded(ln))
    return good >= max(1, len(complete) // 2)


def looks_folded(line: str) -> bool:
    """``^\\S.*?\\s+(\\d+(?:\\.\\d*)?)\\s*$``: a stack, blanks, a count; by splitting off
    the last token (a backtracking regex is quadratic on long lines)."""
    parts = line.rstrip().rsplit(None, 1)
    return len(parts) == 2 and not line[0].isspace() and _COUNT.fullmatch(parts[1]) is not None


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
    if not math.isfinite(value) or value < 0:  # NaN, inf or negative: not a sample count
        return None
    return stack.rstrip(), value


def read_counts(source: Input) -> tuple[dict[str, float], int]:
    """Stack string -> summed count, and the number of lines that were not folded stacks."""
    counts: dict[str, float] = {}
    ignored = 0
    get = counts.get
    with source.open_text(max_line=limits.max_line()) as f:
        for line in f:
            if line[:1] == "#":
                continue  # a comment: '# mode: wall' would otherwise be a frame
            if line[:2] == "\\#":  # a root frame starting with '#', as aiflame writes it
                line = line[1:]
            # The usual "stack 123": taken here without parse_line's copies of the line
            # (a line can be a megabyte); anything else goes through parse_line.
            stack, sep, count = line.rpartition(" ")
            count = count.rstrip()
            if sep and count.isdigit() and count.isascii() and stack.strip():
                value = float(count)
                if value < math.inf:
                    stack = stack.rstrip()
                    counts[stack] = get(stack, 0.0) + value
                    continue
            if not line.strip():
                continue
            parsed = parse_line(line)
            if parsed is None:
                ignored += 1
                continue
            stack, value = parsed
            counts[stack] = get(stack, 0.0) + value
    return counts, ignored


# (name in the stack, below the delimiter) -> (frame name, kind)
FrameNamer = Callable[[str, bool], tuple[str, FrameKind]]


def build_profile(
    counts: dict[str, float],
    sample_type: SampleType | None = None,
    frame_of: FrameNamer | None = None,
) -> ProfileBuilder:
    """Intern folded stacks into a builder, guessing frame kinds from their names (or, with
    ``frame_of``, from what it says of each distinct name).

    Stacks are visited in frame-wise sorted order (``;`` sorts first), so each one shares
    its longest common prefix with the one before it: only the differing tail needs new
    tree nodes, and those are known to be new, so no (parent, frame) lookup is needed.
    This keeps a million-sample profile of 3 million tree nodes within seconds.
    """
    builder = ProfileBuilder([sample_type or SampleType("samples", "count")])
    guess = KindGuesser()
    above: dict[str, int] = {}  # frame ids by name, above the `-` delimiter
    below: dict[str, int] = {}  # ... and at or below it (GPU frames)
    intern_frame = builder.frames.intern
    get_above = above.get
    parents, frames = builder.stacks.bulk_columns()
    leaves: list[int] = []  # the leaf node of each stack, in sorted order
    prev: list[str] = []  # frame names of the previous stack
    path: list[int] = []  # its node ids
    stacks = sorted(counts, key=stack_order)
    for stack in stacks:
        names = split_stack(stack)
        k = 0
        for a, b in zip(names, prev, strict=False):
            if a != b:
                break
            k += 1
        first_new = len(frames)
        n_new = len(names) - k
        if n_new == 0:  # a prefix of the previous stack: only with NUL bytes in names
            leaves.append(path[k - 1])
            continue
        delim = names.index(DELIMITER) if DELIMITER in names else len(names)
        if delim >= len(names):  # the common case: no GPU part
            tail = names[k:]
            ids = list(map(get_above, tail))  # C-level loop; None for names not seen yet
            if None in ids:
                for j, name in enumerate(tail):
                    if ids[j] is None:
                        fid = get_above(name)
                        if fid is None:
                            fid = above[name] = intern_frame(
                                *frame_of(name, False) if frame_of else (name, guess(name, False))
                            )
                        ids[j] = fid
        else:
            ids = []
            for pos in range(k, len(names)):
                name = names[pos]
                table = below if pos > delim else above
                fid = table.get(name)
                if fid is None:
                    below_delimiter = pos > delim
                    fid = table[name] = intern_frame(
                        *frame_of(name, below_delimiter)
                        if frame_of
                        else (name, guess(name, below_delimiter))
                    )
                ids.append(fid)
        parents.append(path[k - 1] if k else EMPTY_STACK)
        parents.extend(range(first_new, first_new + n_new - 1))
        frames.extend(cast(list[int], ids))  # every None was filled in above
        del path[k:]
        path.extend(range(first_new, first_new + n_new))
        prev = names
        leaves.append(path[-1])
    builder.stacks.bulk_done()
    values = np.fromiter(map(counts.__getitem__, stacks), np.float64, len(stacks))
    builder.add_many(np.asarray(leaves, dtype=np.int64), values.reshape(-1, 1))
    return builder


def stack_order(stack: str) -> str:
    """Sort key that orders stacks frame by frame (a NUL sorts before every name byte)."""
    if ESCAPED in stack:  # a `;` inside a frame name is not a separator
        return "\x00".join(split_stack(stack))
    return stack.replace(";", "\x00")


def load(source: Input, **_: object) -> Profile:
    with _cyclic_gc_paused():
        counts, ignored = read_counts(source)
        if not counts:
            raise InputError(source.path, "no folded stacks found (expected lines like 'a;b;c 42')")
        builder = build_profile(counts)
    builder.meta["ignored_lines"] = ignored
    return builder.build()


@contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """Interning makes a list per stack and no reference cycles: the collector's passes
    over millions of allocations would find nothing (they cost about 5% of a load)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


__all__ = ["FORMAT", "FrameKind", "build_profile", "load", "parse_line", "read_counts", "sniff"]
