"""What one input may cost: limits that keep the work and memory of reading an input in
proportion to its size, whatever it holds.

Readers stream their input and keep what they aggregate, so a large input costs its size
and no more; these limits are for what a small input can make expensive:

* one line of a text format (folded, ``perf script``) and one JSON event or value, which
  a reader must hold whole: a megabyte of gzip can inflate to a gigabyte-long line;
* the decompressed size of a gzip input that a format reads whole (pprof, speedscope,
  a memory snapshot, an Nsight export copied to disk), relative to its compressed size;
* the objects a pickle may build, counted with every reference to a container as a copy
  of it (what walking the result costs), relative to the pickle's size.

Each limit is far above what real profiles reach, is named in the error when hit, and can
be raised with its environment variable.
"""

from __future__ import annotations

import os

MIB = 1 << 20


def _setting(name: str, default: int) -> int:
    try:
        value = int(os.environ.get(name, ""))
    except ValueError:
        return default
    return value if value > 0 else default


MAX_LINE_ENV = "AIFLAME_MAX_LINE_MIB"
MAX_TOKEN_ENV = "AIFLAME_MAX_TOKEN_MIB"
MAX_INFLATION_ENV = "AIFLAME_MAX_INFLATION"
MAX_OBJECTS_ENV = "AIFLAME_MAX_OBJECTS_PER_BYTE"

# Decompressed bytes always allowed, whatever the ratio (small inputs compress well).
INFLATION_FLOOR = 256 * MIB
# Objects always allowed to a pickle, whatever its size.
OBJECTS_FLOOR = 2_000_000


def max_line() -> int:
    """Bytes in one line of text (real folded stacks and perf lines: kilobytes)."""
    return _setting(MAX_LINE_ENV, 64) * MIB


def max_token() -> int:
    """Bytes in one JSON event or value, or in one string of a pickle."""
    return _setting(MAX_TOKEN_ENV, 64) * MIB


def max_inflation() -> int:
    """Decompressed bytes per compressed byte of gzip input read whole (real profiles:
    5x to 50x; gzip's most is about 1,000x)."""
    return _setting(MAX_INFLATION_ENV, 200)


def max_decompressed(compressed: int) -> int:
    return max(INFLATION_FLOOR, max_inflation() * compressed)


def max_objects(nbytes: int) -> int:
    """Objects a pickle of ``nbytes`` may build, references to containers counted as
    copies (a real snapshot: about 1.5 per byte)."""
    return OBJECTS_FLOOR + _setting(MAX_OBJECTS_ENV, 32) * nbytes


def mib(nbytes: int) -> str:
    return f"{nbytes / MIB:,.0f} MiB"


def line_too_long(limit: int) -> str:
    return (
        f"a line longer than {mib(limit)}, the most one line of text may hold "
        f"(set {MAX_LINE_ENV} to raise it)"
    )


def token_too_long(what: str, limit: int) -> str:
    return (
        f"{what} longer than {mib(limit)}, the most one may hold (set {MAX_TOKEN_ENV} to raise it)"
    )


def inflated_too_much(compressed: int, limit: int) -> str:
    return (
        f"gzip data of {compressed:,} bytes inflates beyond {mib(limit)} "
        f"({max_inflation()}x, the most this format may inflate; set {MAX_INFLATION_ENV} "
        "to raise it)"
    )


__all__ = [
    "inflated_too_much",
    "line_too_long",
    "max_decompressed",
    "max_inflation",
    "max_line",
    "max_objects",
    "max_token",
    "token_too_long",
]
