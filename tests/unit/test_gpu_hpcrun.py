"""hpcrun measurement directories: the ``.hpcrun`` reader, and GPU samples per instruction,
on HPCToolkit's own recording of loops.cu with CUPTI PC sampling (sm_80; see
tests/data/gpu_instructions/PROVENANCE.md).

Expected values are computed here without the importer: from the ``.hpcrun`` bytes by a
few lines of struct unpacking, from ``profile.db`` with the database reader, from
``nvdisasm -json -g`` and from the hpcstruct's text.
"""

from __future__ import annotations

import gzip
import itertools
import json
import os
import re
import shutil
import struct
import subprocess
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from aiflame.cli.main import main
from aiflame.errors import InputError
from aiflame.model import FrameKind, gpu
from aiflame.sources import load
from aiflame.sources.hpctoolkit import db as hpctoolkit_db
from aiflame.sources.hpctoolkit import hpcrun_fmt
from aiflame.sources.registry import load_many
from aiflame.symbolize import cubin as cb

DATA = Path(__file__).parents[1] / "data" / "gpu_instructions" / "hpctoolkit"
DB = DATA / "loops-cuda-nvidiapc-t.d"
MEAS = DATA / "loops-cuda-nvidiapc-t.m"
CPU = MEAS / "testmeas-loops-cuda-000000-000-590a0501-33542-0.hpcrun"
STREAM = MEAS / "testmeas-loops-cuda-000000-500-590a0501-33542-0.hpcrun"
GPUBIN = MEAS / "gpubins" / "82578c6c35b16bf3c6712d8cc5175793.gpubin"
GPU_STRUCT = MEAS / "structs" / "82578c6c35b16bf3c6712d8cc5175793.gpubin-gpucfg-yes.hpcstruct"
TEXT_START = 0x2C00  # file offset of .text._Z8kernmainv in the gpubin (readelf -S)
PERIOD = 4096
HOST = (
    "main",
    "kernmain",
    "__device_stub__Z8kernmainv()",
    "cudaLaunchKernel<char>",
    "cudaLaunchKernel",
    "-",
    "kernmain()",
)

needs_nvdisasm = pytest.mark.skipif(cb.find_nvdisasm() is None, reason="nvdisasm not installed")


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cb._memory.clear()


# -- expectations, computed without the code under test ---------------------------------------


def raw_values(path: Path) -> dict[int, dict[str, float]]:
    """node id -> {metric name: value as stored} from the .hpcrun footer's sections."""
    d = path.read_bytes()
    f = struct.unpack_from(">14Q", d, len(d) - 112)
    p = f[6] + 4  # metric table
    names, real = [], []
    for _ in range(struct.unpack_from(">I", d, f[6])[0]):
        n = struct.unpack_from(">I", d, p)[0]
        names.append(d[p + 4 : p + 4 + n].decode())
        p += 4 + n
        p += 4 + struct.unpack_from(">I", d, p)[0]  # description
        real.append(d[p + 2] == 2)
        p += 16 + 8
        for _ in range(2):  # formula, format
            p += 4 + struct.unpack_from(">I", d, p)[0]
        p += 20
    p = f[10]
    p += 2 + 18 * struct.unpack_from(">H", d, p)[0]  # id tuple
    nvals, nnodes = struct.unpack_from(">QI", d, p)
    p += 12
    pairs = [struct.unpack_from(">QH", d, p + 10 * i) for i in range(nvals)]
    idx = [struct.unpack_from(">IQ", d, p + 10 * nvals + 12 * i) for i in range(nnodes + 1)]
    out: dict[int, dict[str, float]] = {}
    for (node, a), (_, b) in itertools.pairwise(idx):
        for bits, m in pairs[a:b]:
            v = struct.unpack(">d", struct.pack(">Q", bits))[0] if real[m] else float(bits)
            out.setdefault(node, {})[names[m]] = v
    return out


def raw_gpu_samples() -> dict[int, dict[str, float]]:
    """file offset in the gpubin -> {GINS / GINS:STL_*: weighted samples}, from the CPU
    thread's nodes in load module 26 (the gpubin: see its load map)."""
    run = hpcrun_fmt.read_hpcrun(CPU.read_bytes())
    assert run.load_modules[26].endswith("82578c6c35b16bf3c6712d8cc5175793.gpubin")
    ip = {int(n["id"]): int(n["ip"]) for n in run.nodes if n["module"] == 26}
    out: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for node, vals in raw_values(CPU).items():
        if node in ip:
            for k, v in vals.items():
                if k == "GINS" or k.startswith("GINS:STL_"):
                    out[ip[node]][k] += v
    return out


def database_totals() -> tuple[dict[tuple[str, str], float], dict[tuple[str, ...], float]]:
    """From profile.db (HPCToolkit's own attribution), inclusive values: {(kernel, metric):
    weighted value} of each kernel's contexts, and {path of source lines: GINS} of each
    line context with no listed context below (hpcprof elides instruction contexts from
    meta.db; their values are inside their line's)."""
    meta = hpctoolkit_db.read_meta((DB / "meta.db").read_bytes())
    profiles = hpctoolkit_db.read_profiles((DB / "profile.db").read_bytes(), meta.id_names)
    ids = {m.execution_id: m.name for m in meta.metrics if m.name.startswith("GINS")}
    has_children = {c.parent for c in meta.contexts.values()}

    def name(ctx):
        c = meta.contexts.get(ctx)
        return meta.functions[c.function].name if c is not None and c.function >= 0 else ""

    def source_path(ctx):
        """(kernel, source line names) of a GPU context, None on the host side."""
        names = []
        while ctx in meta.contexts:
            c = meta.contexts[ctx]
            if name(c.parent) == "<gpu kernel>":
                return name(ctx), tuple(reversed(names))
            base = os.path.basename(meta.files[c.file]) if c.file >= 0 else ""
            if c.lexical_type == hpctoolkit_db.LEX_LOOP:
                names.append(f"loop at {base}:{c.line}")
            elif c.lexical_type == hpctoolkit_db.LEX_LINE:
                names.append(f"{base}:{c.line}")
            ctx = c.parent
        return None

    totals: dict[tuple[str, str], float] = defaultdict(float)
    lines: dict[tuple[str, ...], float] = defaultdict(float)
    for p in profiles:
        if p.is_summary:
            continue
        for i, ctx in enumerate(p.ctx_ids.tolist()):
            for k in range(p.ctx_start[i], p.ctx_start[i + 1]):
                metric = ids.get(int(p.metric[k]))
                where = source_path(ctx) if metric else None
                if where is None:
                    continue
                kernel, path = where
                if not path:  # the kernel's own context: all of its samples
                    totals[(kernel, metric)] += float(p.value[k])
                elif metric == "GINS" and ctx not in has_children:
                    lines[path] += float(p.value[k])
    return totals, lines


def struct_lines() -> list[tuple[int, int, int]]:
    """(start, end, line) of every statement of the gpubin's hpcstruct, from its text."""
    out = []
    for line, ranges in re.findall(r'<S i="\d+" l="(\d+)" v="\{([^}]*)\}"', GPU_STRUCT.read_text()):
        for a, b in re.findall(r"\[(0x[0-9a-f]+)-(0x[0-9a-f]+)\)", ranges):
            out.append((int(a, 16), int(b, 16), int(line)))
    return out


# -- the reader -------------------------------------------------------------------------------


def test_reader_on_both_threads():
    cpu = hpcrun_fmt.read_hpcrun(CPU.read_bytes())
    assert cpu.version == "04.00"
    assert cpu.header["program-name"] == "testmeas-loops-cuda"
    assert cpu.header["thread-id"] == "0"
    assert [k for k, _, _ in cpu.id_tuple] == ["NODE", "THREAD"]
    assert len(cpu.load_modules) == 26
    assert cpu.load_modules[1].endswith("/testmeas-loops-cuda")
    names = [m.name for m in cpu.metrics]
    assert len(names) == 93 and names[3] == "GINS" and names[31] == "GKER (sec)"
    assert not cpu.metrics[3].is_real and cpu.metrics[31].is_real
    assert cpu.metrics[31].move_to_caller and not cpu.metrics[3].move_to_caller
    assert cpu.metrics[7].formula == "(#5/#5) + (#6/#5)"
    assert len(cpu.nodes) == 139
    phs = {hpcrun_fmt.placeholder_name(int(n["ip"])) for n in cpu.nodes if n["module"] == 0}
    assert phs == {"^Primary", "| Main  ", "GPUKernl", "GPUTrace"}
    gpu_nodes = cpu.nodes[cpu.nodes["module"] == 26]
    assert int((~gpu_nodes["unwound"]).sum()) == len(gpu_nodes) - 2  # entries unwound
    # every value as the bytes say
    raw = raw_values(CPU)
    got: dict[int, dict[str, float]] = defaultdict(dict)
    for node, m, v in zip(cpu.value_node, cpu.value_metric, cpu.value, strict=True):
        got[int(node)][names[int(m)]] = float(v)
    assert got == raw
    assert raw[57]["GKER (sec)"] == pytest.approx(0.021072862) and raw[57]["GKER:COUNT"] == 100

    stream = hpcrun_fmt.read_hpcrun(STREAM.read_bytes())
    assert stream.header["thread-id"] == "500"
    assert [k for k, _, _ in stream.id_tuple] == ["NODE", "GPUCONTEXT", "GPUSTREAM"]
    assert len(stream.nodes) == 8 and len(stream.value) == 0


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: d[:-50], "incomplete"),
        (lambda d: d[:18] + b"03.00" + d[23:], "format 03.00"),
        (lambda d: d[:100], "truncated"),
        (lambda d: d[: len(d) - 112] + bytes(104) + d[-8:], "CCT|truncated|metric"),
    ],
)
def test_damaged_hpcrun_files_are_one_clear_error(tmp_path, capsys, damage, message):
    meas = tmp_path / "x.m"
    meas.mkdir()
    (meas / CPU.name).write_bytes(damage(CPU.read_bytes()))
    with pytest.raises(InputError, match=message):
        load(str(meas))
    out = tmp_path / "x.html"
    assert main(["flamegraph", str(meas), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and CPU.name in err
    assert not out.exists()


# -- GPU samples per instruction ----------------------------------------------------------


@pytest.fixture(scope="module")
def measured():
    return load(str(MEAS))


def samples_by_pc(profile) -> dict[int, dict[str, float]]:
    """instruction offset -> {stall reason: samples}, checking each sample's stack."""
    col = profile.type_index("gpu-samples")
    out: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for s in np.flatnonzero(profile.values[:, col]).tolist():
        frames = profile.stack_frames(int(profile.sample_stack[s]))
        inst = frames[-2]
        assert inst.kind == FrameKind.GPU_INSTRUCTION
        assert frames[-1].kind == FrameKind.GPU_STALL
        assert frames[-1].name == profile.labels_of(s)[gpu.STALL_LABEL]
        assert inst.name.endswith(f"+{inst.address:#x}")
        out[inst.address][frames[-1].name] += float(profile.values[s, col])
    return out


@pytest.mark.parametrize("how", ["measurements", "database and measurements"])
def test_totals_per_kernel_and_stall_equal_hpctoolkits(how, measured):
    profile = measured if how == "measurements" else load_many([str(DB), str(MEAS)])
    totals, _ = database_totals()
    raw = raw_gpu_samples()
    col = profile.type_index("gpu-samples")
    ours: dict[tuple[str, str], float] = defaultdict(float)
    for s in np.flatnonzero(profile.values[:, col]).tolist():
        frames = profile.stack_frames(int(profile.sample_stack[s]))
        kernel = next(f.name for f in frames if f.kind == FrameKind.GPU_KERNEL)
        reason = profile.labels_of(s)[gpu.STALL_LABEL]
        ours[(kernel, "GINS")] += profile.values[s, col] * PERIOD
        if reason != "STL_NONE":
            ours[(kernel, "GINS:" + reason)] += profile.values[s, col] * PERIOD
            ours[(kernel, "GINS:STL_ANY")] += profile.values[s, col] * PERIOD
    assert set(ours) == {k for k, v in totals.items() if v}
    for key, value in totals.items():
        assert ours.get(key, 0.0) == pytest.approx(value), key
    assert totals[("kernmain()", "GINS")] == 2_691_330_048  # 657,063 samples
    # the same from the .hpcrun values
    for metric in ("GINS", "GINS:STL_ANY", "GINS:STL_IDEP", "GINS:STL_GMEM", "GINS:STL_IFET"):
        assert sum(v.get(metric, 0) for v in raw.values()) == totals[("kernmain()", metric)]
    assert profile.meta[gpu.META_PERIOD] == PERIOD
    assert profile.totals()[profile.type_index("kernel-count")] == 100
    assert profile.totals()[profile.type_index("gpu-time")] == pytest.approx(21_072_862)


def test_each_sample_under_its_instruction(measured):
    raw = raw_gpu_samples()
    got = samples_by_pc(measured)
    assert sorted(got) == sorted(pc - TEXT_START for pc in raw)
    for pc, vals in raw.items():
        mine = got[pc - TEXT_START]
        assert sum(mine.values()) * PERIOD == vals["GINS"], hex(pc)
        for metric, v in vals.items():
            if metric.startswith("GINS:STL_") and metric != "GINS:STL_ANY":
                assert mine[metric[5:]] * PERIOD == v, (hex(pc), metric)
        issued = vals["GINS"] - vals.get("GINS:STL_ANY", 0)
        assert mine.get("STL_NONE", 0) * PERIOD == issued


@needs_nvdisasm
def test_instructions_and_lines_are_nvdisasms_and_hpcstructs(measured):
    out = subprocess.run(
        [cb.find_nvdisasm(), "-json", "-g", str(GPUBIN)], capture_output=True, check=True
    )
    [fn] = json.loads(out.stdout)[1]
    text, line, nv_line = {}, None, {}
    for i, ins in enumerate(fn["sass-instructions"]):
        text[16 * i] = " ".join(x for x in (ins.get("predicate"), ins["opcode"]) if x)
        line = ins.get("source-line", line)  # named only where it changes
        nv_line[16 * i] = line
    statements = struct_lines()
    checked = 0
    col = measured.type_index("gpu-samples")
    for s in np.flatnonzero(measured.values[:, col]).tolist():
        frames = measured.stack_frames(int(measured.sample_stack[s]))
        assert tuple(f.name for f in frames[: len(HOST)]) == HOST
        inst = frames[-2]
        assert inst.name.split(" ")[0] == text[inst.address].split(" ")[0], inst.name
        assert inst.module.endswith(GPUBIN.name)
        sources = [f for f in frames if f.kind == FrameKind.GPU_SOURCE]
        innermost = sources[-1]
        assert not innermost.name.startswith("loop at")
        assert innermost.line == nv_line[inst.address], hex(inst.address)
        [st] = [ln for a, b, ln in statements if a <= TEXT_START + inst.address < b]
        assert innermost.line == st
        assert innermost.name == f"loops.cu:{st}" and innermost.file.endswith("meas/loops.cu")
        checked += 1
    assert checked >= 140  # every sampled instruction, under each of its stall reasons


def test_lines_loops_and_inline_levels_equal_the_databases(measured):
    """Per path of lines, the samples of its instructions are the GINS HPCToolkit put on
    that line context; the inlined func2 adds the call-site level inside the loop."""
    _, db_lines = database_totals()
    col = measured.type_index("gpu-samples")
    per_path: dict[tuple[str, ...], float] = defaultdict(float)
    for s in np.flatnonzero(measured.values[:, col]).tolist():
        frames = measured.stack_frames(int(measured.sample_stack[s]))
        sources = tuple(f.name for f in frames if f.kind == FrameKind.GPU_SOURCE)
        per_path[sources] += measured.values[s, col] * PERIOD
    assert (
        set(per_path)
        == set(db_lines)
        == {
            ("loops.cu:19",),
            ("loops.cu:20",),
            ("loop at loops.cu:21", "loops.cu:20"),
            ("loop at loops.cu:21", "loops.cu:21"),
            ("loop at loops.cu:21", "loops.cu:31", "loops.cu:16"),
            ("loops.cu:33",),
        }
    )
    for path, value in db_lines.items():
        assert per_path[path] == pytest.approx(value), path
    assert db_lines[("loop at loops.cu:21", "loops.cu:31", "loops.cu:16")] == 2_212_974_592


def test_host_stack_above_the_kernel(measured):
    stacks = {tuple(measured.stack_names(int(s))) for s in np.unique(measured.sample_stack)}
    assert all(s[: len(HOST)] == HOST for s in stacks)
    frames = measured.stack_frames(int(measured.sample_stack[0]))
    kinds = [f.kind for f in frames[: len(HOST)]]
    assert kinds[4] == FrameKind.RUNTIME
    assert kinds[5] == FrameKind.DELIMITER
    assert kinds[6] == FrameKind.GPU_KERNEL
    assert frames[0].file.endswith("loops.cu") and frames[0].line == 35  # main, per hpcstruct


# -- the database beside its measurements ----------------------------------------------------


def copy_database(tmp_path: Path, name: str = "run.d") -> Path:
    d = tmp_path / name
    d.mkdir()
    for n in ("meta.db", "profile.db"):
        shutil.copy(DB / n, d / n)
    return d


def test_database_alone_database_beside_and_both_given(tmp_path, measured):
    alone = load(str(copy_database(tmp_path)))
    assert "info:GPU instructions" not in alone.meta
    assert not any(
        f.kind == FrameKind.GPU_INSTRUCTION
        for s in np.unique(alone.sample_stack)
        for f in alone.stack_frames(int(s))
    )
    beside = load(str(DB))  # loops-cuda-nvidiapc-t.m is next to it
    both = load_many([str(copy_database(tmp_path, "elsewhere.d")), str(MEAS)])
    for p in (beside, both):
        assert "one sample per instruction" in p.meta["info:GPU instructions"]
        assert "hpcstruct" not in p.meta["info:GPU instructions"]  # every stack the db's
        assert samples_by_pc(p) == samples_by_pc(measured)
        assert p.totals() == pytest.approx(alone.totals())
        names = {tuple(p.stack_names(int(s))) for s in np.unique(p.sample_stack)}
        assert names == {
            tuple(measured.stack_names(int(s))) for s in np.unique(measured.sample_stack)
        }
    # hpcprof's naming: X-measurements beside X-database
    hp = tmp_path / "hp"
    hp.mkdir()
    copy_database(hp, "hpctoolkit-loops-database")
    shutil.copytree(MEAS, hp / "hpctoolkit-loops-measurements")
    assert "info:GPU instructions" in load(str(hp / "hpctoolkit-loops-database")).meta


def test_measurements_of_another_run(tmp_path, capsys):
    other = tmp_path / "other.m"
    other.mkdir()
    shutil.copy(STREAM, other / STREAM.name)  # a stream with no samples: not this run's
    db = copy_database(tmp_path)
    out = tmp_path / "x.html"
    assert main(["flamegraph", str(db), str(other), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not the measurements of this database" in err
    assert not out.exists()
    # found beside (not asked for): the database alone, and a note says why
    beside = tmp_path / "run.m"
    shutil.copytree(other, beside)
    p = load(str(db))
    assert "not read from" in p.meta["info:GPU instructions"]
    assert p.totals()[p.type_index("gpu-samples")] == 657_063


# -- what is missing -----------------------------------------------------------------------


def partial_copy(tmp_path: Path, drop: list[str]) -> Path:
    m = tmp_path / "part.m"
    shutil.copytree(MEAS, m)
    for rel in drop:
        os.remove(m / rel)
    return m


@needs_nvdisasm
def test_without_the_gpubins_hpcstruct_lines_come_from_nvdisasm(tmp_path, measured):
    m = partial_copy(tmp_path, [f"structs/{GPU_STRUCT.name}"])
    p = load(str(m))
    assert samples_by_pc(p) == samples_by_pc(measured)
    paths = set()
    col = p.type_index("gpu-samples")
    for s in np.flatnonzero(p.values[:, col]).tolist():
        frames = p.stack_frames(int(p.sample_stack[s]))
        paths.add(tuple(f.name for f in frames if f.kind == FrameKind.GPU_SOURCE))
        assert frames[6].name == "kernmain()"  # demangled from the ELF section
    assert ("loops.cu:31", "loops.cu:16") in paths  # nvdisasm's inline chain
    assert not any(n.startswith("loop at") for path in paths for n in path)


def test_without_nvdisasm_instructions_are_offsets(tmp_path, monkeypatch, measured):
    monkeypatch.setenv("AIFLAME_NVDISASM", str(tmp_path / "no-nvdisasm"))
    p = load(str(MEAS))
    assert samples_by_pc(p) == samples_by_pc(measured)
    names = {
        f.name
        for s in np.unique(p.sample_stack)
        for f in p.stack_frames(int(s))
        if f.kind == FrameKind.GPU_INSTRUCTION
    }
    assert "+0x180" in names and all(n.startswith("+0x") for n in names)


def test_without_the_host_hpcstruct_host_frames_are_offsets(tmp_path):
    m = partial_copy(tmp_path, ["structs/testmeas-loops-cuda.hpcstruct.gz"])
    p = load(str(m))
    stack = p.stack_names(int(p.sample_stack[0]))
    assert stack[:5] == [
        "testmeas-loops-cuda+0xae84",
        "testmeas-loops-cuda+0xb22e",
        "testmeas-loops-cuda+0x6ce61",
        "-",
        "kernmain()",
    ]


def test_one_hpcrun_file_and_the_cli(tmp_path):
    p = load(str(CPU))
    assert p.totals()[p.type_index("gpu-samples")] == 657_063
    out = tmp_path / "m.html"
    assert main(["flamegraph", str(MEAS), "-o", str(out)]) == 0
    assert out.stat().st_size > 1000


def test_cubins_say_their_sm():
    from aiflame.symbolize.cubin import cubin_sm

    assert cubin_sm(GPUBIN.read_bytes()) == 80  # the first CUDA ELF ABI: e_flags' low byte
    toys = DATA.parent
    assert cubin_sm((toys / "parca_otel_ebpf_profiler" / "toy.cubin").read_bytes()) == 75
    assert cubin_sm((toys / "parcagpu" / "pc_sample_toy.cubin").read_bytes()) == 121
    assert cubin_sm(b"\x7fELF not a cubin") is None


@needs_nvdisasm
def test_a_volta_cubin_says_which_nvdisasm_reads_it(tmp_path, capsys):
    """CUDA 13's nvdisasm refuses sm_70 (V100) cubins: the samples stay, by offset, and one
    warning says why and which nvdisasm would read them."""
    from aiflame.symbolize import cubin

    tool = cubin.find_nvdisasm()
    assert tool is not None
    if cubin._major_version(tool) < 13:
        pytest.skip(f"{tool} is older than CUDA 13 and reads sm_70 cubins")
    m = partial_copy(tmp_path, [f"structs/{GPU_STRUCT.name}"])
    gpubin = m / "gpubins" / GPUBIN.name
    data = bytearray(gpubin.read_bytes())
    flags = int.from_bytes(data[48:52], "little")
    data[48:52] = ((flags & ~0xFF) | 70).to_bytes(4, "little")  # the same code, for a V100
    gpubin.write_bytes(bytes(data))
    out = tmp_path / "v100.html"
    assert main(["flamegraph", str(m), "-o", str(out)]) == 0
    err = capsys.readouterr().err.splitlines()
    warning = [line for line in err if line.startswith("aiflame: warning:")]
    assert len(warning) == 1, err
    assert "sm_70 cubin" in warning[0] and "CUDA 12" in warning[0]
    assert "AIFLAME_NVDISASM" in warning[0] and GPUBIN.name in warning[0]
    with pytest.warns(UserWarning, match="sm_70 cubin"):
        p = load(str(m))
    instructions = {
        f.name
        for s in np.unique(p.sample_stack)
        for f in p.stack_frames(int(s))
        if f.kind == FrameKind.GPU_INSTRUCTION
    }
    assert instructions and all(n.startswith("+0x") for n in instructions)


def test_hpcstruct_names_left_mangled_are_demangled(tmp_path):
    """Inlined and procedure names that hpcstruct wrote mangled read as C++."""
    m = partial_copy(tmp_path, [])
    host = m / "structs" / "testmeas-loops-cuda.hpcstruct.gz"
    text = gzip.decompress(host.read_bytes()).decode()
    inlined = 'n="dim3::dim3(unsigned int, unsigned int, unsigned int)"'
    assert inlined in text
    host.write_bytes(gzip.compress(text.replace(inlined, 'n="_ZN4dim3C1Ejjj"').encode()))
    from aiflame.sources.hpctoolkit import hpcstruct

    names = {
        sc.name
        for s in hpcstruct.read_structure(str(host))
        for sc in s._scope  # every scope of the module's tree
        if sc.kind == hpcstruct.INLINED
    }
    assert "dim3::dim3(unsigned int, unsigned int, unsigned int)" in names
    assert not [n for n in names if n.startswith("_Z")]
