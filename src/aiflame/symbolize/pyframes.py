"""One name for a Python frame, whoever recorded it: ``Class > function (path/file.py:12)``.

py-spy and the PyTorch profiler see the same functions but write them differently. py-spy
gives the absolute file, the qualified name (``Net.forward``) and the line running now; the
profiler gives the file relative to the interpreter's ``sys.path`` (``torch/nn/modules/
module.py``), the bare name, and the function's first line. ``aiflame record`` puts both in
one profile (CPU samples beside GPU time), so both are named here the same way, per
function: the class from the qualified name or from the source file, the file relative to
the target's ``sys.path``, the line of the function's first line. Otherwise switching
metrics would show two trees of one program that do not line up.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import NamedTuple

from aiflame.symbolize.pyclass import ClassResolver

CLASS_SEPARATOR = " > "
_SITE = re.compile(r"^.*?/(?:site|dist)-packages/")
_STDLIB = re.compile(r"^.*?/lib/python\d+\.\d+/")


class NamedFrame(NamedTuple):
    name: str  # what the flame graph shows
    file: str  # absolute where known (the same for both recorders), else as recorded
    line: int


def display_name(func: str, owner: str | None, file: str, line: int) -> str:
    shown = f"{owner}{CLASS_SEPARATOR}{func}" if owner else func
    return f"{shown} ({file}:{line})" if file else shown


def split_qualname(qualname: str) -> tuple[str | None, str]:
    """(dotted class path or None, function) of a ``__qualname__``. Functions defined
    inside functions (``f.<locals>.g``) have no stable class path: only their name is kept,
    as the source-file resolver does."""
    if "<locals>" in qualname:
        return None, qualname.rsplit(".", 1)[-1]
    owner, dot, func = qualname.rpartition(".")
    if not dot or not owner or not func:
        return None, qualname
    return owner, func


class PythonNaming:
    """Names Python frames against the target's ``sys.path`` (``roots``); reads source
    files (never runs them) to find classes and first lines when ``read_sources``."""

    def __init__(self, roots: Iterable[str] = (), read_sources: bool = True) -> None:
        cleaned = {os.path.normpath(r) for r in roots if r and os.path.isabs(r)}
        self.roots = sorted(cleaned, key=len, reverse=True)  # the longest prefix wins
        self.classes = ClassResolver(read_sources)
        self._found: dict[str, str | None] = {}  # profiler path -> file (one search per file)
        # (file, first line) -> (function, class path) of code objects read from a process
        self._code: dict[tuple[str, int], tuple[str, str | None]] = {}

    def with_roots(self, roots: Iterable[str]) -> PythonNaming:
        """A naming for other roots that shares what this one read (sources, code objects)."""
        other = PythonNaming(roots, self.classes.enabled)
        other.classes, other._code = self.classes, self._code
        return other

    def relative(self, file: str) -> str:
        """``file`` as the profiler writes it: relative to the longest ``sys.path`` entry
        that holds it (else to site-packages or the standard library)."""
        for root in self.roots:
            if file.startswith(root + "/"):
                return file[len(root) + 1 :]
        shorter = _SITE.sub("", file)
        return shorter if shorter != file else _STDLIB.sub("", file)

    def absolute(self, file: str) -> str | None:
        """The file a relative profiler path names, if one of the roots holds it."""
        if file not in self._found:
            self._found[file] = self._search(file)
        return self._found[file]

    def _search(self, file: str) -> str | None:
        if os.path.isabs(file):
            return file if os.path.isfile(file) else None
        for root in self.roots:
            candidate = os.path.join(root, file)
            if os.path.isfile(candidate):
                return candidate
        return None

    def code(self, qualname: str, file: str, first_line: int) -> NamedFrame:
        """A frame read from the code object itself (``co_qualname``, ``co_filename``,
        ``co_firstlineno``, as the eBPF sampler does): already exact, no source is read.
        Traced frames of the same function are then named without reading it either."""
        owner, func = split_qualname(qualname)
        self._code.setdefault((os.path.normpath(file), first_line), (func, owner))
        line = _first_line(func, first_line)
        return NamedFrame(display_name(func, owner, self.relative(file), line), file, line)

    def sampled(self, qualname: str, file: str, line: int) -> NamedFrame:
        """A sampler's frame: qualified name, absolute file, the line running now."""
        owner, func = split_qualname(qualname)
        fn = self.classes.function_at(file, line)
        if fn is not None and fn.name == func:
            line = fn.first  # the function, not the line: as the profiler names it
            owner = owner or fn.owner or None
        line = _first_line(func, line)
        return NamedFrame(display_name(func, owner, self.relative(file), line), file, line)

    def traced(self, func: str, file: str, line: int) -> NamedFrame:
        """A profiler's frame: bare name, file relative to ``sys.path``, first line."""
        found = self.absolute(file)
        owner = None
        known = self._code.get((os.path.normpath(found), line)) if found else None
        if known is not None and known[0] == func:
            owner = known[1]
        elif found:
            # Frames already running when the profiler started carry their current line.
            fn = self.classes.function_at(found, line)
            if fn is not None and fn.name == func:
                line, owner = fn.first, fn.owner or None
        line = _first_line(func, line)
        shown = self.relative(found) if found else _SITE.sub("", file)
        return NamedFrame(display_name(func, owner, shown, line), found or file, line)


def _first_line(func: str, line: int) -> int:
    """A module's code starts at line 1 (where the recorders saw it run varies)."""
    return 1 if func == "<module>" else line
