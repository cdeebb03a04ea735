"""Readable names for PyTorch profiler frames: Python functions and GPU kernels.

The profiler names a Python frame ``path/to/file.py(123): function`` (also inside the
``Call stack`` strings of older traces) or ``<built-in method size of Tensor object at
0x7f...>``; kernels carry their whole C++ signature. The short forms follow py-spy
(``function (file.py:123)``) and fold template arguments and parameter lists, so names
stay comparable across runs (no object addresses) and across vendors.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from aiflame.symbolize.cxxnames import short_kernel_name

__all__ = ["PyFrame", "python_frame", "short_kernel_name"]

_PY_FRAME = re.compile(r"^(?P<file>.+)\((?P<line>\d+)\): (?P<func>.+)$")
_BUILTIN_METHOD = re.compile(
    r"^<built-in method (?P<meth>\S+) of (?P<owner>\S+) object at 0x[0-9a-f]+>$"
)
_BUILTIN_FUNCTION = re.compile(r"^<built-in function (?P<func>[^>]+)>$")
_SITE = re.compile(r"^.*?/(?:site|dist)-packages/")
# Owners of built-in methods that are binding artefacts rather than classes a user knows:
# torch's functions show up as methods "of type object" or "of PyCapsule object".
_PLAIN_OWNERS = ("PyCapsule", "type", "module", "builtins")


class PyFrame(NamedTuple):
    name: str
    file: str
    line: int
    func: str = ""  # the bare function name, for a "file(line): function" frame


def python_frame(raw: str, style: str = "short") -> PyFrame:
    """Name, file and line of a profiler Python frame; ``style`` is 'short' or 'raw'."""
    m = _PY_FRAME.match(raw)
    if m:
        file, line, func = m.group("file"), int(m.group("line")), m.group("func")
        if style == "raw":
            return PyFrame(raw, file, line, func)
        return PyFrame(f"{func} ({_SITE.sub('', file)}:{line})", file, line, func)
    if style == "raw":
        return PyFrame(raw, "", 0)
    m = _BUILTIN_METHOD.match(raw)
    if m:
        owner, meth = m.group("owner"), m.group("meth")
        if owner in _PLAIN_OWNERS or owner.startswith("pybind11_"):
            return PyFrame(meth, "", 0)
        return PyFrame(f"{owner.rsplit('.', 1)[-1]} > {meth}", "", 0)
    m = _BUILTIN_FUNCTION.match(raw)
    if m:
        return PyFrame(m.group("func"), "", 0)
    return PyFrame(raw, "", 0)
