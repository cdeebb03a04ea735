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
import zlib
from bisect import bisect_right
from dataclasses import dataclass

from aiflame.sources.inputs import corrupt_gzip
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


MAX_DEPTH = 1024  # scopes above a statement: real code nests loops and inlining tens deep


class Structure:
    """The scopes of every address of one load module.

    Scopes are stored once, as a tree (``scope`` and ``up`` columns: a statement inside
    20,000 nested inlined calls shares the chain above it with its neighbours), and an
    address's chain is spelled out when asked for.
    """

    def __init__(
        self,
        module: str,
        leaves: list[tuple[int, int, int, Scope]],
        scope: list[Scope],
        up: list[int],
    ) -> None:
        self.module = module
        leaves.sort(key=lambda x: x[0])  # stable: the first statement listed wins overlaps
        self._starts = [s for s, _, _, _ in leaves]
        self._ends = [e for _, e, _, _ in leaves]
        self._leaves = [(node, line) for _, _, node, line in leaves]
        self._scope, self._up = scope, up
        self.procedures: list[Procedure] = []

    def scopes(self, address: int) -> tuple[Scope, ...] | None:
        """Outermost first: procedure, loops and inlined calls, then the statement's line;
        None where hpcstruct says nothing about the address."""
        k = bisect_right(self._starts, address) - 1
        if k >= 0 and address < self._ends[k]:
            node, line = self._leaves[k]
            chain = [line]
            while node >= 0:
                chain.append(self._scope[node])
                node = self._up[node]
            return tuple(reversed(chain))
        return None


def _ranges(text: str | None) -> list[tuple[int, int]]:
    return [(int(a, 0), int(b, 0)) for a, b in _RANGE.findall(text or "")]


def read_structure(path: str) -> list[Structure]:
    """The load modules of one hpcstruct file (usually one); ``.gz`` copies are read too.
    A :class:`StructError` says what is wrong (without the path)."""
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            return _Parser().parse(f)
    except EOFError:
        raise StructError("truncated gzip data") from None
    except (gzip.BadGzipFile, zlib.error) as e:
        raise StructError(corrupt_gzip(e)) from None
    except OSError as e:
        raise StructError(f"cannot read ({e})") from None
    except ET.ParseError as e:
        raise StructError(f"not a valid hpcstruct file ({e})") from None


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


class _Parser:
    """One pass over the XML events, keeping a stack of the open elements."""

    def __init__(self) -> None:
        self.out: list[Structure] = []
        self.leaves: list[tuple[int, int, int, Scope]] = []
        self.procedures: list[Procedure] = []
        self.scope: list[Scope] = []  # the scope tree of the module being read
        self.up: list[int] = []
        self.depth: list[int] = []  # scopes in the chain ending at each node
        self.module = ""
        self.readable = _Readable()

    def node(self, scope: Scope, up: int) -> int:
        depth = self.depth[up] + 1 if up >= 0 else 1
        if depth > MAX_DEPTH:
            raise StructError(
                f"scopes nested deeper than {MAX_DEPTH:,} levels (loops and inlined calls), "
                "more than compiled code holds: a damaged file"
            )
        self.scope.append(scope)
        self.up.append(up)
        self.depth.append(depth)
        return len(self.scope) - 1

    def parse(self, f) -> list[Structure]:  # type: ignore[no-untyped-def]
        # One entry per open element: (tag, file for the statements inside, the innermost
        # scope node so far (-1: none), line of the call site when the element is the
        # outer A of an inlined call).
        stack: list[tuple[str, str, int, int]] = []
        seen_root = False
        for event, el in ET.iterparse(f, events=("start", "end")):
            tag = el.tag
            if not seen_root:
                if tag != "HPCToolkitStructure":
                    raise StructError(f"not an hpcstruct file (root <{tag}>)")
                seen_root = True
                continue
            if event == "end":
                if tag in ("S", "C"):
                    el.clear()
                    continue
                if tag == "LM":
                    self.end_module()
                if stack and tag == stack[-1][0].rstrip("2"):
                    stack.pop()
                el.clear()
                continue
            self.start(tag, el.attrib, stack)
        return self.out

    def end_module(self) -> None:
        found = Structure(self.module, self.leaves, self.scope, self.up)
        found.procedures = self.procedures
        self.out.append(found)
        self.leaves, self.procedures, self.scope, self.up, self.depth = [], [], [], [], []

    def start(self, tag: str, a: dict[str, str], stack: list[tuple[str, str, int, int]]) -> None:
        top = stack[-1] if stack else ("", "", -1, 0)
        _, file, node, _ = top
        if tag == "LM":
            self.module = a.get("n", "")
            stack.append(("LM", "", -1, 0))
        elif tag == "F":
            stack.append(("F", a.get("n", ""), node, 0))
        elif tag == "P":
            line = _line(a)
            name = self.readable(a.get("n", "") or a.get("ln", ""))
            entry = _ranges(a.get("v"))
            self.procedures.append(
                Procedure(name, a.get("ln", name), file, line, entry[0][0] if entry else 0)
            )
            stack.append(("P", file, self.node(Scope(PROCEDURE, name, file, line), -1), 0))
        elif tag == "L":
            lfile = a.get("f") or file
            stack.append(("L", lfile, self.node(Scope(LOOP, "", lfile, _line(a)), node), 0))
        elif tag == "A":
            if top[0] != "A":  # the outer A: where the call is
                stack.append(("A", a.get("f") or file, node, _line(a)))
            else:  # the inner A: the inlined function, like a P
                ifile = a.get("f") or file
                call = self.node(Scope(CALL_SITE, "", file, top[3]), node)
                inlined = Scope(INLINED, self.readable(a.get("n", "")), ifile, _line(a))
                callee = self.node(inlined, call)
                stack.append(("A2", ifile, callee, 0))
        elif tag in ("S", "C") and node >= 0:
            statement = Scope(LINE, "", file, _line(a))
            for beg, end in _ranges(a.get("v")):
                self.leaves.append((beg, end, node, statement))


def _line(a: dict[str, str]) -> int:
    text = a.get("l", "") or "0"
    if not text.isdigit() or not text.isascii():
        raise StructError(f'a line number l="{text[:40]}" that is not a number')
    return int(text)
