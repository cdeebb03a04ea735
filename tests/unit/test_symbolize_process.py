"""Symbolizing running processes: PIE and non-PIE programs and their shared library, libc,
stripped binaries with separate debug files, deleted files, another mount namespace, JIT
perf maps, the vDSO, the kernel, and files that are not (or no longer) ELF."""

from __future__ import annotations

import ctypes
import lzma
import os
import shutil
import subprocess
from pathlib import Path

import native_programs as progs
import numpy as np
import pytest

import systools
from aiflame.model import FrameKind
from aiflame.symbolize.process import Symbol, SymbolResolver

pytestmark = pytest.mark.tools("gcc", "nm", "readelf", "objcopy", "strip")

BASE = 0x7F1000000000


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> progs.Built:
    return progs.build(tmp_path_factory.mktemp("proc"))


def names(syms: list[Symbol]) -> list[str]:
    return [s.name for s in syms]


@pytest.mark.parametrize("which", ["pie", "nopie"])
def test_a_running_program_matches_nm_at_every_function(built, which):
    exe = getattr(built, which)
    nm = progs.nm_functions(exe)
    with progs.Running([str(exe)]) as run:
        bias = run.addrs["main"] - nm["main"][0]
        assert (bias == 0) == (which == "nopie")
        # every address the program printed is nm's value plus one load bias
        for name in ("hot_alpha", "hot_static", "asm_nosize", "outer_fn", "inner_fn"):
            assert run.addrs[name] - nm[name][0] == bias
        psym = SymbolResolver().process(run.pid)
        sized = {n: (v, s) for n, (v, s) in nm.items() if s > 0 and n != "outer_fn"}
        addrs = [bias + v + k for v, s in sized.values() for k in (0, s // 2, s - 1)]
        want = [n for n in sized for _ in range(3)]
        got = psym.symbolize(addrs)
        assert names(got) == [
            "aiflm::demo::compute(int)" if n.startswith("_Z") else n for n in want
        ]
        assert {s.module for s in got} == {str(exe)}
        lib = psym.symbolize([run.addrs["lib_hidden_static"] + 1])[0]
        assert (lib.name, lib.module) == ("lib_hidden_static", str(built.lib))


def test_kinds_cpp_native_and_unknown(built):
    with progs.Running([str(built.pie)]) as run:
        syms = (
            SymbolResolver()
            .process(run.pid)
            .symbolize([run.addrs["cpp_named"], run.addrs["hot_alpha"], 0x10])
        )
    assert [(s.name, s.kind) for s in syms] == [
        ("aiflm::demo::compute(int)", FrameKind.CPP),
        ("hot_alpha", FrameKind.NATIVE),
        ("[unknown]", FrameKind.UNKNOWN),
    ]
    assert syms[2].module == ""


def test_a_snapshot_of_maps_outlives_the_process(built):
    with progs.Running([str(built.pie)]) as run:
        maps, addr = run.maps(), run.addrs["hot_static"] + 2
    assert not Path(f"/proc/{run.pid}").exists() or run.proc.poll() is not None
    sym = SymbolResolver().process(run.pid, maps_text=maps).symbolize([addr])[0]
    assert sym.name == "hot_static"


def test_libc_of_this_process_by_its_exported_or_debug_names():
    libc = ctypes.CDLL("libc.so.6")
    addr = ctypes.cast(libc.getpid, ctypes.c_void_p).value
    sym = SymbolResolver().process(os.getpid()).symbolize([addr + 1])[0]
    assert "libc" in os.path.basename(sym.module)
    path = Path(sym.module)
    exported = progs.nm_functions(path, dynamic=True)
    value = exported["getpid"][0]
    aliases = {n for n, (v, _) in exported.items() if v == value}
    # with libc6-dbg installed, the debug file's .symtab names it (glibc's __GI_ aliases)
    bid = progs.build_id(path)
    debug = Path("/usr/lib/debug/.build-id", bid[:2], bid[2:] + ".debug")
    if debug.exists():
        aliases |= {n for n, (v, _) in progs.nm_functions(debug).items() if v == value}
    assert sym.name in aliases, (sym.name, aliases)
    assert sym.kind == FrameKind.NATIVE


def test_stripped_binary_with_a_debuglink_gets_static_functions_back(built, tmp_path):
    exe, debug = tmp_path / "prog", tmp_path / "prog.debug"
    progs.sh("objcopy", "--only-keep-debug", built.pie, debug)
    progs.sh("objcopy", "--strip-all", "--add-gnu-debuglink=" + str(debug), built.pie, exe)
    shutil.copy(built.lib, tmp_path / "libdemo.so")
    assert "hot_static" not in progs.sh("nm", "-D", "--defined-only", exe)
    with progs.Running([str(exe)]) as run:
        sym = SymbolResolver(debug_dirs=[]).process(run.pid).symbolize([run.addrs["hot_static"]])
    assert names(sym) == ["hot_static"]


def test_a_debug_file_of_another_build_is_not_used(built, tmp_path):
    exe, debug = tmp_path / "prog", tmp_path / "prog.debug"
    progs.sh("objcopy", "--only-keep-debug", built.nopie, debug)
    progs.sh("objcopy", "--strip-all", "--add-gnu-debuglink=" + str(debug), built.pie, exe)
    shutil.copy(built.lib, tmp_path / "libdemo.so")
    with progs.Running([str(exe)]) as run:
        off = run.addrs["hot_static"] - run.addrs["main"]
        sym = SymbolResolver(debug_dirs=[]).process(run.pid).symbolize([run.addrs["hot_static"]])
    assert sym[0].name.startswith("prog+0x")  # no symbol: module+offset, not a wrong name
    assert off != 0


def test_stripped_binary_found_by_build_id(built, tmp_path):
    exe = tmp_path / "prog"
    progs.sh("strip", "--strip-all", "-o", exe, built.pie)
    shutil.copy(built.lib, tmp_path / "libdemo.so")
    bid = progs.build_id(built.pie)
    where = tmp_path / "debug" / ".build-id" / bid[:2]
    where.mkdir(parents=True)
    progs.sh("objcopy", "--only-keep-debug", built.pie, where / (bid[2:] + ".debug"))
    with progs.Running([str(exe)]) as run:
        addrs = [run.addrs["hot_static"], run.addrs["cpp_named"] + 1]
        with_debug = SymbolResolver(debug_dirs=[str(tmp_path / "debug")]).process(run.pid)
        without = SymbolResolver(debug_dirs=[str(tmp_path / "elsewhere")]).process(run.pid)
        assert names(with_debug.symbolize(addrs)) == ["hot_static", "aiflm::demo::compute(int)"]
        off = run.addrs["hot_static"] - min(
            int(ln.split("-")[0], 16) for ln in run.maps().splitlines() if ln.endswith(str(exe))
        )
        assert names(without.symbolize(addrs[:1])) == [f"prog+0x{off:x}"]


def test_minidebuginfo_section(built, tmp_path):
    """Fedora's .gnu_debugdata: an xz-compressed ELF file with the .symtab."""
    symtab_only = tmp_path / "symtab.elf"
    progs.sh("objcopy", "--only-keep-debug", built.pie, symtab_only)
    xz = tmp_path / "mini.xz"
    xz.write_bytes(lzma.compress(symtab_only.read_bytes(), format=lzma.FORMAT_XZ))
    exe = tmp_path / "prog"
    progs.sh("strip", "--strip-all", "-o", exe, built.pie)
    progs.sh("objcopy", "--add-section", f".gnu_debugdata={xz}", exe)
    shutil.copy(built.lib, tmp_path / "libdemo.so")
    with progs.Running([str(exe)]) as run:
        sym = SymbolResolver(debug_dirs=[]).process(run.pid).symbolize([run.addrs["hot_static"]])
    assert names(sym) == ["hot_static"]


def test_a_deleted_binary_is_read_through_map_files(built, tmp_path):
    systools.need_root("/proc/PID/map_files can only be read with CAP_SYS_ADMIN")
    exe = tmp_path / "prog"
    shutil.copy(built.pie, exe)
    shutil.copy(built.lib, tmp_path / "libdemo.so")
    with progs.Running([str(exe)]) as run:
        exe.unlink()
        assert f"{exe} (deleted)" in run.maps()
        sym = SymbolResolver().process(run.pid).symbolize([run.addrs["hot_alpha"] + 1])[0]
        assert (sym.name, sym.module) == ("hot_alpha", str(exe))


def test_files_gone_garbage_or_devices_give_module_plus_offset(built, tmp_path):
    garbage = tmp_path / "libgarbage.so"
    garbage.write_bytes(b"\x7fELF\x02\x01\x01" + os.urandom(4000))
    truncated = tmp_path / "libcut.so"
    truncated.write_bytes(built.lib.read_bytes()[:5000])
    maps = progs.maps_for(built.lib, BASE, shown_as=str(tmp_path / "vanished.so"))
    maps += progs.maps_for(built.lib, BASE + 0x100000, shown_as=str(garbage))
    maps += progs.maps_for(built.lib, BASE + 0x200000, shown_as=str(truncated))
    maps += f"{BASE + 0x300000:x}-{BASE + 0x301000:x} r-xp 00002000 00:05 6 /dev/zero\n"
    maps += f"{BASE + 0x400000:x}-{BASE + 0x401000:x} r-xp 00000000 00:00 0 [heap]\n"
    psym = SymbolResolver().process(2**31 - 5, maps_text=maps)  # no such process
    text_off = progs.nm_functions(built.lib)["lib_visible"][0]
    got = psym.symbolize(
        [
            *(BASE + text_off + k * 0x100000 for k in range(3)),
            *(BASE + 0x300010, BASE + 0x400020, BASE - 1),
        ]
    )
    # the file offset: readelf's layout puts .text in a segment with offset == vaddr here
    assert [(s.name, s.kind) for s in got] == [
        (f"vanished.so+0x{text_off:x}", FrameKind.NATIVE),
        (f"libgarbage.so+0x{text_off:x}", FrameKind.NATIVE),
        (f"libcut.so+0x{text_off:x}", FrameKind.NATIVE),
        ("zero+0x2010", FrameKind.NATIVE),
        ("[heap]+0x20", FrameKind.NATIVE),
        ("[unknown]", FrameKind.UNKNOWN),
    ]


def test_runtime_libraries_are_runtime_frames(built, tmp_path):
    cudart = tmp_path / "libcudart-1a2b3c4d.so.12"
    shutil.copy(built.lib, cudart)
    maps = progs.maps_for(cudart, BASE)
    off = progs.nm_functions(cudart)["lib_visible"][0]
    got = SymbolResolver().process(2**31 - 5, maps_text=maps).symbolize([BASE + off, BASE + 1])
    assert [(s.name, s.kind) for s in got] == [
        ("lib_visible", FrameKind.RUNTIME),
        (f"{cudart.name}+0x1", FrameKind.RUNTIME),
    ]


def test_jit_code_named_by_the_perf_map(tmp_path):
    pid = 2**31 - 7
    (tmp_path / f"perf-{pid}.map").write_text(
        f"{BASE + 0x100:x} 40 jit_avx512_core_gemm_kernel.3\n{BASE + 0x200:x} 10 py::f:/a.py\n"
    )
    maps = f"{BASE:x}-{BASE + 0x1000:x} rwxp 00000000 00:00 0 \n"
    psym = SymbolResolver(perf_map_dir=str(tmp_path)).process(pid, maps_text=maps)
    got = psym.symbolize([BASE + 0x120, BASE + 0x205, BASE + 0x300, BASE + 0x5000])
    mod = str(tmp_path / f"perf-{pid}.map")
    assert got == [
        Symbol("jit_avx512_core_gemm_kernel", mod, FrameKind.JIT),
        Symbol("py::f:/a.py", mod, FrameKind.PYTHON),
        Symbol("[anon]+0x300", "", FrameKind.NATIVE),
        Symbol("[unknown]", "", FrameKind.UNKNOWN),
    ]
    # the runtime wrote more code: the map is read again
    with open(tmp_path / f"perf-{pid}.map", "a") as f:
        f.write(f"{BASE + 0x300:x} 20 jit_later\n")
    assert psym.symbolize([BASE + 0x300])[0].name == "jit_later"


def test_the_vdso_of_this_process(tmp_path):
    with open("/proc/self/maps") as f:
        vdso = [ln for ln in f if ln.rstrip().endswith("[vdso]")]
    if not vdso:
        pytest.skip("no vDSO mapped")
    start, end = (int(x, 16) for x in vdso[0].split()[0].split("-"))
    with open("/proc/self/mem", "rb") as f:
        f.seek(start)
        (tmp_path / "vdso.so").write_bytes(f.read(end - start))
    exported = progs.nm_functions(tmp_path / "vdso.so", dynamic=True)
    name = next(n for n in sorted(exported) if "gettime" in n)
    value = exported[name][0]
    aliases = {n for n, (v, _) in exported.items() if v == value}
    sym = SymbolResolver().process(os.getpid()).symbolize([start + value + 1])[0]
    assert sym.name in aliases and sym.module == "[vdso]"


def test_kernel_symbols_resolve_to_themselves():
    entries = []
    with open("/proc/kallsyms") as f:
        for line in f:
            parts = line.split()
            # the kernel image only: BPF programs and modules come and go meanwhile
            if len(parts) == 3 and parts[1] in "tT" and int(parts[0], 16):
                entries.append((int(parts[0], 16), parts[2]))
    if not entries:
        pytest.skip("kallsyms addresses are hidden (not root, or kptr_restrict)")
    entries.sort()
    count: dict[int, int] = {}
    for a, _ in entries:
        count[a] = count.get(a, 0) + 1
    unique = [(a, n) for a, n in entries if count[a] == 1]
    pick = [unique[i] for i in np.linspace(0, len(unique) - 1, 200).astype(int)]
    ksyms = SymbolResolver().kernel()
    got = ksyms.symbolize([a for a, _ in pick])
    assert [(s.name, s.module, s.kind) for s in got] == [
        (n, "[kernel]", FrameKind.KERNEL) for _, n in pick
    ]
    # signed 64-bit addresses, as a BPF stack comes back in an int64 array
    signed = np.array([a for a, _ in pick[:5]], dtype=np.uint64).view(np.int64)
    assert names(ksyms.symbolize(signed)) == [n for _, n in pick[:5]]


def test_a_process_in_another_mount_namespace(built, tmp_path):
    """The program lives on a tmpfs mounted only in its own mount namespace: the host path
    does not exist, /proc/PID/root does."""
    systools.need_root("mounting a tmpfs in a mount namespace of its own")
    if not shutil.which("unshare"):
        pytest.skip("needs unshare (util-linux)")
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    script = (
        f"mount -t tmpfs none {hidden} && cp {built.pie} {built.lib} {hidden}/ "
        f"&& exec {hidden}/prog-pie"
    )
    try:
        run = progs.Running(["unshare", "-m", "--propagation", "private", "sh", "-c", script])
    except (AssertionError, subprocess.SubprocessError, OSError):
        pytest.skip("cannot create a mount namespace here")
    with run:
        assert not (hidden / "prog-pie").exists()
        syms = (
            SymbolResolver()
            .process(run.pid)
            .symbolize([run.addrs["hot_static"], run.addrs["lib_hidden_static"]])
        )
        assert [(s.name, s.module) for s in syms] == [
            ("hot_static", f"{hidden}/prog-pie"),
            ("lib_hidden_static", f"{hidden}/libdemo.so"),
        ]


def test_one_elf_file_is_read_once_for_many_processes(built):
    resolver = SymbolResolver()
    with progs.Running([str(built.pie)]) as a, progs.Running([str(built.pie)]) as b:
        resolver.process(a.pid).symbolize([a.addrs["main"]])
        loaded = dict(resolver._by_file)
        assert resolver.process(b.pid).symbolize([b.addrs["main"]])[0].name == "main"
        assert resolver._by_file == loaded


def test_empty_and_odd_inputs():
    psym = SymbolResolver().process(os.getpid())
    assert psym.symbolize([]) == []
    assert psym.symbolize(np.array([], dtype=np.uint64)) == []
    assert names(psym.symbolize([2**64 - 1, 0])) == ["[unknown]", "[unknown]"]
    assert SymbolResolver().process(2**31 - 3).symbolize([0x400000]) == [
        Symbol("[unknown]", "", FrameKind.UNKNOWN)
    ]


def test_the_file_cache_is_bounded(built, tmp_path):
    other = tmp_path / "libother.so"
    shutil.copy(built.lib, other)
    maps = progs.maps_for(built.lib, BASE) + progs.maps_for(other, BASE + 0x100000)
    off = progs.nm_functions(built.lib)["lib_visible"][0]
    resolver = SymbolResolver(max_files=1)
    for _ in range(2):
        got = resolver.process(2**31 - 5, maps_text=maps).symbolize(
            [BASE + off, BASE + 0x100000 + off]
        )
        assert [(s.name, s.module) for s in got] == [
            ("lib_visible", str(built.lib)),
            ("lib_visible", str(other)),
        ]
        assert len(resolver._by_file) == 1


def test_names_outside_a_damaged_string_table_give_module_plus_offset(built, tmp_path):
    data = bytearray(built.lib.read_bytes())
    symtab = next(
        ln.split() for ln in progs.sh("readelf", "-SW", built.lib).splitlines() if ".symtab" in ln
    )
    at = symtab.index(".symtab")
    off, size = int(symtab[at + 3], 16), int(symtab[at + 4], 16)
    for k in range(size // 24):  # every st_name far past the end of .strtab
        data[off + 24 * k : off + 24 * k + 4] = (0xFFFFFF00).to_bytes(4, "little")
    broken = tmp_path / "libnoname.so"
    broken.write_bytes(bytes(data))
    value = progs.nm_functions(built.lib)["lib_visible"][0]
    sym = (
        SymbolResolver().process(2**31 - 5, progs.maps_for(broken, BASE)).symbolize([BASE + value])
    )
    assert sym[0].name == f"libnoname.so+0x{value:x}"


def test_without_build_ids_the_debuglink_crc_decides(built, tmp_path):
    full = tmp_path / "full"
    progs.sh(
        "gcc", "-O1", "-g", "-Wl,--build-id=none", "-o", full, built.dir / "prog.c",
        f"-L{built.dir}", "-ldemo", "-Wl,-rpath,$ORIGIN",
    )  # fmt: skip
    shutil.copy(built.lib, tmp_path / "libdemo.so")
    debug, exe = tmp_path / "prog.debug", tmp_path / "prog"
    progs.sh("objcopy", "--only-keep-debug", full, debug)
    progs.sh("objcopy", "--strip-all", f"--add-gnu-debuglink={debug}", full, exe)
    assert "Build ID" not in progs.sh("readelf", "-n", exe)
    with progs.Running([str(exe)]) as run:
        addr = run.addrs["hot_static"]
        assert SymbolResolver(debug_dirs=[]).process(run.pid).symbolize([addr])[0].name == (
            "hot_static"
        )
        with open(debug, "ab") as f:  # the debug file changed since: its CRC no longer matches
            f.write(b"\0")
        stale = SymbolResolver(debug_dirs=[]).process(run.pid).symbolize([addr])[0]
        assert stale.name.startswith("prog+0x")


def plt_stubs_named_by_objdump(path: Path) -> dict[int, str]:
    """objdump's ``func@plt`` labels in ``.plt`` / ``.plt.sec`` (not ``.plt.got``, whose
    stubs are named from GOT relocations; aiflame leaves them unnamed)."""
    sections = progs.sh("readelf", "-SW", path)
    got_plt = [
        (int(p[3], 16), int(p[5], 16))
        for p in (line.replace("[ ", "[").split() for line in sections.splitlines())
        if len(p) > 5 and p[1] == ".plt.got"
    ]
    out = {}
    for line in progs.sh("objdump", "-d", path).splitlines():
        if line.endswith("@plt>:"):
            addr = int(line.split()[0], 16)
            if not any(a <= addr < a + n for a, n in got_plt):
                out[addr] = line.split("<", 1)[1].rstrip(">:")
    return out


@pytest.mark.parametrize("which", ["pie", "nopie", "lib"])
def test_plt_stubs_are_named_as_objdump_names_them(built, which):
    path = getattr(built, which)
    stubs = plt_stubs_named_by_objdump(path)
    assert stubs  # every one of them calls another file's function
    maps = progs.maps_for(path, 0 if which == "nopie" else BASE)
    psym = SymbolResolver().process(999_999_999, maps_text=maps)
    base = 0 if which == "nopie" else BASE
    got = psym.symbolize([base + a + k for a in stubs for k in (0, 15)])
    assert names(got) == [n for n in stubs.values() for _ in (0, 15)]
