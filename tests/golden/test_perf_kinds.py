"""Frame kinds of ``perf script`` input, from its module column, on the real perf files.

Kernel frames (``[kernel.kallsyms]``, vmlinux, ``.ko`` modules) are kind kernel and JIT
frames (perf maps, ``jitted-*.so``) kind jit without any option, in the Profile, the HTML
page and the pprof export, while the folded text stays what stackcollapse-perf.pl prints.
"""

from __future__ import annotations

import gzip
import io
import re
from collections import defaultdict
from pathlib import Path

import pytest
from perf_fuzz import OPTIONS as FUZZ_OPTIONS
from perf_fuzz import SEEDS, expected_name
from test_perf_script import CASES, FG, FUZZ, INF, PERL_FLAGS, assert_same, fg_expected, gunzip

from aiflame.model import FrameKind, Profile
from aiflame.render.flamedata import unpack
from aiflame.render.folded import render_folded
from aiflame.render.html import extract_data, render_html
from aiflame.render.pprof import render_pprof
from aiflame.sources import load
from aiflame.sources.inputs import Input
from aiflame.sources.perf.collapse import Collapser, folded_text, iter_chunks
from aiflame.sources.perf.rules import JIT_MARK, KERNEL_MARK, PerfOptions
from aiflame.sources.pprof.importer import load as load_pprof

# The load() keyword of each stackcollapse-perf.pl flag
LOAD_FLAGS = {"": {}, "pid": {"perf_pid": True}, "tid": {"perf_tid": True}}
LOAD_FLAGS |= {"kernel": {"perf_kernel": True}, "jit": {"perf_jit": True}}
LOAD_FLAGS |= {"all": {"perf_all": True}, "addrs": {"perf_addrs": True}}

# A stack line whose function is a plain identifier (tidying leaves it as it is)
_LINE = re.compile(rb"^\s+[0-9a-f]+ ([A-Za-z_][\w.]*)(?:\+0x[0-9a-f]+)? \((.*)\)$", re.M)


_MODULE = re.compile(rb"^\s+[0-9a-f]+ .* \((.*)\)$", re.M)


def want_kind(module: str) -> FrameKind | None:
    """The kind perf's module column gives a frame, for the modules the real files have."""
    if module == "[kernel.kallsyms]" or re.search(r"/vmlinux(-[\w.-]+)?$|\.ko$", module):
        return FrameKind.KERNEL
    if re.fullmatch(r"/tmp/perf-\d+\.map", module) or re.search(r"/jitted-\d+-\d+\.so$", module):
        return FrameKind.JIT
    return None


def modules_of(path: Path) -> dict[str, set[str]]:
    """Each plain function name of a perf file -> the modules perf printed it in."""
    out: dict[str, set[str]] = defaultdict(set)
    for name, module in _LINE.findall(gzip.decompress(path.read_bytes())):
        out[name.decode()].add(module.decode("latin-1"))
    return out


def kinds_by_name(profile: Profile) -> dict[str, set[FrameKind]]:
    out: dict[str, set[FrameKind]] = defaultdict(set)
    for i in range(len(profile.frames)):
        f = profile.frames.get(i)
        out[f.name].add(f.kind)
    return out


def test_folded_of_the_profile_is_stackcollapse_output():
    """Kinds live beside the names: every file, every option, the same bytes as Perl."""
    for stem, opt in [(s, "") for s in sorted({s for s, _ in CASES})] + CASES:
        profile = load(str(FG / "inputs" / f"{stem}.txt.gz"), **LOAD_FLAGS[opt])
        expected = gunzip(fg_expected(stem, opt))
        got = render_folded(profile).encode("utf-8")
        assert got == expected, (stem, opt)
    assert set(LOAD_FLAGS) == set(PERL_FLAGS)


@pytest.mark.parametrize("seed", list(SEEDS))
def test_marks_leave_the_names_of_odd_inputs_alone(seed: int):
    """The generated odd inputs (tests/golden/perf_fuzz.py), every option: the marked
    stacks, marks taken out, are stackcollapse-perf.pl's output byte for byte."""
    data = gunzip(FUZZ / f"fuzz-{seed:02d}.txt.gz")
    for flag, options in FUZZ_OPTIONS.items():
        c = Collapser(PerfOptions(**options, kinds=True))  # type: ignore[arg-type]
        for text in iter_chunks(io.BytesIO(data)):
            c.feed_text(text)
        plain: dict[str, int] = {}
        for stack, value in c.result().items():
            key = stack.replace(KERNEL_MARK, "").replace(JIT_MARK, "")
            plain[key] = plain.get(key, 0) + value
        got = folded_text(dict(sorted(plain.items()))).encode("latin-1")
        assert_same(got, gunzip(FUZZ / expected_name(seed, flag)), f"fuzz {seed} {flag}")


# Every real input that has samples (no-events has none, single-line-stacks is not perf's)
INPUTS = sorted((FG / "inputs").glob("*.txt.gz")) + sorted((INF / "inputs").glob("*.txt.gz"))
INPUTS = [p for p in INPUTS if not p.name.startswith(("no-events", "single-line-stacks"))]


@pytest.mark.parametrize("path", INPUTS, ids=[p.name for p in INPUTS])
def test_kernel_and_jit_frames_by_their_module(path: Path, tmp_path):
    modules = modules_of(path)
    # A blank line ends a sample: some of these files lack the last one (Perl drops it).
    complete = tmp_path / path.stem
    complete.write_bytes(gunzip(path) + b"\n")
    kinds = kinds_by_name(load(str(complete)))
    for name, mods in modules.items():
        if name not in kinds:
            continue  # only in samples of another event, or cut by a quirk of the format
        want = {want_kind(m) for m in mods} - {None}
        assert want <= kinds[name], (name, mods, kinds[name])
        user = [m for m in mods if m.startswith("/") and m.endswith((".so", "/emulator"))]
        if user and not want:
            assert not kinds[name] & {FrameKind.KERNEL, FrameKind.JIT}, (name, mods)
    # every file with kernel or JIT modules has such frames (names of all shapes)
    seen = set().union(*kinds.values())
    for module in {m.decode("latin-1") for m in _MODULE.findall(gunzip(path))}:
        assert want_kind(module) in seen | {None}, module


def test_dd_syscalls_kernel_libc_native_in_page_and_pprof(tmp_path):
    path = FG / "inputs" / "perf-dd-stacks-01.txt.gz"
    profile = load(str(path))
    kinds = kinds_by_name(profile)
    # vmlinux, versioned or not, and libc
    assert kinds["sys_write"] == {FrameKind.KERNEL} and kinds["vfs_read"] == {FrameKind.KERNEL}
    assert kinds["write"] == {FrameKind.NATIVE} and kinds["read"] == {FrameKind.NATIVE}
    # the HTML page's frame table
    header, payload = extract_data(render_html(profile))
    data = unpack(header, payload)
    strings = data["strings"]
    page = {
        strings[n]: FrameKind(k)
        for n, k in zip(data["frame_name"], data["frame_kind"], strict=True)
    }
    assert page["sys_write"] == FrameKind.KERNEL and page["write"] == FrameKind.NATIVE
    assert header["kinds"][str(int(FrameKind.KERNEL))] == "kernel"
    # pprof: the kind travels in the function's system name and comes back on import
    out = tmp_path / "dd.pb.gz"
    out.write_bytes(render_pprof(profile))
    back = kinds_by_name(load_pprof(Input(str(out))))
    assert back["sys_write"] == {FrameKind.KERNEL} and back["write"] == {FrameKind.NATIVE}


def test_kallsyms_java_jit_and_kernel_modules(tmp_path):
    java = kinds_by_name(load(str(FG / "inputs" / "perf-java-stacks-01.txt.gz")))
    assert java["native_write_msr_safe"] == {FrameKind.KERNEL}  # [kernel.kallsyms]
    jit = [n for n, k in java.items() if FrameKind.JIT in k]
    assert any(n.startswith("Interpreter") for n in jit)
    assert any("java/" in n for n in jit)  # Java methods from /tmp/perf-PID.map
    sourcepawn = kinds_by_name(load(str(INF / "inputs" / "sourcepawn-jitdump.txt.gz")))
    assert {n for n, k in sourcepawn.items() if FrameKind.JIT in k}  # jitted-PID-N.so
    # Its last sample lacks the blank line that ends a sample: given one here.
    complete = tmp_path / "versioned-vmlinux.txt"
    complete.write_bytes(gunzip(INF / "inputs" / "versioned-vmlinux.txt.gz") + b"\n")
    cloudflare = kinds_by_name(load(str(complete)))
    assert cloudflare["mlx5e_xdp_handle"] == {FrameKind.KERNEL}  # .../mlx5_core.ko
    assert cloudflare["net_rx_action"] == {FrameKind.KERNEL}  # /usr/lib/debug/boot/vmlinux-5.4...
    # a BPF program (module "bpf_prog_<tag>_<name>")
    assert cloudflare["bpf_prog_2b956549c660136a_uni_l4lb"] == {FrameKind.KERNEL}
