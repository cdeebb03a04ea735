"""eBPF CPU samples -> Profile, without the kernel: RawProfiles made by hand from real
addresses of this process (libc functions, its own /proc/self/maps) and a kallsyms file."""

from __future__ import annotations

import ctypes
import errno
import os
import struct

import pytest

from aiflame.cli.info import describe
from aiflame.collectors.ebpf.cgroups import cgroup2_root, cgroup_paths
from aiflame.collectors.ebpf.cpu_profile import (
    NO_USER_STACK,
    USER_STACK_MISSING,
    build_profile,
    losses_line,
    truncated_stacks,
)
from aiflame.collectors.ebpf.perf import cpu_clock_attr, online_cpus
from aiflame.collectors.ebpf.sampler import STAT_NAMES, RawProfile, SampleKey
from aiflame.model import FrameKind
from aiflame.render.registry import render
from aiflame.sources import load
from aiflame.symbolize.process import SymbolResolver

KALLSYMS = """\
ffffffff81000000 T _stext
ffffffff81001000 T entry_SYSCALL_64
ffffffff81002000 T do_syscall_64
ffffffff81003000 T __x64_sys_getpid
ffffffff81004000 T schedule
"""
K_ENTRY, K_DO, K_GETPID = 0xFFFFFFFF81001010, 0xFFFFFFFF81002020, 0xFFFFFFFF81003030


def _libc_function(name: str) -> int:
    libc = ctypes.CDLL("libc.so.6")
    return ctypes.cast(getattr(libc, name), ctypes.c_void_p).value or 0


@pytest.fixture
def resolver(tmp_path) -> SymbolResolver:
    path = tmp_path / "kallsyms"
    path.write_text(KALLSYMS)
    return SymbolResolver(kallsyms_path=str(path), perf_map_dir=str(tmp_path))


def _raw(counts, stacks, stats=None, **kw) -> RawProfile:  # type: ignore[no-untyped-def]
    with open("/proc/self/maps") as f:
        maps = {os.getpid(): [f.read()]}
    full = dict.fromkeys(STAT_NAMES, 0) | (stats or {})
    return RawProfile(counts, stacks, full, maps, {os.getpid(): "pytest"}, 99, 1.0, 2, **kw)


def _key(user: int, kernel: int, tid: int | None = None, comm: str = "worker") -> SampleKey:
    pid = os.getpid()
    return SampleKey(pid, tid or pid, 1, user, kernel, comm)


def test_stacks_root_first_user_then_kernel_with_labels(resolver):
    labs, clone = _libc_function("labs"), _libc_function("clone")
    # innermost first, as the kernel stores them; callers are return addresses (+1)
    stacks = {7: (labs + 2, clone + 1), 9: (K_GETPID, K_DO + 1, K_ENTRY + 1)}
    raw = _raw([(_key(7, 9), 5), (_key(7, -errno.EFAULT, tid=os.getpid() + 1), 3)], stacks)
    profile, stats = build_profile(raw, resolver)
    clone_name = resolver.process(os.getpid()).symbolize([clone])[0].name  # or __GI___clone
    assert clone_name.removeprefix("__GI_") in ("clone", "__clone")
    by_stack = {
        tuple(f.name for f in profile.stack_frames(s)): v for s, v in profile.iter_stack_values(0)
    }
    assert by_stack == {
        (clone_name, "labs", "entry_SYSCALL_64", "do_syscall_64", "__x64_sys_getpid"): 5,
        (clone_name, "labs"): 3,  # the sample hit user mode: no kernel part
    }
    kinds = {
        f.name: f.kind for s, _ in profile.iter_stack_values(0) for f in profile.stack_frames(s)
    }
    assert kinds["do_syscall_64"] == FrameKind.KERNEL and kinds["labs"] == FrameKind.NATIVE
    labels = profile.labels_of(0)
    assert labels == {
        "pid": str(os.getpid()),
        "tid": str(os.getpid()),
        "comm": "worker",
        "process": "pytest",
        "cgroup": labels["cgroup"],
    }
    assert stats.user_stacks == 8 and stats.truncated == 0  # clone starts threads
    assert profile.meta["truncated_user_stacks"] == [0, 8]
    assert profile.meta["info:ebpf losses"] == "none"


def test_without_labels_one_sample_per_stack(resolver):
    """A continuous profiler's series carries the labels: its periods are built without
    sample labels, each stack once whatever threads it was sampled in."""
    labs, clone = _libc_function("labs"), _libc_function("clone")
    stacks = {7: (labs + 2, clone + 1), 9: (K_GETPID, K_DO + 1, K_ENTRY + 1)}
    other_tid = os.getpid() + 1
    counts = [(_key(7, 9), 5), (_key(7, 9, tid=other_tid), 2), (_key(7, -errno.EFAULT), 3)]
    labelled, stats = build_profile(_raw(counts, stacks), resolver)
    bare, bare_stats = build_profile(_raw(counts, stacks), resolver, labels=False)
    assert len(labelled) == 3 and len(bare) == 2
    assert bare.label_sets == [()] and not bare.sample_labels.any()

    def by_stack(p):  # type: ignore[no-untyped-def]
        return sorted((tuple(p.stack_names(s)), v) for s, v in p.iter_stack_values(0))

    merged: dict = {}
    for names, v in by_stack(labelled):
        merged[names] = merged.get(names, 0) + v
    assert by_stack(bare) == sorted(merged.items())
    assert [v for _, v in by_stack(bare)] == [3, 7]
    assert bare_stats == stats


def test_cut_short_and_missing_stacks_are_kept_and_counted(resolver):
    labs = _libc_function("labs")
    deep = (labs + 2, *(labs + 1 for _ in range(126)))  # at the 127-frame limit
    stacks = {1: (labs + 2, labs + 1), 2: deep, 9: (K_GETPID, K_DO + 1)}
    raw = _raw(
        [
            (_key(1, -errno.EFAULT), 4),  # no start function: cut short
            (_key(2, -errno.EFAULT), 1),  # depth limit
            (_key(NO_USER_STACK, 9, comm="kworker/0:1"), 2),  # a kernel thread
            (_key(-errno.EFAULT, 9), 3),  # user stack unreadable
            (_key(-errno.ENOMEM, -errno.ENOMEM), 1),  # both lost: stack map full
        ],
        stacks,
        {"user_stack_empty": 3, "stacks_full": 2},
    )
    profile, stats = build_profile(raw, resolver)
    names = {tuple(profile.stack_names(s)): v for s, v in profile.iter_stack_values(0)}
    assert names[("labs", "labs")] == 4
    assert names[("do_syscall_64", "__x64_sys_getpid")] == 2
    assert names[(USER_STACK_MISSING, "do_syscall_64", "__x64_sys_getpid")] == 3
    assert names[("[stack lost: stack map full]", "[stack lost: stack map full]")] == 1
    assert sum(names.values()) == 11  # nothing dropped
    assert (stats.user_stacks, stats.truncated, stats.at_depth_limit) == (5, 5, 1)
    assert "100.0% of 5 user stacks" in str(profile.meta["info:truncated stacks"])
    assert profile.meta["info:ebpf losses"] == (
        "lost 2 stacks (stack map full); 3 unreadable user stacks"
    )


def test_stacks_from_libc_start_code_without_its_debug_symbols_are_complete(tmp_path):
    """Without libc6-dbg, glibc's start functions (not exported) have no name: a stack whose
    outermost frame is such an unnamed libc address reached its start; one that ends in a
    named function that is not a start function was cut short."""
    path = tmp_path / "kallsyms"
    path.write_text(KALLSYMS)
    no_debug = SymbolResolver(kallsyms_path=str(path), debug_dirs=(str(tmp_path),))
    libc_start = _libc_function("__libc_start_main")
    # the start code the dynamic symbols leave unnamed: __libc_start_call_main in glibc 2.34+,
    # placed before __libc_start_main
    me = no_debug.process(os.getpid())
    unnamed = [a for a in range(libc_start - 256, libc_start) if "+0x" in me.symbolize([a])[0].name]
    assert unnamed, "no unnamed libc code before __libc_start_main"
    start_code = me.symbolize([unnamed[-1]])[0].name
    assert start_code.startswith("libc.so.6+0x")
    labs = _libc_function("labs")
    stacks = {1: (labs + 2, unnamed[-1] + 1), 2: (labs + 2, labs + 1)}  # + 1: return addresses
    raw = _raw([(_key(1, -errno.EFAULT), 3), (_key(2, -errno.EFAULT), 2)], stacks)
    profile, stats = build_profile(raw, no_debug)
    names = {tuple(profile.stack_names(s)): v for s, v in profile.iter_stack_values(0)}
    assert names == {(start_code, "labs"): 3, ("labs", "labs"): 2}
    assert (stats.user_stacks, stats.truncated) == (5, 2)  # only the second was cut short


def test_unknown_addresses_become_module_offsets(resolver):
    # an address inside this process's anonymous memory, and one outside every mapping
    buf = ctypes.create_string_buffer(1 << 20)  # malloc'd: anonymous or [heap]
    addr = ctypes.addressof(buf) + 100
    raw = _raw([(_key(1, -errno.EFAULT), 1)], {1: (addr, 8)})
    profile, _ = build_profile(raw, resolver)
    (stack,) = [s for s, _ in profile.iter_stack_values(0)]
    outer, leaf = profile.stack_names(stack)
    assert outer == "[unknown]"
    assert "+0x" in leaf and leaf.split("+0x")[0] in ("[heap]", "[anon]")


def test_process_frames_root_each_stack(resolver):
    labs = _libc_function("labs")
    raw = _raw([(_key(1, -errno.EFAULT), 2)], {1: (labs + 2,)})
    profile, _ = build_profile(raw, resolver, process_frames=True)
    (stack,) = [s for s, _ in profile.iter_stack_values(0)]
    root = profile.stack_frames(stack)[0]
    assert root == root.__class__(f"pytest ({os.getpid()})", FrameKind.LABEL)


def test_info_shows_the_truncated_share_after_a_pprof_round_trip(resolver, tmp_path):
    labs = _libc_function("labs")
    raw = _raw(
        [(_key(1, -errno.EFAULT), 3), (_key(2, -errno.EFAULT), 1)], {1: (labs + 2,), 2: (labs,)}
    )
    profile, _ = build_profile(raw, resolver)
    path = tmp_path / "p.pb.gz"
    path.write_bytes(render(profile, "pprof", None, "t"))  # type: ignore[arg-type]
    back = load(str(path))
    assert truncated_stacks(back.meta) == (4, 4)
    assert "truncated:   100.0% of 4 user stacks cut short (no frame pointers?)" in describe(back)
    assert any(line.startswith("truncated stacks: 100.0%") for line in describe(profile))


def test_losses_line_names_every_counter():
    assert losses_line(dict.fromkeys(STAT_NAMES, 0)) == "none"
    line = losses_line(
        {"counts_full": 1, "stacks_full": 2, "user_stack_empty": 3, "kernel_stack_failed": 4}
        | {"events_lost": 5}
    )
    assert line == (
        "lost 1 samples (count map full); 2 stacks (stack map full); 3 unreadable user "
        "stacks; 4 kernel stacks; 5 process announcements (ring buffer full)"
    )


def test_cgroup_ids_are_directory_inodes(tmp_path):
    root = tmp_path / "cg"
    (root / "system.slice" / "docker-abc.scope").mkdir(parents=True)
    ino = os.stat(root / "system.slice" / "docker-abc.scope").st_ino
    found = cgroup_paths({ino, os.stat(root).st_ino, 12345678}, str(root))
    assert found == {ino: "/system.slice/docker-abc.scope", os.stat(root).st_ino: "/"}
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        "25 30 0:22 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
        "26 30 0:23 / /sys/fs/cgroup/unified rw,relatime shared:9 - cgroup2 cgroup2 rw\n"
    )
    assert cgroup2_root(str(mountinfo)) == "/sys/fs/cgroup/unified"


def test_perf_event_attr_and_cpu_lists():
    assert online_cpus("0-3,6\n") == [0, 1, 2, 3, 6]
    assert online_cpus("0\n") == [0]
    attr = cpu_clock_attr(99)
    assert len(attr) == 128
    type_, size, config, freq, _, _, flags = struct.unpack_from("<IIQQQQQ", attr)
    assert (type_, size, config, freq, flags) == (1, 128, 0, 99, 1 << 10)


def test_python_frames_then_what_they_called_then_kernel(resolver, tmp_path):
    """A Python thread's stack: its Python frames (outermost first), then the native frames
    innermost of the interpreter's (which the Python frames stand for), then the kernel."""
    from aiflame.collectors.ebpf.pycode import PyFunction
    from aiflame.symbolize.pyframes import PythonNaming

    labs, clone, strlen = (_libc_function(n) for n in ("labs", "clone", "strlen"))
    in_python = ctypes.cast(ctypes.pythonapi.Py_GetVersion, ctypes.c_void_p).value or 0
    symbols = resolver.process(os.getpid()).symbolize([labs, strlen, clone, in_python])
    interpreter = symbols[3].module  # libpython, or the executable when linked statically
    assert interpreter != symbols[0].module
    src = tmp_path / "app.py"
    src.write_text("class Net:\n    def forward(self):\n        pass\n\ndef main():\n    pass\n")
    functions = (  # innermost first, as walked
        PyFunction("Net.forward", str(src), 2),
        PyFunction("main", str(src), 5),
        PyFunction("<module>", str(src), 1),
    )
    # labs <- strlen <- the interpreter <- clone: libc code called from Python code
    stacks = {
        7: (labs + 2, strlen + 1, in_python + 1, clone + 1),
        9: (K_GETPID, K_DO + 1, K_ENTRY + 1),
        11: (),
    }
    key = SampleKey(os.getpid(), os.getpid(), 1, 7, 9, "worker", 11)
    no_python = SampleKey(os.getpid(), os.getpid() + 1, 1, 7, 9, "omp", -1)
    raw = _raw(
        [(key, 4), (no_python, 2)],
        stacks,
        python_frames={(os.getpid(), 11): functions},
        python_modules={os.getpid(): interpreter},
    )
    profile, stats = build_profile(raw, resolver, naming=PythonNaming([str(tmp_path)]))
    by_stack = {
        tuple(f.name for f in profile.stack_frames(s)): v for s, v in profile.iter_stack_values(0)
    }
    kernel = ("entry_SYSCALL_64", "do_syscall_64", "__x64_sys_getpid")
    python = ("<module> (app.py:1)", "main (app.py:5)", "Net > forward (app.py:2)")
    labs_, strlen_, clone_, py_ = (sym.name for sym in symbols)
    assert by_stack == {
        (*python, strlen_, labs_, *kernel): 4,  # the interpreter's frames and below: replaced
        (clone_, py_, strlen_, labs_, *kernel): 2,  # a thread without Python keeps them all
    }
    stacks_ = [profile.stack_frames(s) for s, _ in profile.iter_stack_values(0)]
    kinds = {f.name: f.kind for frames in stacks_ for f in frames}
    assert {kinds[n] for n in python} == {FrameKind.PYTHON}
    assert stats.python == 4 and stats.user_stacks == 6
    assert "4 samples with Python frames" in str(profile.meta["info:python stacks"])
