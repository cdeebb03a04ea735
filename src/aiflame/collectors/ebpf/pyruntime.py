"""Find a CPython interpreter in a running process and where its frames are kept.

The eBPF sampler walks each sampled thread's Python frames itself (``bpf/pystack.h``); for
that it needs, per process, the address of ``_PyRuntime``, the interpreter's version and
the offsets of a few fields of its internal structures (:mod:`.pylayouts`: tabled for
3.8-3.12, read from the process's own ``_Py_DebugOffsets`` from 3.13). 3.8-3.10 thread
states know their threads by ``pthread_self()``, which the walk derives from the thread's
TLS base: on AArch64 that needs the C library's size of ``struct pthread``, read here.

Anything else (3.7 and older, free-threaded builds, layouts not known yet) is reported as
unsupported with the reason, and ``aiflame record`` falls back to py-spy for that
process's Python stacks.
"""

from __future__ import annotations

import os
import platform
import re
import struct
from dataclasses import dataclass

from aiflame.collectors.ebpf.pylayouts import (
    TABLES,
    Offsets,
    UnsupportedPython,
    from_debug_offsets,
)
from aiflame.symbolize.elf import ElfError, ElfImage, open_image
from aiflame.symbolize.maps import Mapping, Maps

# the name of a file that may hold an interpreter: libpython3.12.so.1.0, python3.11,
# python3.13d, libpython3.13t.so ...
_PYTHON_NAME_PATTERN = r"(?:lib)?python(\d)\.(\d+)[a-z]*(?:\.so[.\d]*)?"
_PYTHON_NAME = re.compile(_PYTHON_NAME_PATTERN)
_PYTHON_FILE = re.compile(rf"(?:^|/){_PYTHON_NAME_PATTERN}$")
# in the name of every file _PYTHON_FILE takes: a process whose maps lack it has no
# interpreter, found without parsing its maps (most processes a host starts are no Python)
_MAYBE_PYTHON = re.compile(r"python\d\.\d")
# the end of a maps line of such a file
_PYTHON_LINE_END = re.compile(rf"/{_PYTHON_NAME_PATTERN}(?: \(deleted\))?$", re.MULTILINE)


def _python_lines(maps_text: str) -> str:
    """The lines of files that may hold an interpreter: those looked at to find it (a
    Python process maps a hundred other files)."""
    lines = []
    for m in _PYTHON_LINE_END.finditer(maps_text):
        lines.append(maps_text[maps_text.rfind("\n", 0, m.start()) + 1 : m.end()])
    return "\n".join(lines)


_WANTED = (b"_PyRuntime", b"Py_Version", b"PyCode_Type")
SHT_DYNSYM, SHT_SYMTAB = 11, 2
NO_RUNTIME = " has no _PyRuntime symbol"
NO_INTERPRETER = "no Python interpreter is mapped"
# glibc's size of struct pthread (for libthread_db): on AArch64 pthread_self() is the
# thread pointer minus it
_SIZEOF_PTHREAD = b"_thread_db_sizeof_pthread"
_LIBC = re.compile(r"(?:^|/)lib(?:c|pthread)[.-][\w.-]*so[.\d]*$")


@dataclass(frozen=True)
class PythonProcess:
    """One interpreter in one process: what the BPF walk and the code reader need."""

    pid: int
    version: tuple[int, int]
    module: str  # the file holding the interpreter (python3.11, libpython3.12.so.1.0)
    runtime: int  # address of _PyRuntime
    code_type: int  # address of PyCode_Type (0: unknown, then code objects are not checked)
    offsets: Offsets
    tls_delta: int = 0  # pthread_self() minus the TLS base (3.8-3.10 thread matching)

    def bpf_struct(self) -> bytes:
        """``struct py_proc`` of bpf/pystack.h for this process."""
        return self.offsets.bpf_struct(self.runtime, self.tls_delta)


def candidate_files(maps: Maps) -> list[Mapping]:
    """One mapping per loaded file whose name says it may hold an interpreter. Loaded: with
    code mapped executable, so that a file only mapped to be read (a symbolizer reading
    another interpreter's symbols, as a profiler in the same process does) is not taken
    for the process's interpreter."""
    mappings = maps.named(_PYTHON_NAME)  # the lines of other files are not parsed
    loaded = {m.path for m in mappings if m.is_file and m.executable}
    seen: set[str] = set()
    out = []
    for m in mappings:
        if m.path in loaded and m.path not in seen:
            seen.add(m.path)
            out.append(m)
    return out


def maps_interpreter(maps_text: str) -> bool:
    """Whether a process with these mappings has an interpreter's file loaded."""
    return bool(_MAYBE_PYTHON.search(maps_text)) and bool(candidate_files(Maps.parse(maps_text)))


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
    maps = Maps.parse(_python_lines(maps_text))
    candidates = candidate_files(maps)
    if not candidates:
        raise UnsupportedPython(NO_INTERPRETER)
    reasons = []
    for mapping in candidates:
        try:
            return _interpreter(pid, maps, mapping, maps_text)
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


def _interpreter(pid: int, maps: Maps, mapping: Mapping, maps_text: str) -> PythonProcess:
    """The interpreter in ``mapping``; ``maps``: the mappings of its file (at least),
    ``maps_text``: all of them."""
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
    v = f"{version[0]}.{version[1]}"
    if version >= (3, 13):
        offsets = from_debug_offsets(lambda a, n: read_memory(pid, a, n), runtime, version)
    elif version in TABLES:
        offsets = TABLES[version]
    else:
        raise UnsupportedPython(f"Python {v} is not read by the eBPF walker (3.8+)")
    if not _layout_holds(pid, runtime, offsets):
        raise UnsupportedPython(
            f"Python {v} in {mapping.path} is laid out otherwise than its release (a debug build?)"
        )
    tls_delta = _tls_delta(pid, Maps.parse_shared(maps_text)) if offsets.thread_by_tls else 0
    if tls_delta is None:
        raise UnsupportedPython(
            f"Python {v}'s threads cannot be told apart here: no glibc size of struct pthread"
        )
    return PythonProcess(pid, version, mapping.path, runtime, code_type, offsets, tls_delta)


def _layout_holds(pid: int, runtime: int, offsets: Offsets) -> bool:
    """Whether a live interpreter agrees with the offsets: its first thread state points
    back at its interpreter. True while it is not initialized yet (nothing to check)."""
    interp = _read_word(pid, runtime + offsets.interpreters_head)
    if not interp:
        return True
    tstate = _read_word(pid, interp + offsets.threads_head)
    if not tstate:
        return True
    return _read_word(pid, tstate + offsets.tstate_interp) == interp


def _read_word(pid: int, address: int) -> int | None:
    raw = read_memory(pid, address, 8)
    return struct.unpack("<Q", raw)[0] if raw is not None else None


def _tls_delta(pid: int, maps: Maps) -> int | None:
    """pthread_self() minus the thread's TLS base: 0 on x86-64 (the FS base is the thread's
    own descriptor); on AArch64 glibc places struct pthread just below the thread pointer,
    and says its size in ``_thread_db_sizeof_pthread`` (libc, or libpthread before 2.34)."""
    if platform.machine() != "aarch64":
        return 0
    libs = {m.path for m in maps.mappings if m.is_file and _LIBC.search(m.path)}
    for lib in sorted(libs):
        try:
            image, _ = open_image(_readable_path(pid, lib))
        except (OSError, ElfError):
            continue
        symbols = _data_symbols(image, (_SIZEOF_PTHREAD,))
        bias = _load_bias(image, maps, lib)
        if _SIZEOF_PTHREAD in symbols and bias is not None:
            raw = read_memory(pid, symbols[_SIZEOF_PTHREAD] + bias, 4)
            if raw is not None:
                return -struct.unpack("<I", raw)[0]
    return None


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
    for m in maps.of_file(path):
        if m.perms.endswith("s"):  # a shared mapping is no loaded segment
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


def read_memory(pid: int, address: int, size: int) -> bytes | None:
    """``size`` bytes of process ``pid`` at ``address``; None if any is unreadable."""
    try:
        with open(f"/proc/{pid}/mem", "rb", buffering=0) as f:
            f.seek(address)
            data = f.read(size)
    except (OSError, OverflowError, ValueError):
        return None
    return data if len(data) == size else None
