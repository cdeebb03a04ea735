"""SASS text and source lines of a cubin's instructions, without a GPU.

NVIDIA's own tools do the decoding: ``nvdisasm -c -gi`` (PyPI ``nvidia-cuda-nvdisasm``)
prints every instruction at its function-relative offset with the ``file, line`` it came
from and, for inlined code, the lines it was inlined at; ``cuptiGetCubinCrc`` (PyPI
``nvidia-cuda-cupti``, through ctypes; no driver needed) gives the CRC that CUPTI's PC
records carry to name their cubin, and ``cuptiGetSassToSourceCorrelation`` the line of an
offset when nvdisasm is not installed. Results are kept per CRC in memory and in
``$XDG_CACHE_HOME/aiflame/cubin/`` (a cubin is disassembled once, whoever asks).
"""

from __future__ import annotations

import ctypes
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from bisect import bisect_right
from dataclasses import dataclass, field

from aiflame.errors import AiflameError

ELF_MAGIC = b"\x7fELF"
EM_CUDA = 190
# 2: inline chains kept whole and paths normalized (entries of 1 had neither)
CACHE_VERSION = 2


class CubinError(AiflameError):
    """A cubin cannot be read, or NVIDIA's tools for it are missing."""


@dataclass(frozen=True, slots=True)
class Instruction:
    """One SASS instruction: ``lines`` is its source position, outermost inline level
    first (the last entry is where the instruction's own code is)."""

    offset: int
    text: str
    lines: tuple[tuple[str, int], ...] = ()


@dataclass
class Cubin:
    """The instructions of each function of one cubin, sorted by offset."""

    crc: int
    sm: str
    functions: dict[str, list[Instruction]] = field(default_factory=dict)
    _offsets: dict[str, list[int]] = field(default_factory=dict, repr=False)

    def instruction(self, function: str, offset: int) -> Instruction | None:
        """The instruction at (or, for an offset inside it, before) ``offset``."""
        insts = self.functions.get(function)
        if not insts:
            return None
        offs = self._offsets.get(function)
        if offs is None:
            offs = self._offsets[function] = [i.offset for i in insts]
        k = bisect_right(offs, offset) - 1
        return insts[k] if k >= 0 else None


def is_cubin(data: bytes) -> bool:
    """An ELF file for the CUDA machine (e_machine 190)."""
    return data[:4] == ELF_MAGIC and int.from_bytes(data[18:20], "little") == EM_CUDA


def cubin_sm(data: bytes) -> int | None:
    """The SM a cubin is for (70 for a V100's), from its ELF header: ``e_flags`` holds it in
    its low byte in the first CUDA ELF ABI (EI_ABIVERSION 7), in its second byte in the
    second (8, CUDA 12.8 and later)."""
    if not is_cubin(data) or len(data) < 52 or data[4] != 2:  # 64-bit ELF only
        return None
    flags = int.from_bytes(data[48:52], "little")
    sm = (flags >> 8) & 0xFF if data[8] >= 8 else flags & 0xFF
    return sm or None


# CUDA 13's tools no longer read cubins of Maxwell, Pascal and Volta (sm_50 to sm_72);
# CUDA 12's read every SM from sm_50 on.
LAST_SM_OF_CUDA_12_ONLY = 72


# -- NVIDIA's tools -----------------------------------------------------------------------


def _nvidia_dirs() -> list[str]:
    """Install folders of NVIDIA's PyPI wheels (the ``nvidia`` namespace package)."""
    out = []
    for p in sys.path:
        d = os.path.join(p, "nvidia")
        if os.path.isdir(d):
            out.append(d)
    return out


def find_nvdisasm() -> str | None:
    env = os.environ.get("AIFLAME_NVDISASM")
    if env:
        return env if os.access(env, os.X_OK) else None
    for d in _nvidia_dirs():
        for cand in sorted(glob.glob(os.path.join(d, "*", "bin", "nvdisasm")), reverse=True):
            if os.access(cand, os.X_OK):
                return cand
    found = shutil.which("nvdisasm")
    if found:
        return found
    cuda = os.environ.get("CUDA_HOME") or "/usr/local/cuda"
    cand = os.path.join(cuda, "bin", "nvdisasm")
    return cand if os.access(cand, os.X_OK) else None


def libcupti_candidates() -> list[str]:
    """Every libcupti found: $AIFLAME_LIBCUPTI, NVIDIA's wheels (newest first), the CUDA
    toolkit. Several may be needed: libcupti 13.4 and later load the driver even for
    cuptiGetCubinCrc, so without a GPU an older one (13.0, 12.x) does the work."""
    out = []
    env = os.environ.get("AIFLAME_LIBCUPTI")
    if env:
        out.append(env)
    for d in _nvidia_dirs():
        for pattern in ("*/lib/libcupti.so*",):
            out += sorted(glob.glob(os.path.join(d, pattern)), reverse=True)
    cuda = os.environ.get("CUDA_HOME") or "/usr/local/cuda"
    out += sorted(glob.glob(os.path.join(cuda, "extras", "CUPTI", "lib64", "libcupti.so*")))
    return list(dict.fromkeys(out))


class _GetCubinCrcParams(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("cubinSize", ctypes.c_size_t),
        ("cubin", ctypes.c_void_p),
        ("cubinCrc", ctypes.c_uint64),
    ]


class _SassToSourceParams(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("cubin", ctypes.c_void_p),
        ("functionName", ctypes.c_char_p),
        ("cubinSize", ctypes.c_size_t),
        ("lineNumber", ctypes.c_uint32),
        ("pcOffset", ctypes.c_uint64),
        ("fileName", ctypes.c_void_p),
        ("dirName", ctypes.c_void_p),
    ]


_working: ctypes.CDLL | None = None  # the first libcupti whose offline calls succeeded


def _call_cupti(name: str, params: ctypes.Structure) -> int:
    """Call ``name(&params)`` in the first libcupti where it succeeds; its last error."""
    global _working
    libs: list[ctypes.CDLL] = [_working] if _working is not None else []
    if not libs:
        for path in libcupti_candidates():
            try:
                libs.append(ctypes.CDLL(path))
            except OSError:
                continue
    if not libs:
        raise CubinError("libcupti not found (pip install 'aiflame[gpu]')")
    rc = -1
    for lib in libs:
        rc = getattr(lib, name)(ctypes.byref(params))
        if rc == 0:
            _working = lib
            return 0
    return rc


def cubin_crc(data: bytes) -> int:
    """``cuptiGetCubinCrc``: the id CUPTI's PC sampling records give the cubin."""
    buf = ctypes.create_string_buffer(data, len(data))
    p = _GetCubinCrcParams(ctypes.sizeof(_GetCubinCrcParams), len(data), ctypes.addressof(buf), 0)
    rc = _call_cupti("cuptiGetCubinCrc", p)
    if rc != 0:
        hint = " (libcupti 13.4+ needs a driver: pip install 'nvidia-cuda-cupti==13.0.*')"
        raise CubinError(f"cuptiGetCubinCrc failed (CUPTI error {rc}){hint if rc == 999 else ''}")
    return int(p.cubinCrc)


def sass_to_source(data: bytes, function: str, offset: int) -> tuple[str, int] | None:
    """``cuptiGetSassToSourceCorrelation``: (path, line) of one offset, None without lines."""
    buf = ctypes.create_string_buffer(data, len(data))
    p = _SassToSourceParams(
        ctypes.sizeof(_SassToSourceParams),
        ctypes.addressof(buf),
        function.encode(),
        len(data),
        0,
        offset,
        None,
        None,
    )
    if _call_cupti("cuptiGetSassToSourceCorrelation", p) != 0:
        return None
    libc = ctypes.CDLL(None)
    names = []
    for ptr in (p.dirName, p.fileName):
        names.append(ctypes.string_at(ptr).decode("utf-8", "replace") if ptr else "")
        if ptr:
            libc.free(ctypes.c_void_p(ptr))  # CUPTI mallocs the strings for the caller
    directory, file = names
    return (os.path.join(directory, file) if directory else file), int(p.lineNumber)


# -- nvdisasm -c -gi ----------------------------------------------------------------------

_SECTION = re.compile(r"^//-+ \.text\.(\S+)\s+-+")
_LINE = re.compile(r'^\s*//## File "(?P<file>[^"]*)", line (?P<line>\d+)(?P<rest>.*)$')
_INLINED = re.compile(r' inlined at "(?P<file>[^"]*)", line (?P<line>\d+)')
_INSN = re.compile(r"^\s*/\*(?P<off>[0-9a-fA-F]{4,})\*/\s+(?P<text>.*?)\s*;?\s*(?:/\*.*\*/)?\s*$")
_TARGET = re.compile(r"^\s*\.target\s+sm_(\w+)|EF_CUDA_SM(\d+)")


def parse_nvdisasm(text: str) -> tuple[str, dict[str, list[Instruction]]]:
    """(sm, functions) from ``nvdisasm -c -gi`` output."""
    sm = ""
    functions: dict[str, list[Instruction]] = {}
    current: list[Instruction] | None = None
    lines: tuple[tuple[str, int], ...] = ()
    after_annotation = False
    for raw in text.splitlines():
        m = _SECTION.match(raw)
        if m:
            current = functions.setdefault(m.group(1), [])
            lines, after_annotation = (), False
            continue
        if not sm:
            t = _TARGET.search(raw)
            if t:
                sm = "sm_" + (t.group(1) or t.group(2))
        m = _LINE.match(raw)
        if m:
            chain = [(os.path.normpath(m.group("file")), int(m.group("line")))]
            for i in _INLINED.finditer(m.group("rest")):
                chain.append((os.path.normpath(i.group("file")), int(i.group("line"))))
            chain.reverse()  # outermost (the call site) first
            # nvdisasm -gi names an inlined line, then its call site again, before the same
            # instruction: the longest chain since the last instruction is its position.
            if not after_annotation or len(chain) > len(lines):
                lines = tuple(chain)
            after_annotation = True
            continue
        if current is None:
            continue
        m = _INSN.match(raw)
        if m:
            after_annotation = False
            text = " ".join(m.group("text").split())
            current.append(Instruction(int(m.group("off"), 16), text, lines))
    for insts in functions.values():
        insts.sort(key=lambda i: i.offset)
    return sm, functions


def disassemble(data: bytes) -> tuple[str, dict[str, list[Instruction]]]:
    tool = find_nvdisasm()
    if not tool:
        raise CubinError("nvdisasm not found (pip install nvidia-cuda-nvdisasm)")
    sm = cubin_sm(data)
    older = sm is not None and sm <= LAST_SM_OF_CUDA_12_ONLY
    if older and not os.environ.get("AIFLAME_NVDISASM") and _major_version(tool) >= 13:
        tool = _cuda12_nvdisasm() or tool
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(data)
        f.flush()
        try:
            out = subprocess.run(
                [tool, "-c", "-gi", f.name], capture_output=True, check=False, timeout=300
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            raise CubinError(f"nvdisasm failed: {e}") from None
    if out.returncode != 0:
        if older and _major_version(tool) >= 13:
            raise CubinError(_too_new_message(tool, sm or 0))
        msg = out.stderr.decode("utf-8", "replace").strip().splitlines()
        raise CubinError(f"nvdisasm failed: {msg[-1] if msg else out.returncode}")
    return parse_nvdisasm(out.stdout.decode("utf-8", "replace"))


def _too_new_message(tool: str, sm: int) -> str:
    return (
        f"sm_{sm} cubin: nvdisasm {_version_text(tool)} does not read it (CUDA 13 dropped"
        " Maxwell, Pascal and Volta); a CUDA 12 nvdisasm does: set"
        " AIFLAME_NVDISASM=/usr/local/cuda-12.x/bin/nvdisasm (or conda's cuda-nvdisasm=12)"
    )


_versions: dict[str, str] = {}


def _version_text(tool: str) -> str:
    """``13.5`` from ``nvdisasm --version`` ("release 13.5, V13.5.37"); "" if unknown."""
    if tool not in _versions:
        try:
            out = subprocess.run([tool, "--version"], capture_output=True, timeout=30).stdout
            m = re.search(rb"release (\d+\.\d+)", out)
            _versions[tool] = m.group(1).decode() if m else ""
        except (OSError, subprocess.TimeoutExpired):
            _versions[tool] = ""
    return _versions[tool]


def _major_version(tool: str) -> int:
    text = _version_text(tool)
    return int(text.split(".")[0]) if text else 0


def _cuda12_nvdisasm() -> str | None:
    """An nvdisasm of CUDA 12 or older on this machine (a toolkit beside a CUDA 13 one)."""
    for cand in sorted(glob.glob("/usr/local/cuda-1[0-2]*/bin/nvdisasm"), reverse=True):
        if os.access(cand, os.X_OK) and 0 < _major_version(cand) < 13:
            return cand
    return None


# -- the cache ----------------------------------------------------------------------------


def cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "aiflame", "cubin")


_memory: dict[str, Cubin] = {}


def _cache_key(data: bytes, crc: int | None) -> str:
    """The CRC where known; else the content's SHA-1 (a cubin read without libcupti)."""
    return f"{crc:016x}" if crc is not None else "sha1-" + hashlib.sha1(data).hexdigest()


def _cache_path(key: str) -> str:
    return os.path.join(cache_dir(), f"{key}.json")


def _from_json(crc: int, doc: dict) -> Cubin:
    funcs = {
        name: [Instruction(o, t, tuple((f, n) for f, n in ln)) for o, t, ln in insts]
        for name, insts in doc["functions"].items()
    }
    return Cubin(crc, doc.get("sm", ""), funcs)


def _to_json(c: Cubin) -> dict:
    return {
        "version": CACHE_VERSION,
        "sm": c.sm,
        "functions": {
            name: [[i.offset, i.text, [list(x) for x in i.lines]] for i in insts]
            for name, insts in c.functions.items()
        },
    }


def load_cubin(data: bytes, crc: int | None = None, *, need_crc: bool = True) -> Cubin:
    """The instructions of a cubin, disassembled once per CRC (memory, then disk cache).

    Without ``crc``, CUPTI computes it; ``need_crc=False`` (the caller knows the cubin by
    other means, as HPCToolkit's gpubins by their MD5) goes on without libcupti, the
    cubin's ``crc`` then 0."""
    if not is_cubin(data):
        raise CubinError("not a cubin (an ELF file for CUDA)")
    if crc is None:
        try:
            crc = cubin_crc(data)
        except CubinError:
            if need_crc:
                raise
    key = _cache_key(data, crc)
    hit = _memory.get(key)
    if hit is not None:
        return hit
    path = _cache_path(key)
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        if doc.get("version") == CACHE_VERSION:
            hit = _memory[key] = _from_json(crc or 0, doc)
            return hit
    except (OSError, ValueError, KeyError, TypeError):
        pass
    sm, functions = disassemble(data)
    cubin = _memory[key] = Cubin(crc or 0, sm, functions)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(_to_json(cubin), f)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home still symbolizes, only not cached on disk
    return cubin


def load_cubin_file(path: str) -> Cubin:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise CubinError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        return load_cubin(data)
    except CubinError as e:
        raise CubinError(f"{path}: {e}") from None
