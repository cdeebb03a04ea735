"""The class a Python function belongs to, from the source file when it can be read.

Stacks recorded by PyTorch (and most samplers) carry a function's name, file and line, not
its qualified name, so ``forward`` of every ``nn.Module`` looks the same. When the file is
readable here (the usual case: the snapshot is opened on the machine that ran the code), the
code objects it compiles to say which ``class`` encloses the function that spans the line
(``co_qualname``), and the frame can be shown as ``Attention > forward`` or ``Linear >
__init__``. The file is compiled (or its ``.pyc`` read), never run.
"""

from __future__ import annotations

import importlib.util
import marshal
import os
import warnings
from bisect import bisect_right
from operator import itemgetter
from pathlib import Path
from types import CodeType
from typing import NamedTuple

MAX_SOURCE_BYTES = 4 << 20  # bigger files are generated code; not worth parsing
_LINE = itemgetter(2)


class Function(NamedTuple):
    """A function (``def``, ``lambda``, comprehension, class body) of a source file."""

    first: int  # first line: the first decorator's, else the def's (CPython's co_firstlineno)
    end: int  # its last line of code
    name: str
    owner: str  # dotted class path, or "" for a function outside any class


class _FileIndex:
    """The code objects of one file by first line; last lines are computed on demand
    (reading a code object's line table is what indexing a file would spend most on)."""

    def __init__(self, module: CodeType) -> None:
        found: list[tuple[int, str, str, CodeType]] = []
        todo = [module]
        while todo:
            code = todo.pop()
            for const in code.co_consts:
                if isinstance(const, CodeType):
                    todo.append(const)
                    owner, name = split_owner(const.co_qualname)
                    found.append((const.co_firstlineno, name, owner, const))
        found.sort(key=itemgetter(0))
        self.firsts = [f[0] for f in found]
        self.entries = found
        self._ends: dict[int, int] = {}

    def function_at(self, line: int) -> Function | None:
        # The innermost function spanning the line is the nearest one starting at or
        # before it whose code reaches it (nested functions start after their owner).
        i = bisect_right(self.firsts, line)
        while i > 0:
            i -= 1
            first, name, owner, code = self.entries[i]
            end = self._ends.get(i)
            if end is None:
                end = self._ends[i] = max(filter(None, map(_LINE, code.co_lines())), default=0)
            if line <= max(end, first):
                return Function(first, max(end, first), name, owner)
        return None


class ClassResolver:
    """Caches one index per file: the functions it defines, sorted by first line. A file
    is indexed again when its modification time or size changes; ``max_files`` bounds
    the cache (the oldest index is dropped first), for a profiler that runs for days."""

    def __init__(self, enabled: bool = True, max_files: int | None = None) -> None:
        self.enabled = enabled
        self.max_files = max_files
        # path -> ((mtime in ns, size) when indexed, its index)
        self._files: dict[str, tuple[tuple[int, int], _FileIndex | None]] = {}

    def class_of(self, filename: str, line: int, name: str) -> str | None:
        """Dotted class path (``Outer.Inner``) of method ``name`` at ``filename:line``."""
        fn = self.function_at(filename, line)
        return fn.owner if fn is not None and fn.name == name and fn.owner else None

    def function_at(self, filename: str, line: int) -> Function | None:
        """The innermost function whose lines include ``line`` of ``filename``."""
        if not self.enabled or not line or not filename.endswith((".py", ".pyw")):
            return None
        try:
            st = os.stat(filename)
            version = (st.st_mtime_ns, st.st_size)
        except OSError:
            version = (-1, -1)  # gone: what was read of it still names its frames
        found = self._files.get(filename)
        if found is None or (found[0] != version and version[0] >= 0):
            module = _code_of(Path(filename))
            found = (version, _FileIndex(module) if module is not None else None)
            self._files.pop(filename, None)
            if self.max_files is not None and len(self._files) >= self.max_files:
                del self._files[next(iter(self._files))]
            self._files[filename] = found
        index = found[1]
        return index.function_at(line) if index is not None else None


def split_owner(qualname: str) -> tuple[str, str]:
    """(dotted class path or "", name) of a ``co_qualname``: only classes outside
    functions have a stable path (``f.<locals>.C.m`` is left as bare ``m``)."""
    head, dot, name = qualname.rpartition(".")
    if not dot:
        return "", qualname
    if "<locals>" in head:
        return "", name
    return head, name


def _code_of(path: Path) -> CodeType | None:
    """The code object of a module's source, as the interpreter would make it (never run).

    The names and first lines in code objects are what every recorder reads. The module's
    ``.pyc`` holds them already (torch's thousands of files were compiled when imported):
    reading it is about 20x faster than compiling the source again, which is the fallback.
    """
    try:
        stat = path.stat()
        if not path.is_file() or not 0 < stat.st_size <= MAX_SOURCE_BYTES:
            return None  # empty: nothing to find (or a /proc-like file); huge: generated
        cached = _cached_code(path, stat)
        if cached is not None:
            return cached
        source = path.read_bytes()
    except OSError:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escapes etc. are the file's business
            return compile(source, str(path), "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _cached_code(path: Path, stat: os.stat_result) -> CodeType | None:
    """The code object in ``__pycache__`` for this interpreter, if it is of this very
    source. Only a ``.pyc`` owned by us or root and writable by no one else is read:
    ``marshal`` is not meant for data an attacker could have written."""
    try:
        pyc = importlib.util.cache_from_source(str(path))
        with open(pyc, "rb") as f:
            info = os.fstat(f.fileno())
            if info.st_uid not in (0, os.geteuid()) or info.st_mode & 0o022:
                return None
            data = f.read()
    except (OSError, ValueError, NotImplementedError):
        return None
    if len(data) < 16 or data[:4] != importlib.util.MAGIC_NUMBER:
        return None
    flags = int.from_bytes(data[4:8], "little")
    if flags & 1:  # checked by a hash of the source
        try:
            if data[8:16] != importlib.util.source_hash(path.read_bytes()):
                return None
        except OSError:
            return None
    elif (
        int.from_bytes(data[8:12], "little") != int(stat.st_mtime) & 0xFFFFFFFF
        or int.from_bytes(data[12:16], "little") != stat.st_size & 0xFFFFFFFF
    ):
        return None  # the source changed since
    try:
        code = marshal.loads(memoryview(data)[16:])
    except (EOFError, ValueError, TypeError):
        return None
    return code if isinstance(code, CodeType) else None
