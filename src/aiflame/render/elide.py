"""Names cut to a terminal column's width that stay apart: elided in the middle.

Cutting at the end makes every PyTorch elementwise kernel read ``void at::native::
elementwise_kernel<128, 4, at::nativ…``: what tells them apart (the functor) comes much
later. :func:`distinct_labels` keeps each name's start and, after an ``…``, either its end
(when the start already tells it from the other names of the column) or the stretch where
it first differs from the name most like it, as speedscope elides labels in the middle.
:func:`table_labels` first shortens kernel names the way ``--kernel-names short`` does.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from aiflame.symbolize.cxxnames import distinct_short_names

ELLIPSIS = "…"
MIN_WIDTH = 12
MIN_TAIL = 8  # characters of a name's end worth showing after its start
WORD_SLACK = 8  # characters of the start given up so that the end starts with a word


def elide_middle(text: str, width: int) -> str:
    """``text`` within ``width`` characters: its start and end around an ``…``."""
    if len(text) <= width:
        return text
    width = max(width, MIN_WIDTH)
    head = (width - 1) * 2 // 3
    return text[:head] + ELLIPSIS + text[len(text) - (width - 1 - head) :]


def _differs_at(name: str, others: Sequence[str]) -> tuple[int, int]:
    """How many characters ``name`` shares, at its start and at its end, with the other
    names most like it there: where it starts to differ, from either side."""
    start = end = 0
    for o in others:
        if o != name:
            start = max(start, _common_prefix(name, o))
            end = max(end, _common_prefix(name[::-1], o[::-1]))
    return start, end


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _lead(name: str, width: int) -> int:
    """How much of the start to keep: the name up to its first bracket (``void ns::kernel<``)
    when that leaves room, else two thirds of the width."""
    plain = name.replace("(anonymous namespace)", "_" * len("(anonymous namespace)"))
    bracket = next((i + 1 for i, c in enumerate(plain) if c in "<("), len(name))
    return bracket if bracket <= (width - 1) * 2 // 3 else (width - 1) * 2 // 3


def _head_and_tail(name: str, width: int, at: tuple[int, int]) -> str | None:
    """The start, ``…``, the end; None unless the start or the end tells the name apart."""
    start, end = at
    word_end = start
    while _in_word(name, word_end):
        word_end += 1  # the start up to the end of the word that tells the name apart
    lead = _lead(name, width)
    heads = [lead] if start < lead else [word_end, lead]
    for head in [*heads, start + 1]:
        tail = width - 1 - head
        if tail < MIN_TAIL:
            continue
        # The end from the start of a word, where a few characters of the start allow it.
        cut = len(name) - tail
        word = cut
        while word > max(cut - WORD_SLACK, head + 1) and _in_word(name, word - 1):
            word -= 1
        if word < cut and not _in_word(name, word - 1):
            head, tail = head - (cut - word), tail + (cut - word)
        if start < head or end < tail:
            return name[:head] + ELLIPSIS + name[len(name) - tail :]
    return None


def _in_word(name: str, i: int) -> bool:
    return 0 <= i < len(name) and (name[i].isalnum() or name[i] == "_")


def _head_and_window(name: str, width: int, at: int) -> str:
    """The start, ``…``, then the stretch from the start of the word where the name differs."""
    lead = _lead(name, width)
    room = width - lead - 1
    start = at
    while start > max(lead, at - room // 2) and _in_word(name, start - 1):
        start -= 1
    start = max(lead, min(start, len(name) - room))  # near the end: as much as fits
    piece = name[start : start + room]
    if start + room < len(name):
        piece = piece[: room - 1] + ELLIPSIS
    return name[:lead] + ELLIPSIS + piece


def _tail(name: str, width: int) -> str:
    return ELLIPSIS + name[len(name) - (width - 1) :]


def distinct_labels(names: Sequence[str], width: int) -> list[str]:
    """``names`` (rows of one column) within ``width`` characters each, elided in the middle
    so that different names keep different labels."""
    width = max(width, MIN_WIDTH)
    distinct = list(dict.fromkeys(names))
    # Each long name's labels, best first: start and end, start and where it differs, end.
    options: dict[str, list[str]] = {}
    for name in distinct:
        if len(name) <= width:
            options[name] = [name]
            continue
        at = _differs_at(name, distinct)
        ends = _head_and_tail(name, width, at)
        options[name] = [*([ends] if ends else []), _head_and_window(name, width, at[0])]
        options[name].append(_tail(name, width))
    pick = dict.fromkeys(distinct, 0)
    for _ in range(3):  # names whose labels coincide move on to their next option
        by_label: dict[str, list[str]] = {}
        for name in distinct:
            by_label.setdefault(options[name][pick[name]], []).append(name)
        clashes = [n for same in by_label.values() if len(same) > 1 for n in same]
        movable = [n for n in clashes if pick[n] + 1 < len(options[n])]
        if not movable:
            break
        for n in movable:
            pick[n] += 1
    return [options[n][pick[n]] for n in names]


def table_labels(names: Sequence[str], width: int) -> list[str]:
    """Labels of a table's name column: names that fit as they are; others (kernels) in
    their short form that keeps what tells them apart (``elementwise_kernel<…,
    MulFunctor<float>>``, :mod:`aiflame.symbolize.cxxnames`), then, while still too long,
    with nvcc's lambdas as ``[lambda#N]`` and without namespaces (where no two labels then
    merge), then elided in the middle."""
    long = [n for n in dict.fromkeys(names) if len(n) > width]
    short = distinct_short_names(long) if long else {}
    shown = {n: short.get(n, n) for n in long}
    for step in (_without_lambda_parameters, _without_namespaces):
        shorter = {n: step(s) if len(s) > width else s for n, s in shown.items()}
        if len(set(shorter.values())) == len(set(shown.values())):
            shown = shorter
    return distinct_labels([shown.get(n, n) for n in names], width)


# nvcc's lambdas, told apart by their instance number (GCC's read {lambda(int)#2})
_NVCC_LAMBDA = re.compile(r"\[lambda\([^()]*\) \(instance (\d+)\)\]")


def _without_lambda_parameters(name: str) -> str:
    """``[lambda(int, int) (instance 2)]`` -> ``[lambda#2]``."""
    return _NVCC_LAMBDA.sub(r"[lambda#\1]", name)


def _without_namespaces(name: str) -> str:
    """``at::native::(anonymous namespace)::kern<…>`` -> ``kern<…>``."""
    plain = name.replace("(anonymous namespace)", "_" * len("(anonymous namespace)"))
    cut = next((i for i, c in enumerate(plain) if c in "<( "), len(name))
    scope = plain.rfind("::", 0, cut)
    return name[scope + 2 :] if scope >= 0 and " " not in plain[:cut] else name
