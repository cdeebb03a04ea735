"""ELF symbol tables read with numpy, against ``nm`` on programs gcc builds now; maps,
kallsyms parsing and the demangler."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import native_programs as progs
import numpy as np
import pytest

import systools
from aiflame.symbolize.cxa import Demangler
from aiflame.symbolize.elf import (
    SHT_DYNSYM,
    ElfError,
    ElfImage,
    _alias_order,
    function_symbols,
    open_image,
)
from aiflame.symbolize.kallsyms import MAX_SPAN, KernelSymbolTable
from aiflame.symbolize.maps import Maps, parse_line

pytestmark = pytest.mark.tools("gcc", "nm", "readelf", "objcopy", "strip")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> progs.Built:
    return progs.build(tmp_path_factory.mktemp("elf"))


def names_at(table, vaddr: int) -> str | None:
    i = int(table.lookup(np.array([vaddr], dtype=np.uint64))[0])
    return None if i < 0 else table.name(i)


@pytest.mark.parametrize("which", ["pie", "nopie", "lib"])
def test_every_sized_function_of_nm_resolves_at_its_first_and_last_byte(built, which):
    path = getattr(built, which)
    image, _ = open_image(str(path))
    table = function_symbols(image)
    nm = progs.nm_functions(path)
    sized = {n: (v, s) for n, (v, s) in nm.items() if s > 0 and n != "outer_fn"}
    assert len(sized) >= 3
    for name, (value, size) in sized.items():
        assert names_at(table, value) == name, name
        assert names_at(table, value + size - 1) == name, name
    # one past the end of the last function of .text is no function
    last = max(v + s for v, s in sized.values())
    if all(not (v <= last < v + max(s, 1)) for v, s in nm.values()):
        assert names_at(table, last) is None


def test_zero_size_and_untyped_symbols_reach_the_next_symbol(built):
    image, _ = open_image(str(built.pie))
    table = function_symbols(image)
    nm = progs.nm_functions(built.pie)
    (nosize, zero), (label, _) = nm["asm_nosize"], nm["notype_label"]
    assert zero == 0
    assert label == nosize + 5  # four nops and a ret, from the program's assembly
    assert names_at(table, nosize) == "asm_nosize"
    assert names_at(table, nosize + 4) == "asm_nosize"
    assert names_at(table, label) == "notype_label"
    assert names_at(table, label + 4) == "notype_label"
    assert names_at(table, nm["outer_fn"][0]) == "outer_fn"


def test_a_function_nested_in_a_longer_one(built):
    image, _ = open_image(str(built.pie))
    table = function_symbols(image)
    nm = progs.nm_functions(built.pie)
    outer, outer_size = nm["outer_fn"]
    inner, inner_size = nm["inner_fn"]
    assert (inner - outer, inner_size) == (16, 8)
    assert names_at(table, outer + 15) == "outer_fn"
    assert names_at(table, inner + 7) == "inner_fn"
    assert names_at(table, inner + 8) == "outer_fn"  # past the inner one, still in the outer
    assert names_at(table, outer + outer_size - 1) == "outer_fn"


def test_dynsym_holds_only_exported_functions(built):
    image, _ = open_image(str(built.lib))
    dyn = function_symbols(image, SHT_DYNSYM)
    exported = progs.nm_functions(built.lib, dynamic=True)
    value, _ = exported["lib_visible"]
    assert names_at(dyn, value) == "lib_visible"
    hidden, _ = progs.nm_functions(built.lib)["lib_hidden_static"]
    assert names_at(dyn, hidden) != "lib_hidden_static"


def _libc_path() -> str:
    with open("/proc/self/maps") as f:
        return next(ln.split()[-1] for ln in f if ln.rstrip().endswith("/libc.so.6"))


def test_a_strong_symbol_names_its_address_over_weak_aliases():
    """libc's .dynsym has weak aliases beside strong names (``imaxabs`` beside ``labs``):
    the strong one names the address, as perf chooses."""
    libc = _libc_path()
    by_address: dict[int, dict[str, set[str]]] = {}
    for line in progs.sh("nm", "-D", "--defined-only", libc).splitlines():
        value, binding, name = line.split()[0], line.split()[-2], line.split()[-1]
        if binding in "TW":
            names = by_address.setdefault(int(value, 16), {"T": set(), "W": set()})
            names[binding].add(name.split("@")[0])
    mixed = {a: n for a, n in by_address.items() if n["T"] and n["W"]}
    assert len(mixed) > 100  # glibc exports hundreds of functions both ways
    dyn = function_symbols(open_image(libc)[0], SHT_DYNSYM)
    named = {a: names_at(dyn, a) for a in mixed}
    assert {a for a, n in named.items() if n not in mixed[a]["T"]} == set()


def test_build_id_and_debuglink_read_like_readelf(built, tmp_path):
    image, _ = open_image(str(built.pie))
    assert image.build_id().hex() == progs.build_id(built.pie)
    assert image.debuglink() is None
    linked = tmp_path / "prog"
    debug = tmp_path / "prog.debug"
    progs.sh("objcopy", "--only-keep-debug", built.pie, debug)
    progs.sh("objcopy", "--strip-all", f"--add-gnu-debuglink={debug}", built.pie, linked)
    name, crc = open_image(str(linked))[0].debuglink()
    assert name == "prog.debug"
    import zlib

    assert crc == zlib.crc32(debug.read_bytes())


def test_file_offsets_map_to_addresses_through_the_load_segments(built):
    image, _ = open_image(str(built.nopie))
    loads = [ln.split() for ln in progs.sh("readelf", "-lW", built.nopie).splitlines()]
    loads = [p for p in loads if p and p[0] == "LOAD"]
    offs = np.array([int(p[1], 16) + 3 for p in loads], dtype=np.uint64)
    vaddrs, ok = image.offsets_to_vaddrs(offs)
    assert ok.all()
    assert vaddrs.tolist() == [int(p[2], 16) + 3 for p in loads]
    _, ok = image.offsets_to_vaddrs(np.array([10**12], dtype=np.uint64))
    assert not ok[0]


@pytest.mark.parametrize(
    "data",
    [b"", b"\x7fELF", b"\x7fELF\x02\x01" + b"\xff" * 200, b"not an elf file at all" * 10],
)
def test_garbage_is_an_elf_error(data):
    with pytest.raises(ElfError):
        image = ElfImage(data)
        function_symbols(image)


def test_a_truncated_library_is_an_elf_error_or_has_no_symbols(built, tmp_path):
    cut = tmp_path / "cut.so"
    cut.write_bytes(built.lib.read_bytes()[:3000])  # headers kept, section table gone
    try:
        image, _ = open_image(str(cut))
    except ElfError:
        return
    with pytest.raises(ElfError):
        function_symbols(image) or (_ for _ in ()).throw(ElfError("no table"))


def test_alias_order_matches_a_full_lexsort():
    rng = np.random.default_rng(3)
    n = 5000
    start = rng.integers(0, 800, n).astype(np.uint64)
    size = rng.integers(0, 4, n).astype(np.uint64)
    is_func = rng.random(n) < 0.7
    strong = rng.random(n) < 0.5
    idx = rng.permutation(n).astype(np.int64)
    want = np.lexsort((-idx, strong, -(np.maximum(size, 1).astype(np.int64)), is_func, start))
    assert (_alias_order(start, size, is_func, strong, idx) == want).all()


# -- maps -------------------------------------------------------------------------------------


def test_maps_lines_with_spaces_deleted_files_and_anonymous_memory():
    text = (
        "55d0a000-55d0b000 r-xp 00001000 fd:01 1234 /usr/bin/my prog\n"
        "7f0000000000-7f0000001000 rwxp 00000000 00:00 0 \n"
        "7f0000002000-7f0000003000 r-xp 00002000 08:01 99 /tmp/x.so (deleted)\n"
        "7ffd00000000-7ffd00002000 r-xp 00000000 00:00 0 [vdso]\n"
        "garbage\n"
    )
    maps = Maps.parse(text)
    assert [m.path for m in maps.mappings] == ["/usr/bin/my prog", "", "/tmp/x.so", "[vdso]"]
    assert maps[2].deleted and not maps[0].deleted
    assert maps[0].file_offset(0x55D0A010) == 0x1010
    found = maps.find(np.array([0x55D0A000, 0x55D0AFFF, 0x55D0B000, 0x7F0000000800, 5], np.uint64))
    assert found.tolist() == [0, 0, -1, 1, -1]
    assert parse_line("1000-0500 r-xp 0 00:00 0 /x") is None  # end before start


# -- kallsyms ---------------------------------------------------------------------------------


def test_kallsyms_text_symbols_reach_the_next_symbol_and_data_is_never_named():
    table = KernelSymbolTable(
        b"ffffffff81000000 T _stext\n"
        b"ffffffff81000000 T first_alias\n"
        b"ffffffff81000100 t second\n"
        b"ffffffff81000200 D some_data\n"
        b"ffffffffa0000000 t mod_fn\t[ext4]\n"
        b"ffffffffa0000100 W weak_fn\n"
        b"0000000000000000 T hidden_by_kptr_restrict\n"
        b"zzzzzzzzzzzzzzzz T broken\n"
        b"ffffffff8100 T short_line\n"
        b"ffffffffa0000400 t last_fn\t[nvidia]"  # no final newline
    )

    def lookup(addr: int) -> int:
        return int(table.lookup(np.array([addr], dtype=np.uint64))[0])

    def name(addr: int) -> str | None:
        i = lookup(addr)
        return None if i < 0 else table.name(i)

    assert name(0xFFFFFFFF81000000) == "_stext"  # the first listed of the aliases
    assert name(0xFFFFFFFF810000FF) == "_stext"
    assert name(0xFFFFFFFF81000100) == "second"
    assert name(0xFFFFFFFF81000200) is None  # data
    assert name(0xFFFFFFFFA0000010) == "mod_fn"
    assert table.module(lookup(0xFFFFFFFFA0000010)) == "ext4"
    assert (name(0xFFFFFFFFA0000101), table.module(lookup(0xFFFFFFFFA0000101))) == ("weak_fn", "")
    assert (name(0xFFFFFFFFA0000500), table.module(lookup(0xFFFFFFFFA0000500))) == (
        "last_fn",
        "nvidia",
    )
    assert name(0xFFFFFFFFA0000400 + MAX_SPAN) is None  # too far from any symbol
    assert name(0x10) is None
    assert len(table) == 7  # the zero address, the broken and the short line dropped


def test_kallsyms_of_this_kernel_parse_like_a_line_by_line_reading():
    try:
        with open("/proc/kallsyms", "rb") as f:
            text = f.read()
    except OSError:
        pytest.skip("no /proc/kallsyms")
    table = KernelSymbolTable(text)
    lines = [ln.split() for ln in text.decode().splitlines()]
    lines = [p for p in lines if int(p[0], 16)]
    if not lines:
        pytest.skip("kallsyms addresses are hidden")
    assert len(table) == len(lines)
    step = max(1, len(lines) // 500)
    assert [table.name(i) for i in range(0, len(lines), step)] == [p[2] for p in lines[::step]]


def test_unreadable_kallsyms_is_an_empty_table(tmp_path):
    table = KernelSymbolTable.read(str(tmp_path / "missing"))
    assert len(table) == 0
    assert table.lookup(np.array([1, 2], dtype=np.uint64)).tolist() == [-1, -1]


# -- demangling -------------------------------------------------------------------------------


NAMES = [
    "_ZN5aiflm4demo7computeEi",
    "_ZNK3c106Device3strB5cxx11Ev",
    "_Z3foov.cold",
    "main",
    "_Znot_really_mangled!",
]


def test_in_process_demangling_matches_cxxfilt_on_plain_names():
    d = Demangler()
    if not d.in_process:
        pytest.skip("libstdc++ cannot be loaded here")
    assert d("_ZN5aiflm4demo7computeEi") == "aiflm::demo::compute(int)"
    assert d("_Z3foov.cold") == "foo() [clone .cold]"
    assert d("main") == "main"
    assert d("_Znot_really_mangled!") == "_Znot_really_mangled!"
    if shutil.which("c++filt"):
        assert Demangler(use_cxa=False).many(NAMES) == d.many(NAMES)


def test_cxa_abbreviates_std_streams_like_addr2line():
    d = Demangler()
    if not d.in_process:
        pytest.skip("libstdc++ cannot be loaded here")
    assert d("_ZlsRSoRKi") == "operator<<(std::ostream&, int const&)"


def test_without_libstdcxx_names_go_through_cxxfilt(monkeypatch):
    systools.need("c++filt")
    d = Demangler(use_cxa=False)
    assert not d.in_process
    assert d("_ZN5aiflm4demo7computeEi") == "aiflm::demo::compute(int)"


def test_elf_files_are_opened_only_when_regular(tmp_path):
    with pytest.raises(ElfError):
        open_image("/dev/zero")
    with pytest.raises(OSError):
        open_image(str(tmp_path / "missing"))
    assert Path("/dev/zero").exists()


def test_a_32_bit_library(tmp_path):
    src = tmp_path / "m32.c"
    src.write_text("int f(int x){return x+1;}\nint g(int x){return f(x)*2;}\n")
    lib = tmp_path / "m32.so"
    made = subprocess.run(
        ["gcc", "-m32", "-O1", "-fPIC", "-shared", "-nostdlib", "-Wl,--build-id", "-o", lib, src],
        capture_output=True,
    )
    if made.returncode:
        pytest.skip("gcc cannot build 32-bit code here")
    image, _ = open_image(str(lib))
    assert not image.is64
    assert image.build_id().hex() == progs.build_id(lib)
    table = function_symbols(image)
    for name, (value, size) in progs.nm_functions(lib).items():
        if size:
            assert names_at(table, value) == name
            assert names_at(table, value + size - 1) == name


def test_damaged_files_raise_only_elf_errors(built):
    """Random bytes changed in the ELF header, the section table and anywhere else: reading
    either works or raises ElfError, never anything else."""
    data = built.lib.read_bytes()
    shoff = int(np.frombuffer(data, dtype="<u8", count=1, offset=0x28)[0])
    rng = np.random.default_rng(1)
    probe = np.arange(0, 0x4000, 7, dtype=np.uint64)
    damaged = 0
    for _ in range(300):
        d = bytearray(data)
        for _ in range(int(rng.integers(1, 6))):
            where = int(rng.integers(0, 3))
            lo = (0, shoff, 0)[where]
            hi = (64, len(data), len(data))[where]
            d[int(rng.integers(lo, hi))] = int(rng.integers(0, 256))
        try:
            image = ElfImage(bytes(d))
            image.build_id()
            image.debuglink()
            for kind in (2, SHT_DYNSYM):
                table = function_symbols(image, kind)
                if table is not None:
                    table.lookup(probe)
                    [table.name(i) for i in range(min(len(table), 5))]
        except ElfError:
            damaged += 1
    assert damaged > 0  # the mutations did reach the headers


def test_names_libstdcxx_rejects_are_retried_with_cxxfilt():
    """GCC 12's libstdc++ cannot read generic lambdas (``UlDpOT_E_``); binutils can."""
    systools.need("c++filt")
    name = "_ZZN2at21wrapPropagateTLSStateISt8functionIFvvEEEEDaT_ENKUlDpOT_E_clIJEEEDaS7_"
    want = (
        "auto at::wrapPropagateTLSState<std::function<void ()> >(std::function<void ()>)"
        "::{lambda((auto:1&&)...)#1}::operator()<>() const"
    )
    d = Demangler()
    assert d.many([name, "_ZN5aiflm4demo7computeEi", "_ZGVeN8_Sleef_modf"]) == [
        want,
        "aiflm::demo::compute(int)",
        "_ZGVeN8_Sleef_modf",  # a vector-ABI name: neither demangles it
    ]
    assert d(name) == want  # cached
