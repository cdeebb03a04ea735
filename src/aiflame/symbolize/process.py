"""Native symbolization of running (or recently exited) processes and of the kernel.

A :class:`SymbolResolver` lives as long as a collector: it caches every ELF file it has read
(keyed by the file's identity, then by build-id, so a library shared by a thousand processes
or containers is read once), the kernel's symbols and demangled names. Per process,
:meth:`SymbolResolver.process` takes a snapshot of ``/proc/PID/maps`` (or an earlier one, for a
process that has exited) and returns a :class:`ProcessSymbols` that turns addresses into
:class:`Symbol` objects::

    resolver = SymbolResolver()
    syms = resolver.process(pid).symbolize(addresses)
    ksyms = resolver.kernel().symbolize(kernel_addresses)

An address inside a mapped ELF file becomes a file offset (through the mapping's offset),
then a virtual address of that file (through its ``PT_LOAD`` segments), then a symbol of its
``.symtab`` (the file's own, or a separate debug file's) or ``.dynsym``. Files are opened as
the target sees them, through ``/proc/PID/root`` (containers) or ``/proc/PID/map_files`` (files
deleted or replaced since they were mapped), then by their plain path. Nothing raises: an
address no symbol covers is named ``module+0xOFFSET``, one outside every mapping
``[unknown]``.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from aiflame.model.frames import FrameKind
from aiflame.symbolize import debuginfo
from aiflame.symbolize.cxa import Demangler
from aiflame.symbolize.elf import (
    SHT_DYNSYM,
    SHT_SYMTAB,
    ElfError,
    ElfImage,
    PltEntries,
    SymbolTable,
    function_symbols,
    open_image,
    plt_entries,
)
from aiflame.symbolize.kallsyms import KernelSymbolTable
from aiflame.symbolize.kinds import KindGuesser
from aiflame.symbolize.maps import Mapping, Maps
from aiflame.symbolize.perfmap import PerfMap, clean_name

KERNEL_MODULE = "[kernel]"
UNKNOWN_NAME = "[unknown]"
MAX_OFFSETS_REMEMBERED = 4096  # Symbols by offset kept per module path (then started again)
VDSO = "[vdso]"

# CUDA / HIP runtime and driver libraries, also as vendored into wheels (libcudart-1a2b3c.so).
_RUNTIME_LIB = re.compile(
    r"^lib(?:cudart|cuda|cupti|nvrtc|nvJitLink|amdhip64|hiprtc|hsa-runtime64|nccl|rccl)(?:[-.]|$)"
)


@dataclass(frozen=True, slots=True)
class Symbol:
    """A resolved address.

    ``name``: the demangled function name; ``<file name>+0x<file offset>`` where no symbol
    covers the address; ``[heap]+0x..``/``[anon]+0x..`` (offset into the mapping) in memory
    that is not a file and no perf map names; ``[unknown]`` outside every mapping (and kernel
    addresses without a symbol). ``module``: the mapped file's path as the process sees it,
    ``[vdso]``/``[heap]``..., the perf map's path for JIT code, ``[kernel]``, or "" (anonymous
    memory, no mapping). ``kind``: RUNTIME in CUDA/HIP runtime and driver libraries, CPP for
    C++ names, KERNEL, JIT (or PYTHON for CPython's perf trampolines), else from the name.
    """

    name: str
    module: str
    kind: FrameKind


UNKNOWN = Symbol(UNKNOWN_NAME, "", FrameKind.UNKNOWN)


def _as_addresses(addrs: Sequence[int] | np.ndarray) -> np.ndarray:
    """Addresses as uint64; signed values (kernel addresses in an int64 array) wrap."""
    arr = np.asarray(addrs)
    if arr.dtype.kind in "iu":
        return arr.astype(np.uint64, copy=False).ravel()
    return np.array([int(a) & 0xFFFFFFFFFFFFFFFF for a in arr.ravel().tolist()], dtype=np.uint64)


def unique_inverse(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(a, return_inverse=True)`` by one sort (numpy 2's hashing unique is slower
    on large integer arrays)."""
    order = np.argsort(a, kind="stable")
    s = a[order]
    first = np.ones(len(s), dtype=bool)
    first[1:] = s[1:] != s[:-1]
    inverse = np.empty(len(a), dtype=np.int64)
    inverse[order] = np.cumsum(first) - 1
    return s[first], inverse


class ModuleSymbols:
    """One ELF file's address layout (its segments) and function symbols (maybe from a
    separate debug file); shared by every process that maps the file."""

    def __init__(self, image: ElfImage, table: SymbolTable | None, source: str) -> None:
        self.image = image
        self.table = table
        self.source = source  # "symtab", "debug-file", "minidebuginfo", "dynsym" or "none"
        self._plt: PltEntries | bool | None = False  # False: not read yet
        self._plt_base = len(table) if table is not None else 0
        self._names: dict[int, str] = {}
        self._cpp: set[int] = set()  # symbols whose names were C++ manglings
        # Symbol objects by the module path a process sees and symbol index: shared by all
        # processes (a Symbol is immutable), so a later batch builds none.
        self.symbols: dict[str, dict[int, Symbol]] = {}
        # The Symbol of each file offset looked up, by module path: the return addresses
        # of a program's stacks are the same offsets in each of its processes (a host
        # starting `sort` a thousand times symbolizes its call sites once)
        self.by_offset: dict[str, dict[int, Symbol]] = {}

    @property
    def plt(self) -> PltEntries | None:
        """PLT stubs, named func@plt as perf does (their indices follow the table's); read
        the first time an address is not in the table (most files never need them)."""
        if self._plt is False:
            try:
                self._plt = plt_entries(self.image)
            except (ElfError, ValueError, IndexError):
                self._plt = None
        return self._plt if isinstance(self._plt, PltEntries) else None

    def lookup(self, offsets: np.ndarray) -> np.ndarray:
        """Symbol index for each file offset, -1 where no symbol covers it."""
        vaddrs, ok = self.image.offsets_to_vaddrs(offsets)
        found = (
            self.table.lookup(vaddrs)
            if self.table is not None
            else np.full(offsets.shape, -1, dtype=np.int64)
        )
        if (found[ok] >= 0).all():
            return np.where(ok, found, -1)
        if self.plt is not None:
            stub = self.plt.lookup(vaddrs)
            found = np.where((found < 0) & (stub >= 0), self._plt_base + stub, found)
        return np.where(ok, found, -1)

    def names(self, indices: list[int], demangle: Demangler) -> list[str]:
        """Demangled names of symbols ``indices``."""
        todo = [i for i in indices if i not in self._names]
        if todo:
            raw = [self._raw_name(i) for i in todo]
            for i, r, name in zip(todo, raw, demangle.many(raw), strict=True):
                from_plt = i >= self._plt_base and isinstance(self._plt, PltEntries)
                self._names[i] = name + "@plt" if from_plt else name
                if name != r:
                    self._cpp.add(i)
        return [self._names[i] for i in indices]

    def _raw_name(self, i: int) -> str:
        if isinstance(self._plt, PltEntries) and i >= self._plt_base:
            return self._plt.names[i - self._plt_base].decode("utf-8", "replace")
        assert self.table is not None
        return self.table.name(i)

    def mangled(self, i: int) -> bool:
        """Whether symbol ``i`` (named by :meth:`names`) had a C++ mangled name."""
        return i in self._cpp


class SymbolResolver:
    """Caches shared by all processes: ELF files, kernel symbols, demangled names."""

    def __init__(
        self,
        debug_dirs: Sequence[str] = debuginfo.DEBUG_DIRS,
        perf_map_dir: str = "/tmp",
        kallsyms_path: str = "/proc/kallsyms",
        proc: str = "/proc",
        max_files: int = 4096,
    ) -> None:
        self.debug_dirs = tuple(debug_dirs)
        self.perf_map_dir = perf_map_dir
        self.kallsyms_path = kallsyms_path
        self.proc = proc
        self.max_files = max_files  # files whose symbols stay cached (a long-lived agent)
        self.demangle = Demangler()
        self.kind_of = KindGuesser()
        self._by_file: dict[tuple[int, int, int, int], ModuleSymbols | None] = {}
        self._by_build_id: dict[bytes, ModuleSymbols] = {}
        # a mapped file as processes see it (their root, its path, device and inode in their
        # maps) -> its symbols: a file mapped by a thousand processes is looked for once
        self._by_mapping: dict[tuple[object, ...], ModuleSymbols | None] = {}
        self._vdso: dict[bytes, ModuleSymbols | None] = {}
        self._kernel: KernelSymbols | None = None
        # (pid, maps text) -> its symbols: a continuous profiler asks again every period
        self._processes: dict[tuple[int, int, int], ProcessSymbols] = {}
        # a long-lived process's symbols outlive a churn of short-lived ones (LRU)
        self.max_processes = 1024

    def process(self, pid: int, maps_text: str | None = None) -> ProcessSymbols:
        """Symbols of process ``pid``, with its mappings from ``maps_text`` (a snapshot of
        ``/proc/PID/maps``) or read now; a process that is gone has no mappings."""
        if maps_text is None:
            try:
                with open(
                    f"{self.proc}/{pid}/maps", encoding="utf-8", errors="surrogateescape"
                ) as f:
                    maps_text = f.read()
            except OSError:
                maps_text = ""
        key = (pid, len(maps_text), hash(maps_text))
        found = self._processes.pop(key, None)
        if found is None:
            found = ProcessSymbols(self, pid, Maps.parse_shared(maps_text))
            if len(self._processes) >= self.max_processes:
                del self._processes[next(iter(self._processes))]  # the least recently used
        self._processes[key] = found  # the most recently used last
        return found

    def forget_processes(self, pids: set[int]) -> None:
        """Drop what is kept of processes that have exited (a long-lived profiler)."""
        if pids:
            self._processes = {k: v for k, v in self._processes.items() if k[0] not in pids}

    def kernel(self) -> KernelSymbols:
        if self._kernel is None:
            self._kernel = KernelSymbols(KernelSymbolTable.read(self.kallsyms_path))
        return self._kernel

    # -- ELF files -------------------------------------------------------------------------

    def module(
        self, path: str, target_path: str = "", roots: Sequence[str] = ("",)
    ) -> ModuleSymbols | None:
        """Symbols of the file at ``path`` (here); ``target_path`` is its path as the target
        process sees it and ``roots`` the prefixes under which to look for its debug file.
        None if it cannot be read as ELF."""
        try:
            st = os.stat(path)
        except OSError:
            return None
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        if key in self._by_file:
            mod = self._by_file.pop(key)  # the most recently used go last: LRU
            self._by_file[key] = mod
            return mod
        try:
            mod = self._load(path, target_path or path, roots)
        # A parser of arbitrary files must never take the collector down: whatever goes
        # wrong, the file's addresses fall back to module+offset.
        except Exception:
            mod = None
        self._by_file[key] = mod
        if len(self._by_file) > self.max_files:
            self._forget(next(iter(self._by_file)))
        return mod

    def _forget(self, key: tuple[int, int, int, int]) -> None:
        """Drop the oldest file read (its mapping goes once no process symbols use it)."""
        mod = self._by_file.pop(key)
        if mod is not None:
            for bid in [b for b, m in self._by_build_id.items() if m is mod]:
                del self._by_build_id[bid]
            self._by_mapping = {k: m for k, m in self._by_mapping.items() if m is not mod}

    def mapped_module(self, key: tuple[object, ...], find) -> ModuleSymbols | None:  # type: ignore[no-untyped-def]
        """The symbols of a mapped file by what the maps say of it (``key``), found with
        ``find()`` the first time."""
        if key in self._by_mapping:
            return self._by_mapping[key]
        mod = find()
        if mod is None:
            return None  # (maybe the process was gone: the next one may do better)
        if len(self._by_mapping) >= 8 * self.max_files:
            self._by_mapping.clear()  # a bound, whatever the host maps
        self._by_mapping[key] = mod
        return mod

    def _load(self, path: str, target_path: str, roots: Sequence[str]) -> ModuleSymbols | None:
        try:
            image, _ = open_image(path)
        except (OSError, ElfError, ValueError):
            return None
        build_id = image.build_id()
        if build_id and build_id in self._by_build_id:
            return self._by_build_id[build_id]
        mod = self._symbols_of(image, target_path, roots)
        if build_id:
            self._by_build_id[build_id] = mod
        return mod

    def _symbols_of(self, image: ElfImage, target_path: str, roots: Sequence[str]) -> ModuleSymbols:
        table = function_symbols(image, SHT_SYMTAB)
        if table is not None:
            return ModuleSymbols(image, table, "symtab")
        debug = debuginfo.find_debug_image(image, target_path, roots, self.debug_dirs)
        if debug is not None:
            table = function_symbols(debug, SHT_SYMTAB)
            if table is not None:
                return ModuleSymbols(image, table, "debug-file")
        mini = debuginfo.mini_debuginfo(image)
        if mini is not None:
            table = function_symbols(mini, SHT_SYMTAB)
            if table is not None:
                return ModuleSymbols(image, table, "minidebuginfo")
        table = function_symbols(image, SHT_DYNSYM)
        return ModuleSymbols(image, table, "dynsym" if table is not None else "none")

    def vdso(self, pid: int, mapping: Mapping) -> ModuleSymbols | None:
        """The vDSO, read from the target's memory (else from this process: same kernel)."""
        data = _read_memory(f"{self.proc}/{pid}/mem", mapping.start, mapping.end - mapping.start)
        if data is None:
            data = _own_vdso(self.proc)
        if data is None:
            return None
        if data not in self._vdso:
            try:
                image = ElfImage(data, VDSO)
                self._vdso[data] = ModuleSymbols(
                    image, function_symbols(image, SHT_DYNSYM), "dynsym"
                )
            except Exception:
                self._vdso[data] = None
        return self._vdso[data]

    def runtime_module(self, module: str) -> bool:
        return bool(_RUNTIME_LIB.match(os.path.basename(module)))


def _read_memory(mem_path: str, start: int, size: int) -> bytes | None:
    try:
        with open(mem_path, "rb", buffering=0) as f:
            f.seek(start)
            data = f.read(size)
    except (OSError, OverflowError, ValueError):
        return None
    return data if len(data) == size else None


def _own_vdso(proc: str) -> bytes | None:
    try:
        with open(f"{proc}/self/maps", encoding="utf-8") as f:
            for m in Maps.parse(f.read()).mappings:
                if m.path == VDSO:
                    return _read_memory(f"{proc}/self/mem", m.start, m.end - m.start)
    except OSError:
        pass
    return None


class ProcessSymbols:
    """Address -> :class:`Symbol` for one process; see the module docstring."""

    def __init__(self, resolver: SymbolResolver, pid: int, maps: Maps) -> None:
        self.resolver = resolver
        self.pid = pid
        self.maps = maps
        self.root = f"{resolver.proc}/{pid}/root"
        self._root_id: tuple[int, int] | None = None
        self._modules: dict[int, ModuleSymbols | None] = {}
        self._perf_map: PerfMap | None = None
        self._perf_map_state: tuple[str, int, int] | None = None

    def symbolize(self, addrs: Sequence[int] | np.ndarray) -> list[Symbol]:
        """One :class:`Symbol` per address, in order."""
        arr = _as_addresses(addrs)
        if not len(arr):
            return []
        uniq, inverse = unique_inverse(arr)
        found: list[Symbol] = [UNKNOWN] * len(uniq)
        which = self.maps.find(uniq)
        order = np.argsort(which, kind="stable")
        groups, first = np.unique(which[order], return_index=True)
        bounds = [*first.tolist(), len(order)]
        for g, m in enumerate(groups.tolist()):
            sel = order[bounds[g] : bounds[g + 1]]
            try:
                self._resolve_group(m, uniq[sel], sel, found)
            except Exception:
                continue
        return [found[i] for i in inverse.ravel().tolist()]

    def _resolve_group(
        self, m: int, addrs: np.ndarray, slots: np.ndarray, found: list[Symbol]
    ) -> None:
        if m < 0:
            self._name_jit(addrs, slots, found)
            return
        mapping = self.maps[m]
        mod = self._module(m, mapping)
        offsets = addrs - np.uint64(mapping.start) + np.uint64(mapping.offset)
        if mod is None:
            # Anonymous memory, or a file not readable as ELF (memfd JIT code, a vanished
            # file): module+offset, unless a perf map names the code.
            self._fallback(mapping, addrs, offsets, slots, found)
            self._name_jit(addrs, slots, found)
            return
        module = mapping.path
        memo = mod.by_offset.get(module)
        if memo is None or len(memo) >= MAX_OFFSETS_REMEMBERED:
            memo = mod.by_offset[module] = {}
        offset_list = offsets.tolist()
        if all(o in memo for o in offset_list):
            for slot, o in zip(slots.tolist(), offset_list, strict=True):
                found[slot] = memo[o]
            return
        self._resolve_offsets(mod, mapping, addrs, offsets, slots, found)
        for slot, o in zip(slots.tolist(), offset_list, strict=True):
            memo[o] = found[slot]

    def _resolve_offsets(
        self,
        mod: ModuleSymbols,
        mapping: Mapping,
        addrs: np.ndarray,
        offsets: np.ndarray,
        slots: np.ndarray,
        found: list[Symbol],
    ) -> None:
        idx = mod.lookup(offsets)
        module = mapping.path
        runtime = self.resolver.runtime_module(module)
        hit = idx >= 0
        if hit.any():
            uniq, pos = unique_inverse(idx[hit])
            syms = self._symbol_objects(mod, module, uniq.tolist(), runtime)
            for slot, p in zip(slots[hit].tolist(), pos.tolist(), strict=True):
                found[slot] = syms[p]
            # A name outside a damaged string table reads as "": module+offset instead.
            nameless = np.array([not s.name for s in syms], dtype=bool)[pos]
            if nameless.any():
                hit[np.nonzero(hit)[0][nameless]] = False
        miss = ~hit
        for slot, off, addr in zip(
            slots[miss].tolist(), offsets[miss].tolist(), addrs[miss].tolist(), strict=True
        ):
            found[slot] = self._fallback_one(mapping, addr, off, runtime)

    def _symbol_objects(
        self, mod: ModuleSymbols, module: str, indices: list[int], runtime: bool
    ) -> list[Symbol]:
        cache = mod.symbols.setdefault(module, {})
        out = [cache.get(i) for i in indices]
        todo = [i for i, sym in zip(indices, out, strict=True) if sym is None]
        if not todo:
            return out  # type: ignore[return-value]
        for i, name in zip(todo, mod.names(todo, self.resolver.demangle), strict=True):
            cache[i] = Symbol(name, module, self._kind(name, mod, i, runtime))
        return [cache[i] for i in indices]

    def _kind(self, name: str, mod: ModuleSymbols, i: int, runtime: bool) -> FrameKind:
        if runtime:
            return FrameKind.RUNTIME
        # A name that demangled is C++; the name rules (slow on long template names) are
        # for the rest: C, Python's C API, JIT stubs.
        if mod.mangled(i):
            return FrameKind.CPP
        return self.resolver.kind_of(name)

    def _module(self, m: int, mapping: Mapping) -> ModuleSymbols | None:
        if m in self._modules:
            return self._modules[m]
        mod = None
        if mapping.path == VDSO:
            mod = self.resolver.vdso(self.pid, mapping)
        elif mapping.is_file and not mapping.deleted:
            # (a process that has ended, root None, is resolved through the host's paths:
            # alike for every such process)
            key = (self._root(), mapping.path, mapping.dev, mapping.inode)
            mod = self.resolver.mapped_module(key, lambda: self._file_module(mapping))
        elif mapping.is_file:
            mod = self._file_module(mapping)
        self._modules[m] = mod
        return mod

    def _root(self) -> tuple[int, int] | None:
        """The identity of the process's root directory (containers differ), None when
        it cannot be seen (gone, or not ours to look into)."""
        if self._root_id is None:
            try:
                st = os.stat(self.root)
            except OSError:
                return None
            self._root_id = (st.st_dev, st.st_ino)
        return self._root_id

    def _file_module(self, mapping: Mapping) -> ModuleSymbols | None:
        """Open the mapped file as the process sees it.

        The path through ``/proc/PID/root`` is the container's own file; it is trusted when its
        inode is the mapped one. ``map_files`` is the mapped file itself, even if deleted or
        replaced since. Last, the host's path, and (overlayfs reports other inode numbers in
        maps than stat does) any path that exists, unless the mapping is marked deleted.
        """
        rooted = self.root + mapping.path
        mapped = f"{self.resolver.proc}/{self.pid}/map_files/{mapping.start:x}-{mapping.end:x}"
        roots = (self.root, "") if os.path.isdir(self.root) else ("",)
        plain = [] if mapping.deleted else [rooted, mapping.path]
        for path in plain[:1]:
            if _inode(path) == mapping.inode:
                return self.resolver.module(path, mapping.path, roots)
        if _inode(mapped) is not None:
            return self.resolver.module(mapped, mapping.path, roots)
        for path in plain[1:]:
            if _inode(path) == mapping.inode:
                return self.resolver.module(path, mapping.path, roots)
        for path in plain:
            if _inode(path) is not None:
                return self.resolver.module(path, mapping.path, roots)
        return None

    def _fallback_one(self, mapping: Mapping, addr: int, offset: int, runtime: bool) -> Symbol:
        if mapping.is_file:
            name = f"{os.path.basename(mapping.path)}+0x{offset:x}"
            kind = FrameKind.RUNTIME if runtime else FrameKind.NATIVE
            return Symbol(name, mapping.path, kind)
        label = mapping.path or "[anon]"
        return Symbol(f"{label}+0x{addr - mapping.start:x}", mapping.path, FrameKind.NATIVE)

    def _fallback(
        self,
        mapping: Mapping,
        addrs: np.ndarray,
        offsets: np.ndarray,
        slots: np.ndarray,
        found: list[Symbol],
    ) -> None:
        runtime = mapping.is_file and self.resolver.runtime_module(mapping.path)
        for slot, off, addr in zip(slots.tolist(), offsets.tolist(), addrs.tolist(), strict=True):
            found[slot] = self._fallback_one(mapping, addr, off, runtime)

    # -- JIT code ----------------------------------------------------------------------------

    def _name_jit(self, addrs: np.ndarray, slots: np.ndarray, found: list[Symbol]) -> None:
        """Name addresses that a perf map covers (JIT code lives in anonymous memory)."""
        pm, path = self._perf_map_now()
        if not pm:
            return
        for slot, addr in zip(slots.tolist(), addrs.tolist(), strict=True):
            jit = pm.lookup(addr)
            if jit is not None:
                found[slot] = Symbol(clean_name(jit.name), path, jit.kind)

    def _perf_map_now(self) -> tuple[PerfMap | None, str]:
        """The process's perf map, read again whenever the runtime has written to it."""
        for here, theirs in self._perf_map_paths():
            try:
                st = os.stat(here)
            except OSError:
                continue
            state = (here, st.st_size, st.st_mtime_ns)
            if state != self._perf_map_state:
                self._perf_map = PerfMap.read(here)
                self._perf_map_state = state
            return self._perf_map, theirs
        return None, ""

    def _namespace_pid(self) -> int | None:
        """The process's pid in its own pid namespace: its pid here when that namespace is
        ours (one link read instead of its status file: most processes of a host)."""
        proc = self.resolver.proc
        mine = _own_pid_namespace(proc)
        if mine is not None and _pid_namespace(f"{proc}/{self.pid}") == mine:
            return self.pid
        return _namespace_pid(f"{proc}/{self.pid}/status")

    def _perf_map_paths(self) -> list[tuple[str, str]]:
        """``(path here, path as the target sees it)``: inside the target's root with its own
        (namespaced) pid first, then the host's ``/tmp/perf-PID.map``."""
        out = []
        nspid = self._namespace_pid()
        if nspid is not None:
            theirs = os.path.join("/tmp", f"perf-{nspid}.map")
            out.append((self.root + theirs, theirs))
        mine = os.path.join(self.resolver.perf_map_dir, f"perf-{self.pid}.map")
        out.append((mine, mine))
        return out


def _pid_namespace(proc_dir: str) -> str | None:
    try:
        return os.readlink(f"{proc_dir}/ns/pid")
    except OSError:
        return None


@functools.cache
def _own_pid_namespace(proc: str) -> str | None:
    return _pid_namespace(f"{proc}/self")  # (a process keeps its pid namespace)


def _inode(path: str) -> int | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino if st.st_mode & 0o170000 == 0o100000 else None


def _namespace_pid(status_path: str) -> int | None:
    try:
        with open(status_path, encoding="utf-8") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError, IndexError):
        pass
    return None


class KernelSymbols:
    """Kernel addresses -> :class:`Symbol` (``module`` ``[kernel]``, kind KERNEL)."""

    def __init__(self, table: KernelSymbolTable) -> None:
        self.table = table
        self._symbols: dict[int, Symbol] = {}
        self._unknown = Symbol(UNKNOWN_NAME, KERNEL_MODULE, FrameKind.KERNEL)

    def symbolize(self, addrs: Sequence[int] | np.ndarray) -> list[Symbol]:
        arr = _as_addresses(addrs)
        if not len(arr):
            return []
        uniq, inverse = unique_inverse(arr)
        out = []
        for i in self.table.lookup(uniq).tolist():
            if i < 0:
                out.append(self._unknown)
                continue
            sym = self._symbols.get(i)
            if sym is None:
                sym = self._symbols[i] = Symbol(self.table.name(i), KERNEL_MODULE, FrameKind.KERNEL)
            out.append(sym)
        return [out[i] for i in inverse.ravel().tolist()]
