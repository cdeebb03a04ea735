"""Python frames of CUDA/HIP call stacks (``cuda.bpf.c``'s ``*_python`` programs).

In CPython processes described to the BPF program, a call's stack is the native stack,
then ``PY_MARK``, then the calling thread's Python stack as code object addresses,
innermost first (``bpf/pystack.h``). Code objects are named from the live process as soon
as a stack carrying them arrives (events, and the announcements of new summed stacks), and
at the end a call site reads: the Python frames (outermost first, named like the PyTorch
profiler's and the CPU samples'), then the native frames the Python code called into (those
innermost of the interpreter's own frames), then the API function.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence

from aiflame.collectors.ebpf.cuda_libs import read_maps
from aiflame.collectors.ebpf.cuda_profile import FrameInfo, Symbolizer
from aiflame.collectors.ebpf.libbpf import BpfObject
from aiflame.collectors.ebpf.pycode import PyFunction, PythonProcesses, called_from_python
from aiflame.collectors.ebpf.sampler import PY_ENTRY
from aiflame.model import FrameKind
from aiflame.symbolize.pyframes import PythonNaming

PY_MARK = 0xFFFF_FFFF_FFFF_FFFF  # cuda.bpf.c: native frames before it, Python code after
UNREADABLE = "[Python frame unreadable]"


class PythonStacks(PythonProcesses):
    """Describes CPython processes to a BPF object's ``py_procs`` and names the code
    objects of the stacks that carry them."""

    def __init__(self, obj: BpfObject) -> None:
        super().__init__()
        self.obj = obj
        # (pid, code addresses) -> their functions, innermost first
        self.names: dict[tuple[int, tuple[int, ...]], tuple[PyFunction | None, ...]] = {}
        self._last: dict[int, dict[int, PyFunction]] = {}  # pid -> address -> last name read

    def forget(self, obj: BpfObject, pid: int) -> None:
        super().forget(obj, pid)
        self._last.pop(pid, None)
        self.names = {k: v for k, v in self.names.items() if k[0] != pid}

    def describe_process(self, pid: int, maps_text: str) -> None:
        """Let the BPF program walk this process's Python stacks."""
        self.describe(self.obj, pid, maps_text)

    def seen(self, pid: int, stack: Sequence[int]) -> None:
        """A stack arrived: name its Python part now, while the process runs (a process
        that has exited keeps the names its code objects had in its earlier stacks)."""
        codes = python_part(stack)
        if codes and (pid, codes) not in self.names:
            reader = self.readers.get(pid)
            if reader is None:  # a fork of a described process: described in the kernel
                maps = read_maps(pid)
                if maps:
                    self.describe(self.obj, pid, maps)
                reader = self.readers.get(pid)
            if reader is None:
                return
            known = self._last.setdefault(pid, {})
            functions = reader.read(list(codes))
            for addr, f in zip(codes, functions, strict=True):
                if f is not None:
                    known[addr] = f
            self.names[pid, codes] = tuple(
                f if f is not None else known.get(a) for a, f in zip(codes, functions, strict=True)
            )

    def symbolizer(self, native: Symbolizer, naming: PythonNaming | None = None) -> Symbolizer:
        """``native`` for the native part of each stack, these names for its Python part."""
        naming = naming or PythonNaming()
        cache: dict[PyFunction | None, FrameInfo] = {}

        def frame(function: PyFunction | None) -> FrameInfo:
            if function not in cache:
                if function is None:
                    cache[function] = (UNREADABLE, FrameKind.LABEL, "")
                else:
                    named = naming.code(function.qualname, function.file, function.first_line)
                    cache[function] = (named.name, FrameKind.PYTHON, "")
            return cache[function]

        def symbolize(pid: int, addrs: Sequence[int], exact: bool) -> list[FrameInfo]:
            if PY_MARK not in addrs:
                return native(pid, addrs, exact)
            cut = list(addrs).index(PY_MARK)
            codes = python_part(addrs)
            infos = native(pid, addrs[:cut], exact) if cut else []
            reader = self.readers.get(pid)
            interpreter = reader.python.module if reader is not None else ""
            infos = infos[: called_from_python([m for _, _, m in infos], interpreter)]
            functions = self.names.get((pid, codes)) or (None,) * len(codes)
            return infos + [frame(f) for f in functions]

        return symbolize


def target_naming(pid: int) -> PythonNaming:
    """Python frames named relative to the program's directory and working directory (the
    first entries of its ``sys.path``), where nothing better is known."""
    roots = []
    with contextlib.suppress(OSError):
        roots.append(os.readlink(f"/proc/{pid}/cwd"))
    with contextlib.suppress(OSError):
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = [a.decode("utf-8", "replace") for a in f.read(65536).split(b"\0") if a]
        script = next((a for a in args[1:] if a.endswith(".py")), None)
        if script:
            base = roots[0] if roots else "/"
            roots.insert(0, os.path.dirname(os.path.join(base, script)))
    return PythonNaming(roots)


def python_part(stack: Sequence[int]) -> tuple[int, ...]:
    """The code object addresses after PY_MARK (entry marks cleared); () without one."""
    for i, a in enumerate(stack):
        if a == PY_MARK:
            return tuple(c & ~PY_ENTRY for c in stack[i + 1 :] if c)
    return ()
