"""ELF files read with numpy: headers, loadable segments, notes and function symbols.

Libraries such as ``libtorch_cpu.so`` hold half a million symbols and a 76 MB string table,
so nothing here walks symbols one by one in Python: the symbol table is viewed as a
structured numpy array straight from a read-only ``mmap``, filtered and sorted with array
operations, and looked up with ``np.searchsorted``. Names are decoded only for the symbols
that addresses actually hit. (pyelftools parses each symbol in Python, about 100x slower on
such tables; see docs/benchmarks.md, "Symbolization".)

Both ELF classes and byte orders are read. Anything malformed raises :class:`ElfError`.
"""

from __future__ import annotations

import mmap
import os
import stat
import weakref
from dataclasses import dataclass

import numpy as np

MAGIC = b"\x7fELF"
ET_EXEC, ET_DYN = 2, 3
PT_LOAD, PT_NOTE = 1, 4
SHT_SYMTAB, SHT_NOTE, SHT_DYNSYM = 2, 7, 11
SHF_EXECINSTR = 0x4
STT_NOTYPE, STT_FUNC, STT_GNU_IFUNC = 0, 2, 10
STB_LOCAL, STB_WEAK = 0, 2
STV_HIDDEN = 2
SHN_UNDEF, SHN_LORESERVE, SHN_XINDEX = 0, 0xFF00, 0xFFFF
NT_GNU_BUILD_ID = 3


class ElfError(Exception):
    """Not an ELF file, or one whose headers point outside it."""


def _dtypes(is64: bool, order: str) -> dict[str, np.dtype]:
    """Header, section, segment and symbol records of one ELF class and byte order."""
    a = f"{order}u8" if is64 else f"{order}u4"  # addresses and offsets
    h, w = f"{order}u2", f"{order}u4"
    ehdr = [("type", h), ("machine", h), ("version", w), ("entry", a), ("phoff", a)]
    ehdr += [("shoff", a), ("flags", w), ("ehsize", h), ("phentsize", h), ("phnum", h)]
    ehdr += [("shentsize", h), ("shnum", h), ("shstrndx", h)]
    shdr = [("name", w), ("type", w), ("flags", a), ("addr", a), ("offset", a), ("size", a)]
    shdr += [("link", w), ("info", w), ("addralign", a), ("entsize", a)]
    if is64:
        phdr = [("type", w), ("flags", w), ("offset", a), ("vaddr", a), ("paddr", a)]
        phdr += [("filesz", a), ("memsz", a), ("align", a)]
        sym = [("name", w), ("info", "u1"), ("other", "u1"), ("shndx", h)]
        sym += [("value", a), ("size", a)]
    else:
        phdr = [("type", w), ("offset", a), ("vaddr", a), ("paddr", a), ("filesz", a)]
        phdr += [("memsz", a), ("flags", w), ("align", a)]
        sym = [("name", w), ("value", a), ("size", a), ("info", "u1"), ("other", "u1")]
        sym += [("shndx", h)]
    return {
        k: np.dtype(v) for k, v in (("ehdr", ehdr), ("shdr", shdr), ("phdr", phdr), ("sym", sym))
    }


@dataclass(frozen=True, slots=True)
class Segment:
    offset: int
    vaddr: int
    filesz: int
    memsz: int
    flags: int


class ElfImage:
    """The headers of one ELF file held in ``data`` (an ``mmap`` or ``bytes``)."""

    def __init__(self, data: bytes | mmap.mmap, name: str = "") -> None:
        self.data = data
        self.name = name
        if len(data) < 52 or data[:4] != MAGIC:
            raise ElfError("not an ELF file")
        cls, enc = data[4], data[5]
        if cls not in (1, 2) or enc not in (1, 2):
            raise ElfError("unknown ELF class or byte order")
        self.is64 = cls == 2
        self.dt = _dtypes(self.is64, "<" if enc == 1 else ">")
        eh = self._records("ehdr", 16, 1)[0]
        self.type = int(eh["type"])
        self.machine = int(eh["machine"])
        self.sections = self._section_headers(eh)
        self.segments = self._load_segments(eh)
        self._seg_off = np.array([g.offset for g in self.segments], dtype=np.uint64)
        self._seg_end = np.array([g.offset + g.filesz for g in self.segments], dtype=np.uint64)
        self._seg_va = np.array([g.vaddr for g in self.segments], dtype=np.uint64)
        self._section_names: list[str] | None = None
        self._shstrndx = int(eh["shstrndx"])
        if self._shstrndx == SHN_XINDEX and len(self.sections):
            self._shstrndx = int(self.sections[0]["link"])

    # -- raw access ------------------------------------------------------------------------

    def _records(self, kind: str, offset: int, count: int) -> np.ndarray:
        dt = self.dt[kind]
        if offset < 0 or count < 0 or offset + count * dt.itemsize > len(self.data):
            raise ElfError(f"{kind} table outside the file")
        return np.frombuffer(self.data, dtype=dt, count=count, offset=offset)

    def _section_headers(self, eh: np.void) -> np.ndarray:
        shoff, shnum = int(eh["shoff"]), int(eh["shnum"])
        if shoff == 0:
            return np.zeros(0, dtype=self.dt["shdr"])
        if int(eh["shentsize"]) != self.dt["shdr"].itemsize:
            raise ElfError("unexpected section header size")
        if shnum == 0:  # more than 0xff00 sections: the count is in section 0
            shnum = int(self._records("shdr", shoff, 1)[0]["size"])
        return self._records("shdr", shoff, shnum)

    def _load_segments(self, eh: np.void) -> list[Segment]:
        phoff, phnum = int(eh["phoff"]), int(eh["phnum"])
        if phoff == 0 or phnum == 0:
            return []
        if int(eh["phentsize"]) != self.dt["phdr"].itemsize:
            raise ElfError("unexpected program header size")
        if phnum == 0xFFFF and len(self.sections):
            phnum = int(self.sections[0]["info"])
        ph = self._records("phdr", phoff, phnum)
        loads = ph[ph["type"] == PT_LOAD]
        segs = [
            Segment(
                int(p["offset"]),
                int(p["vaddr"]),
                int(p["filesz"]),
                int(p["memsz"]),
                int(p["flags"]),
            )
            for p in loads
        ]
        return sorted(segs, key=lambda s: s.offset)

    def section_bytes(self, index: int) -> bytes:
        sh = self.sections[index]
        off, size = int(sh["offset"]), int(sh["size"])
        if off + size > len(self.data):
            raise ElfError("section outside the file")
        return bytes(self.data[off : off + size])

    # -- sections by name and type -----------------------------------------------------------

    @property
    def section_names(self) -> list[str]:
        if self._section_names is None:
            names: list[str] = []
            if 0 < self._shstrndx < len(self.sections):
                table = self.section_bytes(self._shstrndx)
                for off in self.sections["name"].tolist():
                    end = table.find(b"\0", off)
                    names.append(table[off : end if end >= 0 else None].decode("latin-1"))
            else:
                names = [""] * len(self.sections)
            self._section_names = names
        return self._section_names

    def section_index(self, name: str) -> int | None:
        try:
            return self.section_names.index(name)
        except ValueError:
            return None

    def sections_of_type(self, sh_type: int) -> list[int]:
        return np.nonzero(self.sections["type"] == sh_type)[0].tolist()

    # -- notes: build-id ---------------------------------------------------------------------

    def build_id(self) -> bytes | None:
        """The GNU build-id, from note sections (or note segments when sections are gone)."""
        for off, size, align in self._note_areas():
            found = self._scan_notes(off, size, align)
            if found is not None:
                return found
        return None

    def _note_areas(self) -> list[tuple[int, int, int]]:
        areas = [
            (int(s["offset"]), int(s["size"]), int(s["addralign"]))
            for s in self.sections[self.sections["type"] == SHT_NOTE]
        ]
        if not areas and self.dt["phdr"].itemsize:
            try:
                eh = self._records("ehdr", 16, 1)[0]
                ph = self._records("phdr", int(eh["phoff"]), int(eh["phnum"]))
                areas = [
                    (int(p["offset"]), int(p["filesz"]), int(p["align"]))
                    for p in ph[ph["type"] == PT_NOTE]
                ]
            except ElfError:
                pass
        return areas

    def _scan_notes(self, off: int, size: int, align: int) -> bytes | None:
        align = 8 if align == 8 else 4
        end = min(off + size, len(self.data))
        order = "<" if self.data[5] == 1 else ">"
        head = np.dtype(f"{order}u4")
        while off + 12 <= end:
            namesz, descsz, ntype = np.frombuffer(
                self.data, dtype=head, count=3, offset=off
            ).tolist()
            name_at = off + 12
            desc_at = name_at + -(-namesz // align) * align
            nxt = desc_at + -(-descsz // align) * align
            if nxt > end or nxt <= off:
                return None
            if (
                ntype == NT_GNU_BUILD_ID
                and bytes(self.data[name_at : name_at + namesz]) == b"GNU\0"
            ):
                return bytes(self.data[desc_at : desc_at + descsz]) or None
            off = nxt
        return None

    def debuglink(self) -> tuple[str, int] | None:
        """``(file name, CRC-32)`` from ``.gnu_debuglink``, naming a separate debug file."""
        i = self.section_index(".gnu_debuglink")
        if i is None:
            return None
        raw = self.section_bytes(i)
        end = raw.find(b"\0")
        if end <= 0:
            return None
        crc_at = -(-(end + 1) // 4) * 4
        if crc_at + 4 > len(raw):
            return None
        crc = int(
            np.frombuffer(
                raw, dtype=f"{'<' if self.data[5] == 1 else '>'}u4", count=1, offset=crc_at
            )[0]
        )
        return raw[:end].decode("utf-8", "replace"), crc

    # -- addresses ---------------------------------------------------------------------------

    def offsets_to_vaddrs(self, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Virtual addresses of file ``offsets`` through the PT_LOAD segments, and a mask of
        the offsets that some segment maps."""
        offsets = np.asarray(offsets, dtype=np.uint64)
        if not self.segments:
            return offsets.copy(), np.zeros(offsets.shape, dtype=bool)
        seg_off, seg_end, seg_va = self._seg_off, self._seg_end, self._seg_va
        i = np.searchsorted(seg_off, offsets, side="right").astype(np.int64) - 1
        ok = i >= 0
        j = np.where(ok, i, 0)
        ok &= offsets < seg_end[j]
        return offsets - seg_off[j] + seg_va[j], ok


class SymbolTable:
    """Function symbols of one symbol table, sorted by address, each with an end address.

    Zero-size symbols (hand-written assembly, some vendor libraries) reach to the next symbol
    or to the end of their section. Where several symbols start at the same address, the one
    addr2line would name wins: a function over an untyped label, then the smaller, then, as
    perf has it, a strong symbol over a weak alias (libc's ``labs``, not ``imaxabs``), then
    the earlier in the table.
    """

    def __init__(self, image: ElfImage, section: int) -> None:
        sh = image.sections[section]
        dt = image.dt["sym"]
        count = int(sh["size"]) // dt.itemsize
        raw = image._records("sym", int(sh["offset"]), count)
        link = int(sh["link"])
        if not 0 < link < len(image.sections):
            raise ElfError("symbol table without a string table")
        strsec = image.sections[link]
        self._strtab_off, self._strtab_end = (
            int(strsec["offset"]),
            int(strsec["offset"] + strsec["size"]),
        )
        if self._strtab_end > len(image.data):
            raise ElfError("string table outside the file")
        self._data = image.data

        info = raw["info"]
        typ = info & 0xF
        shndx = raw["shndx"].astype(np.int64)
        value = raw["value"].astype(np.uint64)
        defined = (shndx != SHN_UNDEF) & (value != 0)
        nsec = len(image.sections)
        in_section = defined & (shndx < min(nsec, SHN_LORESERVE))
        sec_flags = image.sections["flags"].astype(np.uint64)
        exec_sec = np.zeros(shndx.shape, dtype=bool)
        exec_sec[in_section] = (sec_flags[shndx[in_section]] & SHF_EXECINSTR) != 0
        func = defined & ((typ == STT_FUNC) | (typ == STT_GNU_IFUNC))
        # Untyped symbols count only in code, and not annobin's hidden local markers.
        size = raw["size"].astype(np.uint64)
        annobin = (size == 0) & ((info >> 4) == STB_LOCAL) & ((raw["other"] & 3) == STV_HIDDEN)
        notype = exec_sec & (typ == STT_NOTYPE) & ~annobin
        idx = np.nonzero(func | notype)[0]
        name_off = raw["name"][idx].astype(np.uint32)
        if notype.any():  # ARM/AArch64 mapping symbols ($x, $d) mark code vs data, not functions
            keep = np.ones(idx.shape, dtype=bool)
            for k in np.nonzero(notype[idx])[0].tolist():
                keep[k] = self._raw_name(int(name_off[k]))[:1] != b"$"
            idx, name_off = idx[keep], name_off[keep]

        start = value[idx]
        size = size[idx]
        is_func = func[idx]
        strong = (info[idx] >> 4) != STB_WEAK
        sec = shndx[idx]
        order = _alias_order(start, size, is_func, strong, idx)
        self.start = start[order]
        size, sec, is_func = size[order], sec[order], is_func[order]
        self.name_off = name_off[order]
        self.symbol_index = idx[order]
        self.end = self._ends(image, self.start, size, sec)
        # Symbols nested in a longer one: an address past the inner symbol's end may still be
        # inside the outer one. The running maximum of ends (and who reaches it) finds it.
        self._reach = np.maximum.accumulate(self.end) if len(self.end) else self.end
        who = np.where(self.end == self._reach, np.arange(len(self.end)), 0)
        self._reacher = np.maximum.accumulate(who) if len(who) else who

    @staticmethod
    def _ends(image: ElfImage, start: np.ndarray, size: np.ndarray, sec: np.ndarray) -> np.ndarray:
        end = start + size
        zero = size == 0
        if zero.any():
            # ``start`` is sorted: its distinct values without np.unique's hashing.
            uniq = start[np.concatenate(([True], start[1:] != start[:-1]))]
            pos = np.searchsorted(uniq, start[zero], side="right")
            nxt = np.where(pos < len(uniq), uniq[np.minimum(pos, len(uniq) - 1)], np.uint64(0))
            known = (sec[zero] >= 0) & (sec[zero] < min(len(image.sections), SHN_LORESERVE))
            secs = image.sections
            sec_end = np.zeros(nxt.shape, dtype=np.uint64)
            si = sec[zero][known]
            sec_end[known] = secs["addr"][si].astype(np.uint64) + secs["size"][si].astype(np.uint64)
            last = pos >= len(uniq)
            nxt = np.where(last, sec_end, nxt)
            capped = np.where(known & ~last, np.minimum(nxt, sec_end), nxt)
            # A label at the very end of its section (or with no section) still covers itself.
            end[zero] = np.maximum(capped, start[zero] + np.uint64(1))
        return end

    def __len__(self) -> int:
        return len(self.start)

    def lookup(self, vaddrs: np.ndarray) -> np.ndarray:
        """Index (into this table) of the symbol covering each address, -1 where none does."""
        vaddrs = np.asarray(vaddrs, dtype=np.uint64)
        if not len(self.start):
            return np.full(vaddrs.shape, -1, dtype=np.int64)
        i = np.searchsorted(self.start, vaddrs, side="right").astype(np.int64) - 1
        j = np.maximum(i, 0)
        hit = (i >= 0) & (vaddrs < self.end[j])
        outer = (i >= 0) & ~hit & (vaddrs < self._reach[j])
        return np.where(hit, j, np.where(outer, self._reacher[j], -1))

    def _raw_name(self, off: int) -> bytes:
        return c_string(self._data, self._strtab_off + off, self._strtab_end)

    def name(self, i: int) -> str:
        """The symbol's name as stored (mangled)."""
        return self._raw_name(int(self.name_off[i])).decode("utf-8", "replace")


def c_string(data: bytes | mmap.mmap, at: int, limit: int) -> bytes:
    """The NUL-terminated string at ``at`` of a string table that ends at ``limit``."""
    if at >= limit:
        return b""
    end = data.find(b"\0", at, limit)
    return bytes(data[at : end if end >= 0 else limit])


def _alias_order(
    start: np.ndarray, size: np.ndarray, is_func: np.ndarray, strong: np.ndarray, idx: np.ndarray
) -> np.ndarray:
    """Sort by address; among symbols at one address the preferred one last (see
    :class:`SymbolTable`). A full lexsort of 400k symbols is slow, so only the runs of
    aliases (a fifth of libtorch's symbols) are sorted on all keys."""
    order = np.argsort(start, kind="stable")  # table order within an address
    s = start[order]
    dup = np.zeros(len(s), dtype=bool)
    if len(s) > 1:
        same = s[1:] == s[:-1]
        dup[1:] |= same
        dup[:-1] |= same
    pos = np.nonzero(dup)[0]
    if len(pos):
        o = order[pos]
        smaller = -(np.maximum(size[o], 1).astype(np.int64))
        keys = (-idx[o], strong[o], smaller, is_func[o], start[o])
        order[pos] = o[np.lexsort(keys)]
    return order


def function_symbols(image: ElfImage, kind: int = SHT_SYMTAB) -> SymbolTable | None:
    """The table of ``.symtab`` (``kind=SHT_SYMTAB``) or ``.dynsym``; None if absent or empty."""
    for i in image.sections_of_type(kind):
        table = SymbolTable(image, i)
        if len(table):
            return table
    return None


def open_image(path: str) -> tuple[ElfImage, os.stat_result]:
    """Map a regular file read-only and read its ELF headers.

    Only regular files are opened: a mapping of ``/dev/nvidia0`` must never be opened here.
    """
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise ElfError("not a regular file")
    if st.st_size < 52:
        raise ElfError("too short for an ELF header")
    with open(path, "rb") as f:
        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    _MAPPED.add(data)
    return ElfImage(data, path), st


# Every file mapped by open_image that is still referenced (by cached symbol tables).
_MAPPED: weakref.WeakSet[mmap.mmap] = weakref.WeakSet()


def release_mapped_pages() -> int:
    """Drop the pages of mapped ELF files from this process's resident set; returns how many
    mappings were released.

    Symbol names are read from the mapped files when asked for, so the pages touched stay
    resident (for a PyTorch process, ~100 MB of libtorch's string tables) although the
    kernel can read them back from its page cache at once. A long-running profiler calls
    this between its periods: its memory is then what it holds, not what it once read."""
    released = 0
    for data in list(_MAPPED):
        try:
            data.madvise(mmap.MADV_DONTNEED)
            released += 1
        except (ValueError, OSError):  # closed meanwhile
            pass
    return released


EM_X86_64 = 62
PLT_ENTRY = 16  # bytes per PLT entry on x86-64, in .plt (after its header) and in .plt.sec
_RELA64 = np.dtype([("offset", "<u8"), ("info", "<u8"), ("addend", "<i8")])


@dataclass(frozen=True)
class PltEntries:
    """The PLT stubs of an x86-64 ELF file: calls to other files' functions go through
    them, and perf names them ``func@plt``. Entry ``i`` jumps through relocation ``i`` of
    ``.rela.plt``, whose symbol (in ``.dynsym``) is the function called."""

    start: np.ndarray  # virtual addresses, sorted
    names: list[bytes]  # the called function's name as stored (maybe mangled)

    def lookup(self, vaddrs: np.ndarray) -> np.ndarray:
        """Entry index covering each address, -1 where none does."""
        i = np.searchsorted(self.start, vaddrs, side="right").astype(np.int64) - 1
        j = np.maximum(i, 0)
        hit = (i >= 0) & (vaddrs < self.start[j] + np.uint64(PLT_ENTRY))
        return np.where(hit, j, -1)


def plt_entries(image: ElfImage) -> PltEntries | None:
    """The PLT stubs of ``image`` (little-endian x86-64 only), or None."""
    if image.machine != EM_X86_64 or not image.is64 or image.dt["sym"].str.startswith(">"):
        return None
    rela_i = image.section_index(".rela.plt")
    plt_i = image.section_index(".plt.sec")  # with IBT the stubs called are in .plt.sec
    first = 0
    if plt_i is None:
        plt_i, first = image.section_index(".plt"), PLT_ENTRY  # after the header entry
    if rela_i is None or plt_i is None:
        return None
    rela = image.sections[rela_i]
    count = int(rela["size"]) // _RELA64.itemsize
    dynsym_i = int(rela["link"])
    if not count or not 0 < dynsym_i < len(image.sections):
        return None
    plt = image.sections[plt_i]
    count = min(count, max(0, (int(plt["size"]) - first) // PLT_ENTRY))
    offset = int(rela["offset"])
    if offset + count * _RELA64.itemsize > len(image.data):
        return None
    relocs = np.frombuffer(image.data, dtype=_RELA64, count=count, offset=offset)
    strsec = image.sections[int(image.sections[dynsym_i]["link"])]
    str_off = int(strsec["offset"])
    str_end = min(str_off + int(strsec["size"]), len(image.data))
    dyn = image.sections[dynsym_i]
    nsym = int(dyn["size"]) // image.dt["sym"].itemsize
    syms = image._records("sym", int(dyn["offset"]), nsym)
    names, starts = [], []
    base = int(plt["addr"]) + first
    for i, info in enumerate(relocs["info"].tolist()):
        sym = info >> 32
        if 0 < sym < nsym:  # IRELATIVE and other symbol-less slots stay unnamed
            names.append(c_string(image.data, str_off + int(syms["name"][sym]), str_end))
            starts.append(base + i * PLT_ENTRY)
    if not starts:
        return None
    return PltEntries(np.asarray(starts, dtype=np.uint64), names)
