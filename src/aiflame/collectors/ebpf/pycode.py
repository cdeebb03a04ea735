"""Name the code objects that the eBPF walker saw on Python stacks, from the live process.

The BPF program keeps only each frame's code object address; its names are read here from
``/proc/PID/mem`` (the function's qualified name, file and first line), as soon as a new
stack is announced, while the process still runs. Addresses are reused: a module's code
object is freed once the module has run, and a function defined later may get its place.
So each new stack is read afresh, and a name is reused only where the code object still
points at the same strings and first line; a code object freed and replaced in the
moment between a sample and its reading would still be misnamed, as in every sampling
profiler that reads names out of process.

3.8-3.10 code objects have no qualified name: the class of a method is then found in its
source file (compiled, never run; each file indexed once while it is unchanged).
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO

from aiflame.collectors.ebpf.libbpf import BpfObject
from aiflame.collectors.ebpf.pylayouts import NO_OFFSET, Offsets, UnsupportedPython
from aiflame.collectors.ebpf.pyruntime import NO_INTERPRETER, PythonProcess, find_python
from aiflame.symbolize.pyclass import ClassResolver

MAX_STRING = 4096  # characters read of a name or path
_HEADER = struct.Struct("<Q")
# The sources of 3.8-3.10 methods, indexed once per file (and again when it changes),
# shared by every process: a host runs many processes of the same code.
SOURCES = ClassResolver(max_files=1024)


def _root_prefix(pid: int) -> str:
    """``/proc/PID/root`` when the process has another root than ours (a container or a
    chroot), else "": its files are then ours, and their indexes shared with others."""
    try:
        same = os.path.samestat(os.stat(f"/proc/{pid}/root"), os.stat("/"))
    except OSError:
        return ""
    return "" if same else f"/proc/{pid}/root"


@dataclass(frozen=True, slots=True)
class PyFunction:
    qualname: str
    file: str
    first_line: int


class CodeReader:
    """Reads code objects of one process; keeps its memory file open while it runs."""

    def __init__(self, python: PythonProcess) -> None:
        self.python = python
        # (address, qualname, name and file string addresses, first line) -> its function
        self._functions: dict[tuple[int, ...], PyFunction | None] = {}
        # (address, length, hash, state) of a string -> its text
        self._strings: dict[tuple[int, int, int, int], str | None] = {}
        self._mem: BinaryIO | None = None
        self._root = _root_prefix(python.pid)
        with contextlib.suppress(OSError):  # gone already: its frames stay unnamed
            self._mem = open(f"/proc/{python.pid}/mem", "rb", buffering=0)  # noqa: SIM115

    def close(self) -> None:
        if self._mem is not None:
            self._mem.close()
            self._mem = None

    def read(self, addresses: list[int]) -> tuple[PyFunction | None, ...]:
        """The functions of the code objects at ``addresses`` now (None: unreadable)."""
        return tuple(self._code(a) for a in addresses)

    def _memory(self, address: int, size: int) -> bytes | None:
        if self._mem is None or address <= 0:
            return None
        try:
            self._mem.seek(address)
            data = self._mem.read(size)
        except (OSError, OverflowError, ValueError):
            return None
        return data if data is not None and len(data) == size else None

    def _code(self, addr: int) -> PyFunction | None:
        o = self.python.offsets
        names = [at for at in (o.code_qualname, o.code_name) if at != NO_OFFSET]
        end = max(o.code_filename, o.code_firstlineno, *names) + 8
        raw = self._memory(addr, end)
        if raw is None:
            return None
        ob_type = _HEADER.unpack_from(raw, 8)[0]
        if self.python.code_type and ob_type != self.python.code_type:
            return None  # not a code object (freed, or a frame being set up)
        ptrs = [_HEADER.unpack_from(raw, at)[0] for at in names]
        file_ptr = _HEADER.unpack_from(raw, o.code_filename)[0]
        line = struct.unpack_from("<i", raw, o.code_firstlineno)[0]
        key = (addr, *ptrs, file_ptr, line)
        if key not in self._functions:
            qualname = next(filter(None, map(self._string, ptrs)), None)
            file = self._string(file_ptr)
            function = None
            if qualname is not None and file is not None:
                if o.code_qualname == NO_OFFSET:  # 3.8-3.10: co_name only
                    qualname = self._qualified(qualname, file, line)
                function = PyFunction(qualname, file, line)
            self._functions[key] = function
        return self._functions[key]

    def _qualified(self, name: str, file: str, first_line: int) -> str:
        """``Class.name`` where the source defines ``name`` at ``first_line`` inside a class
        (3.8-3.10 code objects have no ``co_qualname``); read as the process sees its files,
        while it runs: a relative name from its working directory, others through its root
        when it has its own (a container)."""
        if not os.path.isabs(file):
            path = f"/proc/{self.python.pid}/cwd/{file}"
        else:
            path = self._root + file
        owner = SOURCES.class_of(path, first_line, name)
        return f"{owner}.{name}" if owner else name

    def _string(self, addr: int) -> str | None:
        o = self.python.offsets
        header = self._memory(addr, o.compact_size)
        if header is None:
            return None
        length = struct.unpack_from("<q", header, o.unicode_length)[0]
        state = struct.unpack_from("<I", header, o.unicode_state)[0]
        key = (addr, length, struct.unpack_from("<q", header, o.unicode_length + 8)[0], state)
        if key not in self._strings:
            self._strings[key] = unicode_text(self._memory, addr, length, state, o)
        return self._strings[key]


def unicode_text(
    memory: Callable[[int, int], bytes | None], addr: int, length: int, state: int, o: Offsets
) -> str | None:
    """The text of a compact ``str`` object (every identifier and path is one)."""
    kind, compact, ascii_ = (state >> 2) & 7, (state >> 5) & 1, (state >> 6) & 1
    if not compact or kind not in (1, 2, 4) or length < 0:
        return None
    length = min(length, MAX_STRING)
    start = o.ascii_size if ascii_ else o.compact_size
    data = memory(addr + start, length * kind) if length else b""
    if data is None:
        return None
    codec = {1: "latin-1", 2: "utf-16-le", 4: "utf-32-le"}[kind]
    return data.decode(codec, errors="replace")


def called_from_python(modules: list[str], interpreter: str) -> int:
    """How many of a stack's innermost native frames (their modules, innermost first) the
    Python code called into: those before the first frame in the interpreter, whose own
    frames the Python stack stands for. An unwinder stopped before it (code without frame
    pointers) leaves only such frames: all count."""
    if interpreter and interpreter in modules:
        return modules.index(interpreter)
    return len(modules)


class PythonProcesses:
    """The CPython processes described to a BPF object (its ``py_procs`` map, which
    ``bpf/pystack.h`` walks), each with a reader of its code objects."""

    def __init__(self) -> None:
        self.readers: dict[int, CodeReader] = {}
        self.unsupported: dict[int, str] = {}  # pid -> why a Python there is not walked

    def describe(self, obj: BpfObject, pid: int, maps_text: str) -> None:
        """Let ``obj`` walk this process's Python stacks (again after an exec, which
        clears the description)."""
        try:
            python = find_python(pid, maps_text)
        except UnsupportedPython as e:
            if str(e) != NO_INTERPRETER:  # a Python we cannot read, not another program
                self.unsupported[pid] = str(e)
            old = self.readers.pop(pid, None)
            if old is not None:  # it exec'd another program after it was described
                obj.map("py_procs").delete(struct.pack("<I", pid))
                old.close()
            return
        old = self.readers.get(pid)
        if old is not None and old.python == python:
            return
        obj.map("py_procs").update(struct.pack("<I", pid), python.bpf_struct())
        if old is not None:
            old.close()
        self.readers[pid] = CodeReader(python)
        self.unsupported.pop(pid, None)

    def forget(self, obj: BpfObject, pid: int) -> None:
        """Stop walking ``pid`` (it exited): its reader closed, its description removed."""
        self.unsupported.pop(pid, None)
        reader = self.readers.pop(pid, None)
        if reader is not None:
            reader.close()
            obj.map("py_procs").delete(struct.pack("<I", pid))

    def close(self) -> None:
        for reader in self.readers.values():
            reader.close()
