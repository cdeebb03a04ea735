"""The class a Python function belongs to, from the source file when it can be read.

Stacks recorded by PyTorch (and most samplers) carry a function's name, file and line, not
its qualified name, so ``forward`` of every ``nn.Module`` looks the same. When the file is
readable here (the usual case: the snapshot is opened on the machine that ran the code), its
syntax tree says which ``class`` encloses the ``def`` that spans the line, and the frame can
be shown as ``Attention > forward`` or ``Linear > __init__``. The file is parsed, never run.
"""

from __future__ import annotations

import ast
from bisect import bisect_right
from pathlib import Path
from typing import NamedTuple

MAX_SOURCE_BYTES = 4 << 20  # bigger files are generated code; not worth parsing


class Function(NamedTuple):
    """A ``def`` in a source file: its lines (decorators included) and where it belongs."""

    first: int  # first line: the first decorator's, else the def's (CPython's co_firstlineno)
    end: int
    name: str
    owner: str  # dotted class path, or "" for a function outside any class


class ClassResolver:
    """Caches one index per file: the functions it defines, sorted by first line."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self._files: dict[str, list[Function] | None] = {}

    def class_of(self, filename: str, line: int, name: str) -> str | None:
        """Dotted class path (``Outer.Inner``) of method ``name`` at ``filename:line``."""
        fn = self.function_at(filename, line)
        return fn.owner if fn is not None and fn.name == name and fn.owner else None

    def function_at(self, filename: str, line: int) -> Function | None:
        """The innermost function whose lines include ``line`` of ``filename``."""
        if not self.enabled or not line or not filename.endswith((".py", ".pyw")):
            return None
        index = self._files.get(filename, ())
        if index == ():
            index = self._files[filename] = _index_file(filename)
        if not index:
            return None
        # The innermost def spanning the line is the last one starting at or before it that
        # still covers it; defs are sorted by first line.
        i = bisect_right(index, (line, 1 << 62))
        while i > 0:
            i -= 1
            if index[i].first <= line <= index[i].end:
                return index[i]
        return None


def _index_file(filename: str) -> list[Function] | None:
    path = Path(filename)
    try:
        size = path.stat().st_size if path.is_file() else 0
        if not 0 < size <= MAX_SOURCE_BYTES:  # empty: nothing to find (or a /proc-like file)
            return None
        tree = ast.parse(path.read_bytes(), filename=filename)
    except (OSError, SyntaxError, ValueError, RecursionError):
        return None
    found: list[Function] = []

    def visit(node: ast.AST, classes: tuple[str, ...], in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                # A class inside a function has no stable dotted path; leave its methods bare.
                visit(child, () if in_function else (*classes, child.name), in_function)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                owner = ".".join(classes) if classes and not in_function else ""
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                end = child.end_lineno or child.lineno
                found.append(Function(first, end, child.name, owner))
                visit(child, (), True)
            else:
                visit(child, classes, in_function)

    visit(tree, (), False)
    found.sort()
    return found
