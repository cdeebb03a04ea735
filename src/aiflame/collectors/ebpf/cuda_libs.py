"""Which CUDA/HIP libraries a process really maps, and where their API functions are.

Libraries are found in ``/proc/PID/maps`` by file name, wherever they live: the system's
``libcuda.so.1``, ``libcudart.so.12`` inside a Python wheel
(``site-packages/nvidia/cuda_runtime/lib``), auditwheel's renamed copies
(``libcudart-1a2b3c4d.so.11.0``), ``libamdhip64.so``. The file is reached through
``/proc/PID/root`` so that libraries inside containers are found as the process sees them.

A uprobe is placed at a file offset: the function's address in ``.dynsym`` (or ``.symtab``)
translated through the program headers. Only functions that exist in the file are probed.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from aiflame.collectors.ebpf.cuda_apis import APIS

# family -> library file names (with auditwheel's "-<hash>" before ".so")
_LIBS = (
    ("cudart", re.compile(r"^libcudart(?:-[0-9a-f]{8})?\.so(?:\.\d+)*$")),
    ("cuda", re.compile(r"^libcuda\.so(?:\.\d+)*$")),
    ("hip", re.compile(r"^libamdhip64(?:-[0-9a-f]{8})?\.so(?:\.\d+)*$")),
)
_NAME_PARTS = ("/libcudart", "/libcuda.so", "/libamdhip64")  # one of them is in every match


def family_of(path: str) -> str | None:
    base = path.rsplit("/", 1)[-1]
    for family, pattern in _LIBS:
        if pattern.match(base):
            return family
    return None


@dataclass
class Mapping:
    start: int
    end: int
    offset: int
    perms: str
    dev: str
    inode: int
    path: str


@dataclass
class GpuLibrary:
    """A CUDA/HIP library mapped by a process."""

    family: str
    path: str  # as the process sees it
    host_path: str  # a path to the same file from here (through /proc/PID/root)
    inode: int
    dev: str
    text: list[tuple[int, int]] = field(default_factory=list)  # executable address ranges


def parse_maps(text: str) -> list[Mapping]:
    out = []
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6 or not parts[5].startswith("/"):
            continue
        lo, _, hi = parts[0].partition("-")
        try:
            out.append(
                Mapping(
                    int(lo, 16),
                    int(hi, 16),
                    int(parts[2], 16),
                    parts[1],
                    parts[3],
                    int(parts[4]),
                    parts[5],
                )
            )
        except ValueError:
            continue
    return out


def read_maps(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def host_path(pid: int, path: str, inode: int = 0) -> str:
    """A path to the process's file from our mount namespace: through ``/proc/PID/root``
    when the process has another root (a container), else the path itself. A process
    chrooted in our namespace sees its files under its root, but its maps name them from
    ours: the path whose inode is the one mapped (``inode``) wins."""
    root = f"/proc/{pid}/root"
    try:
        same = os.path.samestat(os.stat(root), os.stat("/"))
    except OSError:  # not ours to look into: the plain path is the best guess
        return path
    if same:
        return path
    for candidate in (root + path, path):
        try:
            if not inode or os.stat(candidate).st_ino == inode:
                return candidate
        except OSError:
            continue
    return root + path


def gpu_libraries(pid: int, maps_text: str | None = None) -> list[GpuLibrary]:
    """The CUDA/HIP libraries ``pid`` maps (deleted files are left out: nothing to probe)."""
    text = read_maps(pid) if maps_text is None else maps_text
    if not text or not any(name in text for name in _NAME_PARTS):
        return []  # most processes map none: no need to parse every line
    libs: dict[tuple[str, int], GpuLibrary] = {}
    for m in parse_maps(text):
        if m.path.endswith(" (deleted)"):
            continue
        family = family_of(m.path)
        if family is None:
            continue
        key = (m.dev, m.inode)
        lib = libs.get(key)
        if lib is None:
            lib = libs[key] = GpuLibrary(
                family, m.path, host_path(pid, m.path, m.inode), m.inode, m.dev
            )
        if "x" in m.perms:
            lib.text.append((m.start, m.end))
    return list(libs.values())


# -- ELF symbols --------------------------------------------------------------------------

_SYM = np.dtype(
    [
        ("name", "<u4"),
        ("info", "u1"),
        ("other", "u1"),
        ("shndx", "<u2"),
        ("value", "<u8"),
        ("size", "<u8"),
    ]
)
STT_FUNC, STT_GNU_IFUNC = 2, 10
SHT_SYMTAB, SHT_DYNSYM, SHT_GNU_VERSYM = 2, 11, 0x6FFFFFFF
PT_LOAD = 1
VERSYM_HIDDEN = 0x8000
AT_BASE = 7


class ElfError(Exception):
    pass


def function_offsets(path: str, names: Iterable[str]) -> dict[str, int]:
    """``{name: file offset}`` of the functions among ``names`` defined in the ELF file.

    Where a name has several versions (``foo@V1``, ``foo@@V2``) the default one wins, as
    the dynamic linker would pick it.
    """
    with open(path, "rb") as f:
        data = f.read()
    found, loads = _symbols(data, path, set(names), functions_only=True)
    out = {}
    for name, addr in found.items():
        for lo, hi, off in loads:
            if lo <= addr < hi:
                out[name] = addr - lo + off
                break
    return out


def loader_probe(path: str) -> tuple[int, int] | None:
    """Where to probe a dynamic loader: (file offset of ``_dl_debug_state``, address of
    ``_r_debug`` minus that of ``_dl_debug_state``); None where it has not both (not
    glibc's)."""
    with open(path, "rb") as f:
        data = f.read()
    wanted = {"_dl_debug_state", "_r_debug"}
    found, _ = _symbols(data, path, wanted, functions_only=False)
    offsets = function_offsets(path, ["_dl_debug_state"])
    if set(found) != wanted or "_dl_debug_state" not in offsets:
        return None
    return offsets["_dl_debug_state"], found["_r_debug"] - found["_dl_debug_state"]


def _symbols(
    data: bytes, path: str, wanted: set[str], functions_only: bool
) -> tuple[dict[str, int], list[tuple[int, int, int]]]:
    """Addresses of the defined symbols among ``wanted`` (the default version of each), and
    the file's loaded segments (address, end, file offset)."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ElfError(f"{path}: not a 64-bit little-endian ELF file")
    phoff, shoff = struct.unpack_from("<QQ", data, 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", data, 0x36)
    loads = []
    for i in range(phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz = struct.unpack_from(
            "<IIQQQQ", data, phoff + i * phentsize
        )
        if p_type == PT_LOAD:
            loads.append((p_vaddr, p_vaddr + p_filesz, p_offset))
    sections = [
        struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)
    ]
    found: dict[str, tuple[int, bool]] = {}  # name -> (address, hidden version)
    for sh in sections:
        if sh[1] not in (SHT_DYNSYM, SHT_SYMTAB):
            continue
        _, sh_type, _, _, off, size, link, _, _, _ = sh
        syms = np.frombuffer(data, dtype=_SYM, count=size // 24, offset=off)
        strtab = sections[link]
        str_off, str_size = strtab[4], strtab[5]
        versym = _versym(sections, data, sh_type, len(syms))
        kind = syms["info"] & 0xF
        defined = syms["shndx"] != 0
        if functions_only:
            defined &= (kind == STT_FUNC) | (kind == STT_GNU_IFUNC)
        for i in np.nonzero(defined)[0].tolist():
            start = str_off + int(syms["name"][i])
            if start >= str_off + str_size:
                continue
            name = data[start : data.index(b"\0", start)].decode("ascii", "replace")
            if name not in wanted:
                continue
            hidden = bool(versym[i] & VERSYM_HIDDEN) if versym is not None else False
            prev = found.get(name)
            if prev is None or (prev[1] and not hidden):
                found[name] = (int(syms["value"][i]), hidden)
    return {name: addr for name, (addr, _) in found.items()}, loads


def _versym(sections: list[tuple], data: bytes, sym_type: int, n: int) -> np.ndarray | None:
    if sym_type != SHT_DYNSYM:
        return None
    for sh in sections:
        if sh[1] == SHT_GNU_VERSYM and sh[5] >= 2 * n:
            return np.frombuffer(data, dtype="<u2", count=n, offset=sh[4])
    return None


def kernel_dev(maps_dev: str) -> int:
    """The kernel's own ``dev_t`` of a ``/proc/PID/maps`` device (``fd:01``), as BPF reads
    it from a file's super block: major << 20 | minor."""
    major, _, minor = maps_dev.partition(":")
    return int(major, 16) << 20 | int(minor, 16)


def loader_of(pid: int, maps_text: str) -> GpuLibrary | None:
    """The dynamic loader a process was started with (from AT_BASE in its auxiliary
    vector), as a library of family ``loader``; None for a static program."""
    try:
        with open(f"/proc/{pid}/auxv", "rb") as f:
            auxv = f.read()
    except OSError:
        return None
    base = 0
    for i in range(0, len(auxv) - 15, 16):
        key, value = struct.unpack_from("<QQ", auxv, i)
        if key == AT_BASE:
            base = value
            break
    if not base:
        return None
    for m in parse_maps(maps_text):
        if m.start <= base < m.end and not m.path.endswith(" (deleted)"):
            return GpuLibrary("loader", m.path, host_path(pid, m.path, m.inode), m.inode, m.dev)
    return None


def probe_targets(lib: GpuLibrary, roles: set[str]) -> list[tuple[int, int]]:
    """(api id, file offset) of the functions of ``lib``'s family that it defines."""
    candidates = {
        a.name: i for i, a in enumerate(APIS) if a.family == lib.family and a.role in roles
    }
    offsets = function_offsets(lib.host_path, candidates)
    return sorted((candidates[name], off) for name, off in offsets.items())
