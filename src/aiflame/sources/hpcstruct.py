"""Reading HPCToolkit's program structure files (``*.hpcstruct``): what each address of a
load module is, as ``hpcstruct`` recovered it from the binary.

The XML nests ``LM`` (the load module) > ``F`` (a source file) > ``P`` (a procedure) >
``L`` (a loop) / ``A`` (inlined code) > ``S`` (a statement: a line and the address ranges
``v="{[beg-end) ...}"`` of its instructions; ``C`` is a call site, a statement too). An
inlined call is a pair of ``A``: the outer one gives the line of the call site, the inner
one the inlined function (its name, file and line). The scopes of an address are read the
way ``hpcprof`` reads them (``src/lib/profile/finalizers/struct.cpp``): the statement whose
ranges hold the address, and its enclosing procedure, loops and inlined calls.
"""

from __future__ import annotations

import gzip
import re
import xml.etree.ElementTree as ET
from bisect import bisect_right
from dataclasses import dataclass

from aiflame.symbolize.cxa import Demangler
from aiflame.symbolize.demangle import is_mangled

PROCEDURE, LOOP, CALL_SITE, INLINED, LINE = "procedure", "loop", "call site", "inlined", "line"

_RANGE = re.compile(r"\[(0x[0-9a-fA-F]+|\d+)-(0x[0-9a-fA-F]+|\d+)\)")


class StructError(ValueError):
    """Not an hpcstruct file, or a malformed one."""


@dataclass(frozen=True, slots=True)
class Scope:
    """One level of an address's structure: a procedure (``name`` is its pretty name,
    ``line`` its first line), a loop (its header line), the line of an inlined call, the
    inlined function, or the statement's own line."""

    kind: str
    name: str
    file: str
    line: int


@dataclass(frozen=True, slots=True)
class Procedure:
    name: str
    link_name: str
    file: str
    line: int
    entry: int  # the address of its first instruction


class Structure:
    """The scopes of every address of one load module."""

    def __init__(self, module: str, leaves: list[tuple[int, int, tuple[Scope, ...]]]) -> None:
        self.module = module
        leaves.sort(key=lambda x: x[0])  # stable: the first statement listed wins overlaps
        self._starts = [s for s, _, _ in leaves]
        self._ends = [e for _, e, _ in leaves]
        self._scopes = [c for _, _, c in leaves]
        self.procedures: list[Procedure] = []

    def scopes(self, address: int) -> tuple[Scope, ...] | None:
        """Outermost first: procedure, loops and inlined calls, then the statement's line;
        None where hpcstruct says nothing about the address."""
        k = bisect_right(self._starts, address) - 1
        if k >= 0 and address < self._ends[k]:
            return self._scopes[k]
        return None


def _ranges(text: str | None) -> list[tuple[int, int]]:
    return [(int(a, 0), int(b, 0)) for a, b in _RANGE.findall(text or "")]


def read_structure(path: str) -> list[Structure]:
    """The load modules of one hpcstruct file (usually one); ``.gz`` copies are read too."""
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            return _parse(f, path)
    except (OSError, EOFError) as e:
        raise StructError(f"{path}: cannot read: {e}") from None
    except ET.ParseError as e:
        raise StructError(f"{path}: not a valid hpcstruct file ({e})") from None


class _Readable:
    """Function names as people read them: hpcstruct writes the mangled name where it
    could not demangle one (GPU binaries' inlined functions, some compilers' symbols)."""

    def __init__(self) -> None:
        self._demangler: Demangler | None = None

    def __call__(self, name: str) -> str:
        if not is_mangled(name):
            return name
        if self._demangler is None:
            self._demangler = Demangler()
        return self._demangler.many([name])[0]


def _parse(f, path: str) -> list[Structure]:  # type: ignore[no-untyped-def]
    out: list[Structure] = []
    leaves: list[tuple[int, int, tuple[Scope, ...]]] = []
    procedures: list[Procedure] = []
    module = ""
    # One entry per open element: (tag, file for the statements inside, scopes so far,
    # line of the call site when the element is the outer A of an inlined call).
    stack: list[tuple[str, str, tuple[Scope, ...], int]] = []
    seen_root = False
    readable = _Readable()
    for event, el in ET.iterparse(f, events=("start", "end")):
        tag = el.tag
        if not seen_root:
            if tag != "HPCToolkitStructure":
                raise StructError(f"{path}: not an hpcstruct file (root <{tag}>)")
            seen_root = True
            continue
        if event == "end":
            if tag in ("S", "C"):
                el.clear()
                continue
            if tag == "LM":
                out.append(Structure(module, leaves))
                out[-1].procedures = procedures
                leaves, procedures = [], []
            if stack and tag == stack[-1][0].rstrip("2"):
                stack.pop()
            el.clear()
            continue
        a = el.attrib
        top = stack[-1] if stack else ("", "", (), 0)
        _, file, scopes, _ = top
        if tag == "LM":
            module = a.get("n", "")
            stack.append(("LM", "", (), 0))
        elif tag == "F":
            stack.append(("F", a.get("n", ""), scopes, 0))
        elif tag == "P":
            line = int(a.get("l", "0") or 0)
            name = readable(a.get("n", "") or a.get("ln", ""))
            entry = _ranges(a.get("v"))
            procedures.append(
                Procedure(name, a.get("ln", name), file, line, entry[0][0] if entry else 0)
            )
            stack.append(("P", file, (Scope(PROCEDURE, name, file, line),), 0))
        elif tag == "L":
            lfile = a.get("f") or file
            line = int(a.get("l", "0") or 0)
            stack.append(("L", lfile, (*scopes, Scope(LOOP, "", lfile, line)), 0))
        elif tag == "A":
            if top[0] != "A":  # the outer A: where the call is
                stack.append(("A", a.get("f") or file, scopes, int(a.get("l", "0") or 0)))
            else:  # the inner A: the inlined function, like a P
                ifile = a.get("f") or file
                call = Scope(CALL_SITE, "", file, top[3])
                callee = Scope(INLINED, readable(a.get("n", "")), ifile, int(a.get("l", "0") or 0))
                stack.append(("A2", ifile, (*scopes, call, callee), 0))
        elif tag in ("S", "C") and scopes:
            chain = (*scopes, Scope(LINE, "", file, int(a.get("l", "0") or 0)))
            for beg, end in _ranges(a.get("v")):
                leaves.append((beg, end, chain))
    return out
