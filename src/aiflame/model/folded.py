"""Frame names in folded stacks (``root;child;leaf 42``), where ``;`` separates frames.

FlameGraph's and inferno's collapsers replace a ``;`` inside a function name by ``:``,
which loses the name. aiflame writes it as ``\\;`` instead, and reads ``\\;`` back as a
``;`` inside the frame, so a profile written as folded stacks and read again has the same
frames. Names without ``;`` (nearly all) are written exactly as they are, so the output
stays byte-identical to the collapsers' where they agree. (flamegraph.pl, which knows no
escape, splits such a frame in two at the ``;``.)
"""

from __future__ import annotations

import re

SEPARATOR = ";"
ESCAPED = "\\;"
_SPLIT = re.compile(r"(?<!\\);")


def escape_name(name: str) -> str:
    """``name`` as one frame of a folded stack."""
    return name.replace(SEPARATOR, ESCAPED) if SEPARATOR in name else name


def split_stack(stack: str) -> list[str]:
    """The frame names of a folded stack (the part before its count), root first."""
    if ESCAPED not in stack:
        return stack.split(SEPARATOR)
    return [part.replace(ESCAPED, SEPARATOR) for part in _SPLIT.split(stack)]
