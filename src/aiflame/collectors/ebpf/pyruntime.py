"""Find a CPython interpreter in a running process and where its frames are kept.

The eBPF sampler walks each sampled thread's Python frames itself (``profile.bpf.c``); for
that it needs, per process, the address of ``_PyRuntime`` and the offsets of a few fields
of the interpreter's internal structures, which change between minor versions:

* 3.13 and later publish them in ``_PyRuntime`` itself (``_Py_DebugOffsets``, the layout
  out-of-process debuggers read); 3.13's layout is parsed here.
* 3.11 and 3.12 do not: their offsets are tabled below, from the ``offsetof`` of their own
  headers (x86-64 and AArch64 have the same layout; ``tests/unit/test_pyruntime.py``
  checks the table against the headers of each installed version).

Anything else (3.10 and older, free-threaded or unknown layouts) is reported as
unsupported, and ``aiflame record`` falls back to py-spy for that process's Python stacks.
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass

from aiflame.symbolize.elf import ElfError, ElfImage, open_image
from aiflame.symbolize.maps import Mapping, Maps

NO_OFFSET = 0xFFFFFFFF  # pystack.h PY_NO_OFFSET
FRAME_BYTES = 72  # pystack.h PY_FRAME_BYTES: the bytes of each frame the walk reads
DEBUG_COOKIE = b"xdebugpy"
# libpython3.12.so.1.0, python3.11, python3.13d, libpython3.13t.so ...
_PYTHON_FILE = re.compile(r"(?:^|/)(?:lib)?python(\d)\.(\d+)[a-z]*(?:\.so[.\d]*)?$")
# in the name of every file _PYTHON_FILE takes: a process whose maps lack it has no
# interpreter, found without parsing its maps (most processes a host starts are no Python)
_MAYBE_PYTHON = re.compile(r"python\d\.\d")
_WANTED = (b"_PyRuntime", b"Py_Version", b"PyCode_Type")
SHT_DYNSYM, SHT_SYMTAB = 11, 2
NO_RUNTIME = " has no _PyRuntime symbol"
NO_INTERPRETER = "no Python interpreter is mapped"


@dataclass(frozen=True)
class Offsets:
    """Byte offsets of the fields the walk and the code reader use (struct py_proc)."""

    interpreters_head: int  # _PyRuntimeState.interpreters.head
    threads_head: int  # PyInterpreterState.threads.head
    tstate_next: int
    native_thread_id: int
    tstate_frame: int  # PyThreadState.cframe (3.11, 3.12) or .current_frame (3.13+)
    cframe_frame: int  # _PyCFrame.current_frame; NO_OFFSET from 3.13
    frame_code: int  # _PyInterpreterFrame.f_code / f_executable
    frame_previous: int
    frame_owner: int
    frame_is_entry: int  # 3.11 only; NO_OFFSET later (shim frames mark the entries)
    code_filename: int
    code_name: int
    code_qualname: int
    code_firstlineno: int
    unicode_state: int
    unicode_length: int
    ascii_size: int  # sizeof(PyASCIIObject): where a compact ASCII string's text starts
    compact_size: int  # sizeof(PyCompactUnicodeObject): other compact strings' text
    gil_locked: int  # the GIL's locked flag and last holder: in _PyRuntimeState (3.11), in
    gil_holder: int  # the main interpreter's own GIL (3.12+, PyInterpreterState._gil)
    gil_in_runtime: bool

    def bpf_struct(self, runtime: int) -> bytes:
        """``struct py_proc`` of profile.bpf.c."""
        return struct.pack(
            "<Q14I",
            runtime,
            self.interpreters_head,
            self.threads_head,
            self.tstate_next,
            self.native_thread_id,
            self.tstate_frame,
            self.cframe_frame,
            self.frame_code,
            self.frame_previous,
            self.frame_owner,
            self.frame_is_entry,
            self.gil_locked,
            self.gil_holder,
            int(self.gil_in_runtime),
            0,
        )


# From offsetof() over each version's own headers (Py_BUILD_CORE, x86-64).
TABLES: dict[tuple[int, int], Offsets] = {
    (3, 11): Offsets(
        interpreters_head=40,
        threads_head=16,
        tstate_next=8,
        native_thread_id=160,
        tstate_frame=56,
        cframe_frame=8,
        frame_code=32,
        frame_previous=48,
        frame_owner=69,
        frame_is_entry=68,
        code_filename=112,
        code_name=120,
        code_qualname=128,
        code_firstlineno=72,
        unicode_state=32,
        unicode_length=16,
        ascii_size=48,
        compact_size=72,
        gil_locked=376,  # _PyRuntimeState.ceval.gil.locked
        gil_holder=368,
        gil_in_runtime=True,
    ),
    (3, 12): Offsets(
        interpreters_head=40,
        threads_head=72,
        tstate_next=8,
        native_thread_id=144,
        tstate_frame=56,
        cframe_frame=0,
        frame_code=0,
        frame_previous=8,
        frame_owner=70,
        frame_is_entry=NO_OFFSET,
        code_filename=112,
        code_name=120,
        code_qualname=128,
        code_firstlineno=68,
        unicode_state=32,
        unicode_length=16,
        ascii_size=40,
        compact_size=56,
        gil_locked=1056,  # PyInterpreterState._gil.locked
        gil_holder=1048,
        gil_in_runtime=False,
    ),
}
# 3.13's _Py_DebugOffsets: uint64 fields after cookie[8]; (section, index) of each one used.
_DEBUG_313_FIELDS = {
    "version": 1,
    "free_threaded": 2,
    "interpreters_head": 3 + 2,  # runtime_state {size, finalizing, interpreters_head}
    "threads_head": 6 + 3,  # interpreter_state {size, id, next, threads_head, ...13}
    "gil_locked": 6 + 11,  # ... gil_runtime_state_locked, gil_runtime_state_holder}
    "gil_holder": 6 + 12,
    "tstate_next": 19 + 2,  # thread_state {size, prev, next, interp, current_frame, ...9}
    "current_frame": 19 + 4,
    "native_thread_id": 19 + 6,
    "frame_previous": 28 + 1,  # interpreter_frame {size, previous, executable, ..., owner}
    "frame_code": 28 + 2,
    "frame_owner": 28 + 5,
    "code_filename": 34 + 1,  # code_object {size, filename, name, qualname, linetable,
    "code_name": 34 + 2,  #                firstlineno, ...10}
    "code_qualname": 34 + 3,
    "code_firstlineno": 34 + 5,
    # then pyobject (2 fields), type_object (4), tuple (3), list (3), dict (3), float (2),
    # long (3), bytes (3) and unicode_object {size, state, length, asciiobject_size}
    "unicode_state": 67 + 1,
    "unicode_length": 67 + 2,
    "ascii_size": 67 + 3,
}
_DEBUG_313_LEN = 8 * (1 + 70)  # the cookie and the fields through unicode_object


class UnsupportedPython(Exception):
    """A Python this walker cannot read (the message says which and why)."""


@dataclass(frozen=True)
class PythonProcess:
    """One interpreter in one process: what the BPF walk and the code reader need."""

    pid: int
    version: tuple[int, int]
    module: str  # the file holding the interpreter (python3.11, libpython3.12.so.1.0)
    runtime: int  # address of _PyRuntime
    code_type: int  # address of PyCode_Type (0: unknown, then code objects are not checked)
    offsets: Offsets


def candidate_files(maps: Maps) -> list[Mapping]:
    """One mapping per loaded file whose name says it may hold an interpreter. Loaded: with
    code mapped executable, so that a file only mapped to be read (a symbolizer reading
    another interpreter's symbols, as a profiler in the same process does) is not taken
    for the process's interpreter."""
    loaded = {m.path for m in maps.mappings if m.is_file and m.executable}
    seen: set[str] = set()
    out = []
    for m in maps.mappings:
        if m.path in loaded and m.path not in seen and _PYTHON_FILE.search(m.path):
            seen.add(m.path)
            out.append(m)
    return out


def find_python(pid: int, maps_text: str | None = None) -> PythonProcess:
    """The interpreter of process ``pid``; UnsupportedPython when there is none we read."""
    if maps_text is None:
        try:
            with open(f"/proc/{pid}/maps", encoding="utf-8", errors="surrogateescape") as f:
                maps_text = f.read()
        except OSError as e:
            raise UnsupportedPython(f"cannot read the mappings of process {pid}: {e}") from e
    if not _MAYBE_PYTHON.search(maps_text):
        raise UnsupportedPython(NO_INTERPRETER)
    maps = Maps.parse(maps_text)
    candidates = candidate_files(maps)
    if not candidates:
        raise UnsupportedPython(NO_INTERPRETER)
    reasons = []
    for mapping in candidates:
        try:
            return _interpreter(pid, maps, mapping)
        except UnsupportedPython as e:
            reasons.append(str(e))
    # the interpreter's own reason (its version, say) over its launcher's "no _PyRuntime"
    telling = [r for r in reasons if not r.endswith(NO_RUNTIME)]
    raise UnsupportedPython((telling or reasons)[0])


# (dev, inode, size, mtime) of an interpreter file -> its image and symbols: every Python
# process of a host runs one of a few interpreters, and a system-wide profiler describes
# each process that starts (reading the file's symbols again cost ~10 ms a process)
_IMAGES: dict[tuple[int, int, int, int], tuple[ElfImage, dict[bytes, int]]] = {}
_MAX_IMAGES = 32


def _image_and_symbols(path: str) -> tuple[ElfImage, dict[bytes, int]]:
    st = os.stat(path)
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    found = _IMAGES.get(key)
    if found is None:
        image, _ = open_image(path)
        found = (image, _data_symbols(image, _WANTED))
        if len(_IMAGES) >= _MAX_IMAGES:
            del _IMAGES[next(iter(_IMAGES))]
        _IMAGES[key] = found
    return found


def _interpreter(pid: int, maps: Maps, mapping: Mapping) -> PythonProcess:
    path = _readable_path(pid, mapping.path)
    try:
        image, symbols = _image_and_symbols(path)
    except (OSError, ElfError) as e:
        raise UnsupportedPython(f"{mapping.path}: {e}") from e
    if b"_PyRuntime" not in symbols:
        raise UnsupportedPython(f"{mapping.path}{NO_RUNTIME}")
    bias = _load_bias(image, maps, mapping.path)
    if bias is None:
        raise UnsupportedPython(f"cannot place {mapping.path} in process {pid}")
    runtime = symbols[b"_PyRuntime"] + bias
    version = _version(pid, symbols, bias, mapping.path)
    code_type = symbols[b"PyCode_Type"] + bias if b"PyCode_Type" in symbols else 0
    if version >= (3, 13):
        offsets = _debug_offsets(pid, runtime, version)
    elif version in TABLES:
        offsets = TABLES[version]
    else:
        raise UnsupportedPython(
            f"Python {version[0]}.{version[1]} is not read by the eBPF walker (3.11+)"
        )
    fields = (offsets.frame_code + 8, offsets.frame_previous + 8, offsets.frame_owner + 1)
    if max(fields) > FRAME_BYTES:  # pystack.h reads this much of each frame
        raise UnsupportedPython(f"Python {version[0]}.{version[1]}'s frames are laid out otherwise")
    return PythonProcess(pid, version, mapping.path, runtime, code_type, offsets)


def _readable_path(pid: int, path: str) -> str:
    """The file as this process can open it (the target may be in another mount namespace)."""
    inside = f"/proc/{pid}/root{path}"
    return inside if os.path.exists(inside) else path


def _data_symbols(image: ElfImage, names: tuple[bytes, ...]) -> dict[bytes, int]:
    """Values of the named symbols, from .dynsym, else .symtab."""
    found: dict[bytes, int] = {}
    for kind in (SHT_DYNSYM, SHT_SYMTAB):
        for index in image.sections_of_type(kind):
            sh = image.sections[index]
            dt = image.dt["sym"]
            raw = image._records("sym", int(sh["offset"]), int(sh["size"]) // dt.itemsize)
            strtab = image.sections[int(sh["link"])]
            base, end = int(strtab["offset"]), int(strtab["offset"] + strtab["size"])
            for name in names:
                if name in found:
                    continue
                at = image.data.find(b"\0" + name + b"\0", base, end)
                if at < 0:
                    continue
                hits = raw[(raw["name"] == at + 1 - base) & (raw["value"] != 0)]
                if len(hits):
                    found[name] = int(hits[0]["value"])
        if len(found) == len(names):
            break
    return found


def _load_bias(image: ElfImage, maps: Maps, path: str) -> int | None:
    """What to add to the file's virtual addresses to get the process's addresses."""
    for m in maps.mappings:
        if m.path != path or m.perms.endswith("s"):  # a shared mapping is no loaded segment
            continue
        for seg in image.segments:
            if seg.offset - seg.offset % 4096 == m.offset:
                return m.start - (seg.vaddr - (seg.offset - m.offset))
    return None


def _version(pid: int, symbols: dict[bytes, int], bias: int, path: str) -> tuple[int, int]:
    if b"Py_Version" in symbols:  # 3.11+: PY_VERSION_HEX
        raw = read_memory(pid, symbols[b"Py_Version"] + bias, 4)
        if raw is not None:
            hexversion = struct.unpack("<I", raw)[0]
            return hexversion >> 24, (hexversion >> 16) & 0xFF
    m = _PYTHON_FILE.search(path)
    assert m is not None  # only such files are candidates
    return int(m.group(1)), int(m.group(2))


def _debug_offsets(pid: int, runtime: int, version: tuple[int, int]) -> Offsets:
    raw = read_memory(pid, runtime, _DEBUG_313_LEN)
    if raw is None or not raw.startswith(DEBUG_COOKIE):
        raise UnsupportedPython(f"no debug offsets in Python {version[0]}.{version[1]}")
    fields = struct.unpack_from(f"<{_DEBUG_313_LEN // 8 - 1}Q", raw, 8)
    value = {name: fields[i - 1] for name, i in _DEBUG_313_FIELDS.items()}
    hexversion = value["version"]
    if (hexversion >> 24, (hexversion >> 16) & 0xFF) != (3, 13):
        raise UnsupportedPython(
            f"Python {version[0]}.{version[1]}'s debug offsets are not read yet (3.11-3.13)"
        )
    if value["free_threaded"]:
        raise UnsupportedPython("free-threaded Python is not read by the eBPF walker")
    return Offsets(
        interpreters_head=value["interpreters_head"],
        threads_head=value["threads_head"],
        tstate_next=value["tstate_next"],
        native_thread_id=value["native_thread_id"],
        tstate_frame=value["current_frame"],
        cframe_frame=NO_OFFSET,
        frame_code=value["frame_code"],
        frame_previous=value["frame_previous"],
        frame_owner=value["frame_owner"],
        frame_is_entry=NO_OFFSET,
        code_filename=value["code_filename"],
        code_name=value["code_name"],
        code_qualname=value["code_qualname"],
        code_firstlineno=value["code_firstlineno"],
        unicode_state=value["unicode_state"],
        unicode_length=value["unicode_length"],
        ascii_size=value["ascii_size"],
        compact_size=value["ascii_size"] + 16,  # + utf8_length, utf8 (PyCompactUnicodeObject)
        gil_locked=value["gil_locked"],
        gil_holder=value["gil_holder"],
        gil_in_runtime=False,
    )


def read_memory(pid: int, address: int, size: int) -> bytes | None:
    """``size`` bytes of process ``pid`` at ``address``; None if any is unreadable."""
    try:
        with open(f"/proc/{pid}/mem", "rb", buffering=0) as f:
            f.seek(address)
            data = f.read(size)
    except (OSError, OverflowError, ValueError):
        return None
    return data if len(data) == size else None
