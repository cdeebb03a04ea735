"""Guess a frame's kind from its name alone, for sources that carry no kinds (folded, perf).

The rules follow the conventions of the tools that write those names: FlameGraph's
annotations (``_[k]`` kernel, ``_[j]`` JIT, ``_[i]`` inlined), py-spy's ``func (file.py:12)``,
and the ``-`` frame that separates CPU stacks from the GPU work they launched.
"""

from __future__ import annotations

import re

from aiflame.model.frames import FrameKind

DELIMITER = "-"

_PYTHON = re.compile(r"\.py[xw]?(?::\d+|\b)|^<module>|\(<frozen |\bpy::|^Py[A-Z_]|^_Py")
_RUNTIME = re.compile(
    r"^(?:cuda[A-Z]|cu[A-Z][a-z]|cupti|hip[A-Z]|hsa_|hipModule|__cuda|nccl[A-Z]|rccl)"
)
_JIT = re.compile(r"^(?:jit_|brgemm_|JIT\b|\[jit\]|LazyCompile:|Interpreted |Compiled )")
_GPU_SOURCE = re.compile(r"\.(?:cu|cuh|cl|hip|triton|ptx|py):\d+")
_GPU_INSTRUCTION = re.compile(r"^(?:0x[0-9a-fA-F]+\s|[A-Z][A-Z0-9_.]+\s|@?[A-Z][A-Z0-9_.]*$)")
_CPP = re.compile(r"::|^_Z|[<>]|^operator\b|\(anonymous namespace\)")

_ANNOTATIONS = {"_[k]": FrameKind.KERNEL, "_[j]": FrameKind.JIT}


def guess_kind(name: str, below_delimiter: bool = False) -> FrameKind:
    """Kind of a frame called ``name``; ``below_delimiter`` if it comes after ``-``."""
    if name == DELIMITER:
        return FrameKind.DELIMITER
    if below_delimiter:
        if _GPU_INSTRUCTION.match(name):
            return FrameKind.GPU_INSTRUCTION
        if _GPU_SOURCE.search(name):
            return FrameKind.GPU_SOURCE
        return FrameKind.GPU_KERNEL
    tail = name[-4:]
    if tail in _ANNOTATIONS:
        return _ANNOTATIONS[tail]
    if tail in ("_[i]", "_[w]"):
        name = name[:-4]
    if _PYTHON.search(name):
        return FrameKind.PYTHON
    if _RUNTIME.match(name):
        return FrameKind.RUNTIME
    if _JIT.match(name):
        return FrameKind.JIT
    if _CPP.search(name):
        return FrameKind.CPP
    return FrameKind.NATIVE


class KindGuesser:
    """Caches :func:`guess_kind`; names repeat far more often than they differ."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, bool], FrameKind] = {}

    def __call__(self, name: str, below_delimiter: bool = False) -> FrameKind:
        key = (name, below_delimiter)
        kind = self._cache.get(key)
        if kind is None:
            kind = self._cache[key] = guess_kind(name, below_delimiter)
        return kind
