"""Folded stacks output: ``root;...;leaf VALUE`` lines, sorted, names as stored (a ``;``
inside a name written ``\\;``, see :mod:`aiflame.model.folded`; line breaks inside a name
written as spaces: one stack is one line; a stack of one blank frame written
``[no name]`` and a root frame starting with ``#`` (a comment line to folded readers) as
``\\#``, so that no sample is lost when the output is read again)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from aiflame.model import Profile
from aiflame.model.folded import escape_name
from aiflame.render.stackpaths import check_written, expanded, frames_per_stack, path_sums


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
    pairs = [(s, v) for s, v in profile.iter_stack_values(col) if v != 0 and s >= 0]
    ids = np.asarray([s for s, _ in pairs], dtype=np.int64)
    texts = stack_strings(profile, ids, "folded output")
    # Stacks may repeat once names are taken alone (frames differing only in kind/file).
    merged: dict[str, float] = {}
    for stack_str, (_, value) in zip(texts, pairs, strict=True):
        merged[stack_str] = merged.get(stack_str, 0.0) + value
    del texts
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


def folded_name(name: str) -> str:
    """``name`` as one frame of a folded line: ``;`` escaped, line breaks as spaces."""
    return one_line(escape_name(name))


# A stack of one blank frame would be a line of a count alone, which folded readers drop:
# it is written so (a blank frame among others stays blank, as stackcollapse writes it).
NO_NAME = "[no name]"


def stack_strings(profile: Profile, wanted: np.ndarray, what: str = "folded output") -> list[str]:
    """``root;...;leaf`` of each stack id in ``wanted``, in the same order.

    Each stack is one ``str.join`` of its frames' pieces, spelled out a chunk of frames at a
    time (:mod:`aiflame.render.stackpaths`): the work is what is written, and an output far
    larger than the profile is refused before it is built (``what`` names it).
    """
    names = profile.strings.strings
    pieces = [";" + folded_name(names[n]) for n in profile.frames.name]
    wanted = np.asarray(wanted, dtype=np.int64)
    lengths = np.fromiter((len(p) for p in pieces), dtype=np.int64, count=len(pieces))
    chars = path_sums(profile.stacks, lengths)[wanted]
    depth = frames_per_stack(profile.stacks)[wanted]
    check_written(
        what,
        int(chars.sum()) + 8 * len(wanted),
        int(depth.sum()),
        int(depth.max(initial=0)),
        len(profile.stacks),
    )
    piece = np.array([*pieces, ""], dtype=object)
    frame = profile.stacks.frames_array()
    out: list[str] = []
    for nodes, starts, ends in expanded(profile.stacks, wanted, root_first=True):
        flat = piece[frame[nodes]].tolist()
        out.extend("".join(flat[a:b])[1:] for a, b in zip(starts, ends, strict=True))
    # A line starting with "#" is a comment to folded readers: such a root is written "\#".
    return [COMMENT_ESCAPE + t[1:] if t[:1] == "#" else t if t.strip() else NO_NAME for t in out]


COMMENT_ESCAPE = "\\#"


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
    texts = stack_strings(profile, ids, "differential folded output")
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
