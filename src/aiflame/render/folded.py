"""Folded stacks output: ``root;...;leaf VALUE`` lines, sorted, names as stored (a ``;``
inside a name written ``\\;``, see :mod:`aiflame.model.folded`; line breaks inside a name
written as spaces: one stack is one line)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from aiflame.model import Profile
from aiflame.model.folded import escape_name
from aiflame.model.stacks import depths_of


def one_line(text: str) -> str:
    """``text`` with its line breaks as spaces (a folded stack is one line)."""
    if "\n" in text or "\r" in text:
        return text.replace("\r\n", " ").replace("\n", " ").replace("\r", " ")
    return text


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
        lines.append((one_line(";".join(map(escape_name, profile.stack_names(stack)))), value))
    # Stacks may repeat once names are taken alone (frames differing only in kind/file).
    merged: dict[str, float] = {}
    for stack_str, value in lines:
        merged[stack_str] = merged.get(stack_str, 0.0) + value
    for stack_str in sorted(merged):
        yield f"{stack_str} {format_value(merged[stack_str])}"


def render_folded(profile: Profile, metric: str | None = None) -> str:
    out = "\n".join(folded_lines(profile, metric))
    return out + "\n" if out else out


# -- differential ("stack base test") output, as FlameGraph's difffolded.pl writes it ---------


def format_perl_number(v: float) -> str:
    """A number as Perl prints it: integers exactly, other values with 15 significant digits."""
    if v == int(v):
        return str(int(v))
    return f"{v:.15g}"


def stack_strings(profile: Profile, wanted: np.ndarray, chunk: int = 16384) -> list[str]:
    """``root;...;leaf`` of each stack id in ``wanted``, in the same order.

    The ancestors of a chunk of stacks are gathered with numpy into a (stack, level) grid of
    name pieces, and each row is one ``str.join``: a per-frame Python walk would cost an
    interpreter step per frame, several times slower on deep profiles. A chunk holding a
    stack deeper than _DEEP frames is done again with each such stack joined alone, so that
    the grid stays small (one stack of 100,000 frames would make it billions of cells).
    """
    names = profile.strings.strings
    piece = np.array(
        [";" + one_line(escape_name(names[n])) for n in profile.frames.name] + [""], dtype=object
    )
    parent = profile.stacks.parents_array()
    frame = profile.stacks.frames_array()
    wanted = np.asarray(wanted, dtype=np.int64)
    depth: np.ndarray | None = None  # frames per stack, computed once a deep one is seen
    out: list[str] = []
    for start in range(0, len(wanted), chunk):
        cur = wanted[start : start + chunk]
        texts = _grid_strings(cur, parent, frame, piece, _DEEP)
        if texts is None:
            if depth is None:
                depth = np.append(depths_of(parent) + 1, 0)
            deep = depth[cur] > _DEEP
            texts = _grid_strings(np.where(deep, -1, cur), parent, frame, piece, None)
            assert texts is not None  # no depth limit: always a result
            for k in np.flatnonzero(deep).tolist():
                texts[k] = _alone(int(cur[k]), parent, frame, piece)
        out.extend(texts)
    return out


_DEEP = 4096  # frames beyond which a stack is joined alone


def _grid_strings(
    cur: np.ndarray, parent: np.ndarray, frame: np.ndarray, piece: np.ndarray, most: int | None
) -> list[str] | None:
    """The strings of stacks ``cur`` (-1: "") by the grid, or None when one is deeper
    than ``most`` levels."""
    pad = len(piece) - 1  # the empty piece, left of short stacks
    levels: list[np.ndarray] = []  # leaf first
    while True:
        live = cur >= 0
        if not live.any():
            break
        if most is not None and len(levels) >= most:
            return None
        at = np.where(live, cur, 0)
        levels.append(np.where(live, frame[at], pad))
        cur = np.where(live, parent[at], -1)
    if not levels:
        return ["" for _ in range(len(cur))]
    grid = piece[np.stack(levels[::-1], axis=1)]
    return ["".join(row)[1:] for row in grid.tolist()]


def _alone(sid: int, parent: np.ndarray, frame: np.ndarray, piece: np.ndarray) -> str:
    pieces = []
    while sid >= 0:
        pieces.append(piece[frame[sid]])
        sid = int(parent[sid])
    pieces.reverse()
    return "".join(pieces)[1:]


def render_diff_folded(profile: Profile, truncate: bool = False) -> str:
    """``stack base test`` lines of a profile made by :func:`aiflame.transforms.diff.diff_profiles`.

    Values print as ``difffolded.pl`` prints them: fractions kept, and normalized base values
    truncated to integers (its ``int()``). ``truncate`` drops every fraction, as
    ``inferno-diff-folded`` does. Lines are sorted by stack (difffolded.pl leaves them in hash
    order; flamegraph.pl sorts its input anyway).
    """
    diff = profile.meta.get("diff")
    if not isinstance(diff, dict):
        raise ValueError("not a differential profile (no meta['diff']); use diff_profiles()")
    bcol, tcol = int(diff["base"]), int(diff["test"])
    stacks = profile.sample_stack
    has_stack = stacks >= 0  # an empty stack has no line
    ids, inverse = np.unique(stacks[has_stack], return_inverse=True)
    base = np.bincount(inverse, profile.values[has_stack, bcol], minlength=len(ids))
    test = np.bincount(inverse, profile.values[has_stack, tcol], minlength=len(ids))
    texts = stack_strings(profile, ids)
    if len(set(texts)) < len(texts):  # frames differing only in kind/file share a name path
        merged: dict[str, list[float]] = {}
        for text, b, t in zip(texts, base.tolist(), test.tolist(), strict=True):
            acc = merged.setdefault(text, [0.0, 0.0])
            acc[0] += b
            acc[1] += t
        texts = list(merged)
        base = np.array([v[0] for v in merged.values()])
        test = np.array([v[1] for v in merged.values()])
    normalized = bool(diff.get("normalized"))
    return format_diff_lines(texts, base, test, truncate or normalized, truncate)


def format_diff_lines(
    stacks: list[str],
    base: np.ndarray,
    test: np.ndarray,
    truncate_base: bool = False,
    truncate_test: bool = False,
) -> str:
    """``stack base test`` lines sorted by stack; numbers printed as Perl prints them."""
    if truncate_base:
        base = np.trunc(base)
    if truncate_test:
        test = np.trunc(test)
    bs, ts = _perl_numbers(base), _perl_numbers(test)
    order = sorted(range(len(stacks)), key=stacks.__getitem__)
    return "".join([f"{stacks[i]} {bs[i]} {ts[i]}\n" for i in order])


def _perl_numbers(values: np.ndarray) -> list[str]:
    if np.all(np.trunc(values) == values) and np.all(np.abs(values) < 2**53):
        return [str(v) for v in values.astype(np.int64).tolist()]
    return [format_perl_number(v) for v in values.tolist()]
