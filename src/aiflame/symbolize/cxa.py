"""C++ demangling in process, through ``__cxa_demangle`` of the system's libstdc++.

libstdc++'s demangler is GCC's own (the code ``c++filt`` and ``addr2line -C`` are built
from), called here through ctypes: about as fast per name as one batched ``c++filt`` run,
without a process, and it abbreviates ``std::basic_ostream<char, ...>`` to ``std::ostream``
as ``addr2line -C`` does (``c++filt`` spells them out). Where libstdc++ cannot be loaded,
names go through :func:`aiflame.symbolize.demangle.demangle_many` (``c++filt``) instead.
Results are cached: a profile names the same functions over and over.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable, Iterable

from aiflame.symbolize.demangle import demangle_many, is_mangled

_Raw = Callable[[bytes], "str | None"]


def _load_cxa() -> _Raw | None:
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("stdc++") or "libstdc++.so.6")
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = lib.__cxa_demangle
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_void_p
    fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    free = libc.free
    free.argtypes = [ctypes.c_void_p]
    free.restype = None
    string_at = ctypes.string_at

    def raw(mangled: bytes) -> str | None:
        # No status out-parameter: a null result says enough, and nothing is shared between
        # threads (ctypes lets go of the GIL during the call).
        p = fn(mangled, None, None, None)
        if not p:
            return None
        try:
            return string_at(p).decode("utf-8", "replace")
        finally:
            free(p)

    return raw


class Demangler:
    """``demangler(name)`` -> readable name; names that are not C++ come back unchanged."""

    def __init__(self, use_cxa: bool = True) -> None:
        self._raw = _load_cxa() if use_cxa else None
        self._cache: dict[str, str] = {}
        self._retried: set[str] = set()  # given to c++filt already (whatever it answered)

    @property
    def in_process(self) -> bool:
        return self._raw is not None

    def __call__(self, name: str) -> str:
        """The demangled name (one name: no ``c++filt`` retry, see :meth:`many`)."""
        done = self._cache.get(name)
        if done is not None:
            return done
        if not name.startswith("_Z"):
            return name
        if self._raw is None:
            return self.many([name])[0]
        out = self._raw(name.encode("utf-8", "surrogateescape")) or name
        self._cache[name] = out
        return out

    def many(self, names: list[str]) -> list[str]:
        """:meth:`__call__` for many names. Names that libstdc++ cannot demangle go through
        one ``c++filt`` run: the libstdc++ of GCC 12 rejects some lambda manglings that
        binutils (hence ``addr2line -C``) reads. So does every name when there is no
        libstdc++."""
        if self._raw is None:
            self._cxxfilt([n for n in names if n.startswith("_Z") and n not in self._cache])
            return [self._cache.get(n, n) for n in names]
        out = [self(n) for n in names]
        failed = [n for n, d in zip(names, out, strict=True) if d == n and n.startswith("_Z")]
        if failed:
            self._cxxfilt(failed)  # each name at most once, whatever c++filt answers
            out = [self._cache.get(n, n) for n in names]
        return out

    def _cxxfilt(self, todo: list[str]) -> None:
        todo = [n for n in dict.fromkeys(todo) if n not in self._retried]
        if not todo:
            return
        found = demangle_many(todo)
        for n in todo:
            self._cache[n] = found.get(n, n)
            self._retried.add(n)


def demangle_all(names: Iterable[str]) -> dict[str, str]:
    """``{mangled: readable}`` for the names that demangle, as
    :func:`~aiflame.symbolize.demangle.demangle_many` answers, but in process where
    libstdc++ loads: no binutils needed (``c++filt`` only for what libstdc++ rejects)."""
    todo = sorted({n for n in names if is_mangled(n)})
    done = Demangler().many(todo) if todo else []
    return {m: d for m, d in zip(todo, done, strict=True) if d and d != m}
