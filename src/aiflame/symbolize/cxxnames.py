"""Short GPU kernel names that stay distinct: ``--kernel-names short`` for a whole profile.

Folding every template argument (``elementwise_kernel<…>``) merges kernels that differ only
there: every PyTorch elementwise kernel, every cloverleaf ``par_ranged2d_kernel<lambda>``.
:func:`distinct_short_names` folds them, then, among the kernels that fold alike, shows the
template arguments in which they differ (recursively, each shortened the same way) and
elides the ones they share:

    void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<
      at::native::BinaryFunctor<float, float, float,
      at::native::binary_internal::MulFunctor<float> > >(...)::{lambda(int)#1}>(int, ...)
    -> at::native::elementwise_kernel<…, BinaryFunctor<…, MulFunctor<float>>>

    void clover::par_ranged1d_kernel<update_halo_kernel(int, ...)::[lambda(int) (instance 5)]>(...)
    -> clover::par_ranged1d_kernel<update_halo_kernel::[lambda(int) (instance 5)]>

Inside arguments, namespaces and parameter lists are left out, and a wrapper that all the
kernels of a group share around their one differing argument (``gpu_kernel_impl_nocast<X>
::{lambda(int)#1}``) is elided to that argument. Names that would still coincide (overloads
that differ in their parameters only) keep their full name.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from typing import NamedTuple

ELLIPSIS = "…"
SHORT_ARGUMENT = 24  # an argument this short is shown whole rather than folded
_RETURN_TYPES = ("void ", "__global__ ", "static ", "extern ", "inline ")
_OPERATOR_CHARS = "<>=!+-*/%^&|~"
_QUALIFIER = re.compile(r"(?:\b[A-Za-z_]\w*|\(anonymous namespace\))::")
_TRAILING = re.compile(r"^(?:\s*(?:const|volatile|&&|&|noexcept))+")
# What a parameter list follows: a name, or an operator (``operator()``, ``operator<<``)
_CALLEE_END = re.compile(r"(?:\w|\boperator(?:\(\)|\[\]|[<>=!+\-*/%^&|~,]+))$")
CHAIN_KEPT = 3  # scopes of an argument shown whole: a::b::c; longer ones as a::…::z


class Tmpl(NamedTuple):
    """A template argument list: one node per argument."""

    args: tuple[Node, ...]


class Params(NamedTuple):
    """A function's parameter list, as written."""

    text: str


class Atom(NamedTuple):
    """A group kept whole: ``(anonymous namespace)``, ``{lambda(int)#1}``, ``[lambda...]``,
    a cast ``(unsigned long)4``."""

    text: str


Item = str | Tmpl | Params | Atom
Node = tuple[Item, ...]


class _Unparsable(Exception):
    pass


_CLOSE = {"(": ")", "[": "]", "{": "}", "<": ">"}


class _Parser:
    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0

    def node(self, stops: str) -> Node:
        s, n = self.s, len(self.s)
        items: list[Item] = []
        buf: list[str] = []

        def flush() -> None:
            if buf:
                items.append("".join(buf))
                buf.clear()

        while self.i < n:
            c = s[self.i]
            if c in stops:
                break
            if c == "o" and s.startswith("operator", self.i) and not _ident_before(s, self.i):
                buf.append(self._operator())
            elif c == "<" and s.startswith(("<lambda", "<unnamed"), self.i):
                flush()
                items.append(Atom(self._balanced("<")))
            elif c == "<":
                flush()
                items.append(self._template())
            elif c == "(":
                before = "".join(buf).rstrip() or (items and items[-1])
                flush()
                text = self._balanced("(")
                is_call = isinstance(before, (Tmpl, Params)) or (
                    isinstance(before, str) and bool(_CALLEE_END.search(before))
                )
                if text == "(anonymous namespace)" or not is_call:
                    items.append(Atom(text))
                else:
                    items.append(Params(text[1:-1]))
            elif c in "[{":
                flush()
                items.append(Atom(self._balanced(c)))
            elif c in ">)]}":
                raise _Unparsable(s)
            else:
                buf.append(c)
                self.i += 1
        flush()
        return tuple(items)

    def _operator(self) -> str:
        s, start = self.s, self.i
        self.i += len("operator")
        if s.startswith(("()", "[]"), self.i):
            self.i += 2
        else:
            while self.i < len(s) and s[self.i] in _OPERATOR_CHARS:
                self.i += 1
        return s[start : self.i]

    def _template(self) -> Tmpl:
        self.i += 1  # "<"
        args: list[Node] = []
        while True:
            args.append(_strip(self.node(",>")))
            if self.i >= len(self.s):
                raise _Unparsable(self.s)
            sep = self.s[self.i]
            self.i += 1
            if sep == ">":
                return Tmpl(tuple(args))

    def _balanced(self, open_: str) -> str:
        """The group from ``open_`` at the cursor to its closing bracket, nested alike."""
        close, depth, start = _CLOSE[open_], 0, self.i
        while self.i < len(self.s):
            c = self.s[self.i]
            self.i += 1
            if c == open_:
                depth += 1
            elif c == close:
                depth -= 1
                if depth == 0:
                    return self.s[start : self.i]
        raise _Unparsable(self.s)


def _ident_before(s: str, i: int) -> bool:
    return i > 0 and (s[i - 1].isalnum() or s[i - 1] == "_")


def _strip(node: Node) -> Node:
    """Leading and trailing blanks of an argument off."""
    items = list(node)
    if items and isinstance(items[0], str):
        items[0] = items[0].lstrip()
    if items and isinstance(items[-1], str):
        items[-1] = items[-1].rstrip()
    return tuple(i for i in items if i != "")


def parse(name: str) -> Node | None:
    """The structure of a demangled C++ name, or None when its brackets do not balance."""
    p = _Parser(name)
    try:
        node = p.node("")
    except _Unparsable:
        return None
    return _strip(node)


# -- rendering ----------------------------------------------------------------------------------


def full(node: Node) -> str:
    """The node as a name again, spacing normalised (``a<b<c>>``, ``x, y``)."""
    out = []
    for item in node:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, Tmpl):
            out.append("<" + ", ".join(full(a) for a in item.args) + ">")
        elif isinstance(item, Params):
            out.append("(" + item.text + ")")
        else:
            out.append(item.text)
    return "".join(out).strip()


def _kernel_items(node: Node) -> Node:
    """A kernel's name without its return type and without what follows its parameters."""
    items = list(node)
    if items and isinstance(items[0], str):
        head = items[0]
        while head.startswith(_RETURN_TYPES):
            head = head.split(" ", 1)[1].lstrip()
        items[0] = head
    for k, item in enumerate(items):
        if isinstance(item, Params):
            return tuple(items[:k])
    return tuple(items)


def _argument_items(node: Node) -> Node:
    """An argument without its namespaces, parameter lists and the qualifiers after them."""
    items: list[Item] = []
    after_params = False
    for item in node:
        if isinstance(item, Params):
            after_params = True
            continue
        if isinstance(item, str):
            if after_params:
                item = _TRAILING.sub("", item)
            item = _QUALIFIER.sub("", item)
        elif isinstance(item, Atom):
            if item.text == "(anonymous namespace)":
                continue
            item = Atom(_QUALIFIER.sub("", item.text))
        after_params = False
        if item != "":
            items.append(item)
    if items and isinstance(items[0], str):
        items[0] = items[0].removeprefix("::")
    return tuple(items)


def _render(node: Node, slots: list[str] | None) -> str:
    """``node`` with its template lists folded (``<…>``) or, in order, replaced by ``slots``."""
    out = []
    k = 0
    for item in node:
        if isinstance(item, Tmpl):
            out.append(slots[k] if slots is not None else f"<{ELLIPSIS}>")
            k += 1
        elif isinstance(item, str):
            out.append(item)
        elif isinstance(item, Atom):
            out.append(item.text)
    return "".join(out).strip()


def _simple(node: Node) -> str:
    """An argument, whole but for namespaces and parameter lists."""
    out = []
    for item in node:
        if isinstance(item, Tmpl):
            out.append("<" + ", ".join(_simple(_argument_items(a)) for a in item.args) + ">")
        elif isinstance(item, str):
            out.append(item)
        elif isinstance(item, Atom):
            out.append(item.text)
    return "".join(out).strip()


def _templates(node: Node) -> list[Tmpl]:
    return [i for i in node if isinstance(i, Tmpl)]


# -- distinct short names -----------------------------------------------------------------------


def _short_arguments(nodes: list[Node]) -> list[str]:
    """Short forms of sibling template arguments (already stripped of namespaces):
    distinct wherever the arguments differ in what is shown."""
    bases = [_render(n, None) for n in nodes]
    groups: dict[str, list[int]] = defaultdict(list)
    for i, b in enumerate(bases):
        groups[b].append(i)
    out = [""] * len(nodes)
    for base, members in groups.items():
        if len({full(nodes[i]) for i in members}) == 1:
            whole = _simple(nodes[members[0]])
            shown = whole if len(whole) <= SHORT_ARGUMENT else base
            for i in members:
                out[i] = shown
            continue
        only_group = len(groups) == 1
        for i, s in zip(members, _expand([nodes[i] for i in members], only_group), strict=True):
            out[i] = s
    # Lambdas nest: f::{lambda()#2}::operator()::{lambda()#7}::operator()::{lambda(float)#1}
    # reads as f::…::{lambda(float)#1} where that tells these arguments apart still.
    compact = [_compact(s) for s in out]
    if len(set(compact)) == len(set(out)):
        return compact
    return out


def _compact(text: str) -> str:
    parts = _split_scopes(text)
    if len(parts) <= CHAIN_KEPT:
        return text
    return f"{parts[0]}::{ELLIPSIS}::{parts[-1]}"


def _split_scopes(text: str) -> list[str]:
    """``text`` cut at the ``::`` outside brackets; one part if the brackets do not pair."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        c = text[i]
        if c in "<([{":
            depth += 1
        elif c in ">)]}":
            depth -= 1
            if depth < 0:
                return [text]
        elif c == ":" and depth == 0 and text.startswith("::", i):
            parts.append(text[start:i])
            start = i + 2
            i += 1
        i += 1
    parts.append(text[start:])
    return parts if depth == 0 else [text]


def _expand(nodes: list[Node], elide_wrapper: bool) -> list[str]:
    """Nodes that fold alike (so with as many template lists): those lists, showing the
    arguments in which the nodes differ. With ``elide_wrapper``, when they differ in one
    argument only, that argument alone."""
    lists = [_templates(n) for n in nodes]
    slots: list[list[str]] = [[] for _ in nodes]
    differing: list[list[Node] | None] = []  # the arguments that differ (None: the lists)
    for j in range(len(lists[0])):
        args = [ls[j].args for ls in lists]
        if len({tuple(full(a) for a in a_) for a_ in args}) == 1:
            for s in slots:
                s.append(f"<{ELLIPSIS}>")
            continue
        if len({len(a) for a in args}) != 1:  # another number of arguments: shown whole
            for s, a_ in zip(slots, args, strict=True):
                s.append("<" + ", ".join(_simple(_argument_items(a)) for a in a_) + ">")
            differing.append(None)
            continue
        columns: list[list[str]] = []
        for p in range(len(args[0])):
            column = [_argument_items(a_[p]) for a_ in args]
            if len({full(c) for c in column}) == 1:
                columns.append([ELLIPSIS] * len(nodes))
            else:
                columns.append(_short_arguments(column))
                differing.append(column)
        for m, s in enumerate(slots):
            s.append("<" + ", ".join(_merge_ellipses([c[m] for c in columns])) + ">")
    if elide_wrapper and len(differing) == 1 and differing[0] is not None:
        return _short_arguments(differing[0])
    return [_render(n, s) for n, s in zip(nodes, slots, strict=True)]


def _merge_ellipses(parts: list[str]) -> list[str]:
    out: list[str] = []
    for p in parts:
        if not (p == ELLIPSIS and out and out[-1] == ELLIPSIS):
            out.append(p)
    return out


def short_kernel_name(name: str) -> str:
    """``void ns::kern<float, 4>(Params)`` -> ``ns::kern<…>``; unparsable names unchanged.

    The return type is dropped, template arguments are folded to ``<…>`` and the parameter
    list is cut; ``(anonymous namespace)`` and lambda names are kept.
    """
    if "<" not in name and "(" not in name:
        return name
    out: list[str] = []
    depth = 0  # nesting of <> and () outside what we keep
    i, n = 0, len(name)
    while i < n:
        c = name[i]
        if depth:
            if c in "<(":
                depth += 1
            elif c in ">)":
                depth -= 1
            i += 1
            continue
        if c == "(":
            if name.startswith("(anonymous namespace)", i):
                out.append("(anonymous namespace)")
                i += len("(anonymous namespace)")
                continue
            if not out or out[-1] == " ":  # "Memcpy DtoH (Device -> Pinned)": not C++
                return name
            break  # the parameter list: everything after it is the signature
        if c == "<":
            if name.startswith("<lambda", i) or name.startswith("<unnamed", i):
                out.append(c)
                i += 1
                continue
            out.append(f"<{ELLIPSIS}>")
            depth = 1
        elif c == " " and "".join(out) in _RETURN_WORDS:
            out.clear()  # "void kernel<...>" / "__global__ void k": drop the return type
        else:
            out.append(c)
        i += 1
    short = "".join(out).strip()
    return short or name


_RETURN_WORDS = frozenset(w.strip() for w in _RETURN_TYPES)


def distinct_short_names(names: Iterable[str]) -> dict[str, str]:
    """Full kernel name -> short name, for the kernels of one profile: the folded name
    (:func:`short_kernel_name`), with the template arguments in which kernels that fold
    alike differ."""
    unique = list(dict.fromkeys(names))
    out = {n: short_kernel_name(n) for n in unique}
    groups: dict[str, list[str]] = defaultdict(list)
    for n in unique:
        groups[out[n]].append(n)
    for members in groups.values():
        if len(members) < 2:
            continue
        nodes = [parse(m) for m in members]
        kernels = [_kernel_items(x) for x in nodes if x is not None]
        if len(kernels) < len(members) or len({_render(k, None) for k in kernels}) != 1:
            continue  # not understood: left folded, and below, where they coincide, whole
        for m, shown in zip(members, _expand(kernels, elide_wrapper=False), strict=True):
            out[m] = shown
    # What still coincides (kernels that differ in their parameters only) stays whole, but
    # for spacing (``a<b<c> >`` and ``a<b<c>>`` are one kernel).
    by_short: dict[str, list[str]] = defaultdict(list)
    for n, shown in out.items():
        by_short[shown].append(n)
    for same in by_short.values():
        if len({_normal(n) for n in same}) > 1:
            for n in same:
                out[n] = n
    return out


def _normal(name: str) -> str:
    node = parse(name)
    return full(node) if node is not None else name
