"""HPCToolkit measurement directories: what ``hpcrun`` wrote, before ``hpcprof``.

A measurement directory (``hpctoolkit-<program>-measurements``, or any folder of
``*.hpcrun`` files) holds one ``.hpcrun`` file per CPU thread and GPU stream, the GPU
binaries that ran (``gpubins/<md5>.gpubin``, cubins for NVIDIA) and, once ``hpcstruct``
ran on the directory, the structure of each load module (``structs/*.hpcstruct``).

With ``hpcrun -e gpu=nvidia,pc``, each kernel launch has a ``GPUKernl`` placeholder node in
the CCT of the CPU thread that launched it; below it hang one node per sampled GPU
instruction: load module the gpubin, ip the instruction's offset in the gpubin file, and
its ``GINS`` (samples, weighted by the sampling period) and ``GINS:STL_*`` (the samples
stalled for each reason). The one child that comes from an unwind is the kernel's entry and
also carries the launch's ``GKER`` metrics. Here each instruction is resolved to its kernel,
source lines and SASS text: the lines (loops, inlined calls) from the gpubin's hpcstruct
when there is one, as ``hpcprof`` attributes them, otherwise from ``nvdisasm``; the SASS
from ``nvdisasm`` (:mod:`aiflame.symbolize.cubin`). Host frames come from the host
binaries' hpcstructs (procedures and inlined functions); an address in a module without
one is named ``module+0xoffset``.

Not done: ``hpcprof``'s reconstruction of the call sites of device functions that were not
inlined (their samples go under the kernel, then the function).
"""

from __future__ import annotations

import gzip
import os
import warnings
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from aiflame.errors import InputError
from aiflame.model import FrameKind, Profile, ProfileBuilder, SampleType, gpu
from aiflame.model.stacks import EMPTY_STACK
from aiflame.sources.gpu_samples.stacks import GpuStacks
from aiflame.sources.hpctoolkit import hpcrun_fmt as fmt
from aiflame.sources.hpctoolkit import hpcstruct
from aiflame.symbolize import cubin as cubins
from aiflame.symbolize.cxa import demangle_all
from aiflame.symbolize.elf import ElfError, ElfImage
from aiflame.symbolize.kinds import DELIMITER, KindGuesser

SUFFIX = ".hpcrun"
GPU_BINARY_SUFFIX = ".gpubin"

ALL_SAMPLES = "GINS"
ANY_STALL = "GINS:STL_ANY"
STALL_PREFIX = "GINS:STL_"
PERIOD = "GSAMP:PER (cyc)"
KERNEL_TIME = "GKER (sec)"
KERNEL_COUNT = "GKER:COUNT"
CPU_TIME = "CPUTIME (sec)"

# Placeholders that are no frame (hpcprof's roots and fences: the thread says it).
_SILENT = {"^Primary", "^Partial", "| Main  ", "| Thread", "NoActvty", "*Unnorm "}
GPU_KERNEL_PLACEHOLDERS = {"GPUKernl", "GPUTrace"}
# hpcprof's names for the others (src/lib/prof-lean/placeholders.c)
PLACEHOLDER_NAMES = {
    "GPUKernl": "<gpu kernel>",
    "GPUTrace": "<gpu kernel>",
    "GPUCp?2?": "<gpu copy>",
    "GPUCpH2D": "<gpu copyin>",
    "GPUCpD2H": "<gpu copyout>",
    "GPUAlloc": "<gpu alloc>",
    "GPUDelte": "<gpu delete>",
    "GPUMemst": "<gpu memset>",
    "GPU Sync": "<gpu sync>",
    "OMP Idle": "<omp idle>",
    "OMPOvrHd": "<omp overhead>",
    "OMPBarrW": "<omp barrier wait>",
    "OMPTaskW": "<omp task wait>",
    "OMPMtexW": "<omp mutex wait>",
    "OMTAlloc": "<omp tgt alloc>",
    "OMTDelte": "<omp tgt delete>",
    "OMTCpIn ": "<omp tgt copyin>",
    "OMTCpOut": "<omp tgt copyout>",
    "OMTKernl": "<omp tgt kernel>",
    "OMPUresv": "<omp region unresolved>",
}
# lm ids of hpcrun's outlined GPU range trees (hpcprof's hpcrun4.cpp reads them)
_RANGE_TREE_MODULES = {65531, 65532, 65533}


def is_measurement_dir(path: str) -> bool:
    if not os.path.isdir(path):
        return False
    try:
        return any(n.endswith((SUFFIX, SUFFIX + ".gz")) for n in os.listdir(path))
    except OSError:
        return False


def beside_database(database: str) -> str | None:
    """The measurement directory a database was most likely made from: ``X-measurements``
    for hpcprof's ``X-database``, ``X.m`` for ``X.d``, in the same folder."""
    folder, name = os.path.split(os.path.abspath(database.rstrip("/")))
    candidates = []
    if name.endswith("-database"):
        candidates.append(name[: -len("-database")] + "-measurements")
    stem, ext = os.path.splitext(name)
    if ext in (".d", ".db"):
        candidates.append(stem + ".m")
    for c in candidates:
        path = os.path.join(folder, c)
        if is_measurement_dir(path):
            return path
    return None


# -- one thread's CCT -----------------------------------------------------------------------


@dataclass
class Thread:
    """One ``.hpcrun`` file: its nodes by id and the values each node carries."""

    path: str
    file: fmt.HpcrunFile
    labels: dict[str, str]
    parent: dict[int, int]
    module: dict[int, int]
    ip: dict[int, int]
    unwound: dict[int, bool]
    children: dict[int, list[int]] = field(default_factory=dict)

    def values(self, names: set[str]) -> dict[str, dict[int, float]]:
        """metric name -> {node: value}, each value multiplied by its metric's period (as
        hpcprof does)."""
        f = self.file
        out: dict[str, dict[int, float]] = {}
        for index, m in enumerate(f.metrics):
            if m.name not in names:
                continue
            sel = f.value_metric == index
            if not np.any(sel):
                continue
            per: dict[int, float] = {}
            for node, v in zip(f.value_node[sel].tolist(), f.value[sel].tolist(), strict=True):
                per[node] = per.get(node, 0.0) + v * m.period
            out[m.name] = per
        return out

    def path_to(self, node: int) -> list[int]:
        """The nodes from the root down to ``node``."""
        out = []
        seen = set()
        while node in self.parent and node not in seen:
            seen.add(node)
            out.append(node)
            node = self.parent[node]
        out.reverse()
        return out


def _read_thread(path: str) -> Thread:
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                data = f.read()
        else:
            with open(path, "rb") as f:
                data = f.read()
    except (OSError, EOFError) as e:
        raise InputError(path, f"cannot read: {e}") from None
    try:
        run = fmt.read_hpcrun(data)
    except fmt.FormatError as e:
        raise InputError(path, str(e)) from None
    nodes = run.nodes
    ids = nodes["id"].tolist()
    t = Thread(
        path=path,
        file=run,
        labels={k.lower(): str(logical) for k, _, logical in run.id_tuple if k not in ("NODE",)},
        parent=dict(zip(ids, nodes["parent"].tolist(), strict=True)),
        module=dict(zip(ids, nodes["module"].tolist(), strict=True)),
        ip=dict(zip(ids, nodes["ip"].tolist(), strict=True)),
        unwound=dict(zip(ids, nodes["unwound"].tolist(), strict=True)),
    )
    for node, parent in t.parent.items():
        if parent:
            t.children.setdefault(parent, []).append(node)
    if _RANGE_TREE_MODULES & set(t.module.values()):
        raise InputError(
            path,
            "GPU samples in outlined range trees are not read yet (give the database "
            "hpcprof made of these measurements)",
        )
    return t


# -- GPU binaries ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GpuPc:
    """What one sampled GPU instruction is: its function (``procedure``, pretty name with
    its file and line), the source lines above it outermost first (``("loop", file, line)``
    or ``("line", file, line)``), its SASS text and its offset in the function."""

    function: tuple[str, str, int] | None  # (name, file, line)
    lines: tuple[tuple[str, str, int], ...]
    text: str
    offset: int


class GpuBinary:
    """One gpubin: its functions (ELF ``.text.<name>`` sections, by file offset), its
    hpcstruct (lines, loops, inlined calls) and its SASS (nvdisasm), each where available."""

    def __init__(self, module: str, local: str | None, structure: hpcstruct.Structure | None):
        self.module = module  # the path hpcrun recorded (frames keep it)
        self.structure = structure
        self._starts: list[int] = []
        self._sections: list[tuple[int, int, str]] = []
        self.cubin: cubins.Cubin | None = None
        self._readable: dict[str, str] = {}
        self._memo: dict[int, GpuPc] = {}
        if local is None:
            return
        try:
            with open(local, "rb") as f:
                data = f.read()
            image = ElfImage(data, local)
            names = image.section_names
        except (OSError, ElfError):  # unreadable or damaged: its PCs go unnamed
            return
        for i, sh in enumerate(image.sections):
            name = names[i] if i < len(names) else ""
            if name.startswith(".text.") and int(sh["size"]):
                off = int(sh["offset"])
                self._sections.append((off, off + int(sh["size"]), name[len(".text.") :]))
        self._sections.sort()
        self._starts = [s for s, _, _ in self._sections]
        self._readable = demangle_all(n for _, _, n in self._sections)
        if cubins.is_cubin(data) and cubins.find_nvdisasm():
            try:
                self.cubin = cubins.load_cubin(data, need_crc=False)
            except cubins.CubinError as e:
                self.cubin = None
                warnings.warn(f"{local}: {e}: no SASS, instructions named by offset", stacklevel=1)

    def _section(self, offset: int) -> tuple[int, str] | None:
        k = bisect_right(self._starts, offset) - 1
        if k >= 0 and offset < self._sections[k][1]:
            return self._sections[k][0], self._sections[k][2]
        return None

    def pc(self, offset: int) -> GpuPc:
        hit = self._memo.get(offset)
        if hit is None:
            hit = self._memo[offset] = self._resolve(offset)
        return hit

    def _resolve(self, offset: int) -> GpuPc:
        section = self._section(offset)
        scopes = self.structure.scopes(offset) if self.structure else None
        function = None
        rel = offset
        if section is not None:
            start, mangled = section
            rel = offset - start
            function = (self._readable.get(mangled, mangled), "", 0)
        text = ""
        nv_lines: tuple[tuple[str, int], ...] = ()
        if self.cubin is not None and section is not None:
            inst = self.cubin.instruction(section[1], rel)
            if inst is not None and inst.offset == rel:
                text, nv_lines = inst.text, inst.lines
        if scopes:
            head = scopes[0]
            function = (head.name, head.file, head.line)
            if section is None:
                entry = self._entry_of(head.name)
                rel = offset - entry if entry is not None else offset
            lines = tuple(_gpu_line(s) for s in scopes[1:] if s.kind != hpcstruct.INLINED)
        else:
            lines = tuple(("line", file, line) for file, line in nv_lines)
        return GpuPc(function, lines, text, rel)

    def _entry_of(self, name: str) -> int | None:
        for p in self.structure.procedures if self.structure else ():
            if p.name == name:
                return p.entry
        return None

    def function_at(self, offset: int) -> tuple[str, str, int] | None:
        """(name, file, line) of the function the instruction at ``offset`` is in."""
        return self.pc(offset).function


def _gpu_line(s: hpcstruct.Scope) -> tuple[str, str, int]:
    return ("loop" if s.kind == hpcstruct.LOOP else "line", s.file, s.line)


# -- the directory --------------------------------------------------------------------------


class Measurements:
    """The ``.hpcrun`` files of a measurement directory (or one such file) with the
    structure files and GPU binaries beside them."""

    def __init__(self, path: str) -> None:
        self.path = path
        if os.path.isdir(path):
            folder = path
            names = sorted(n for n in os.listdir(path) if n.endswith((SUFFIX, SUFFIX + ".gz")))
            files = [os.path.join(path, n) for n in names]
        else:
            folder = os.path.dirname(path) or "."
            files = [path]
        if not files:
            raise InputError(path, "no .hpcrun files in the measurement directory")
        self.folder = folder
        self.threads = [_read_thread(f) for f in files]
        self.program = self.threads[0].file.header.get("program-name", "")
        self._struct_files: dict[str, str] | None = None  # module file name -> hpcstruct
        self._structs: dict[str, hpcstruct.Structure | None] = {}
        self._binaries: dict[str, GpuBinary] = {}

    def _find_structs(self) -> dict[str, str]:
        """hpcstruct files by the file name of their module (``libcuda.so.530.30.02`` for
        ``libcuda.so.530.30.02.hpcstruct``, ``<md5>.gpubin`` for
        ``<md5>.gpubin-gpucfg-yes.hpcstruct``); parsed when a node of theirs is named."""
        out: dict[str, str] = {}
        folder = os.path.join(self.folder, "structs")
        if not os.path.isdir(folder):
            return out
        for name in sorted(os.listdir(folder)):
            stem = name.removesuffix(".gz")
            if not stem.endswith(".hpcstruct"):
                continue
            stem = stem.removesuffix(".hpcstruct")
            if GPU_BINARY_SUFFIX + "-" in stem:  # hpcstruct's -gpucfg-yes/-no variants
                stem = stem.split(GPU_BINARY_SUFFIX + "-", 1)[0] + GPU_BINARY_SUFFIX
            out.setdefault(stem, os.path.join(folder, name))
        return out

    def structure(self, module: str) -> hpcstruct.Structure | None:
        base = os.path.basename(module)
        if base in self._structs:
            return self._structs[base]
        if self._struct_files is None:
            self._struct_files = self._find_structs()
        found = None
        path = self._struct_files.get(base)
        if path is not None:
            try:
                modules = hpcstruct.read_structure(path)
            except hpcstruct.StructError as e:
                raise InputError(path, str(e)) from None
            found = next((s for s in modules if s.module == module), None)
            found = found or (modules[0] if modules else None)
        self._structs[base] = found
        return found

    def gpu_binary(self, module: str) -> GpuBinary:
        hit = self._binaries.get(module)
        if hit is None:
            local = os.path.join(self.folder, "gpubins", os.path.basename(module))
            if not os.path.isfile(local):
                local = os.path.join(self.folder, os.path.basename(module))
            hit = self._binaries[module] = GpuBinary(
                module, local if os.path.isfile(local) else None, self.structure(module)
            )
        return hit


def is_gpu_binary(module: str) -> bool:
    return module.endswith(GPU_BINARY_SUFFIX)


# -- stacks ---------------------------------------------------------------------------------

Kernel = tuple[str, str, int] | None  # (name, file, line) of a kernel, None if unknown


def stall_parts(total: float, stalls: dict[str, float], none: str) -> list[tuple[str, float]]:
    """A sample count split by reason; what no reason claims was issued (``none``)."""
    parts = [(name, v) for name, v in stalls.items() if v > 0]
    rest = total - sum(v for _, v in parts)
    if rest > 1e-9 * max(total, 1.0):
        parts.append((none, rest))
    return parts


class StackMaker:
    """Frames and stacks of one measurement directory's nodes, in a ProfileBuilder (shared
    with the database importer when both are read)."""

    def __init__(self, meas: Measurements, builder: ProfileBuilder) -> None:
        self.meas = meas
        self.b = builder
        self.gpu = GpuStacks(builder)
        self._host: dict[tuple[int, int], int] = {}
        self._kinds = KindGuesser()

    # -- host ------------------------------------------------------------------------------
    def host_frames(self, t: Thread, node: int) -> list[int]:
        module, ip = t.module[node], t.ip[node]
        if module == fmt.PLACEHOLDER_MODULE:
            ph = fmt.placeholder_name(ip)
            if ph in _SILENT:
                return []
            if ph in GPU_KERNEL_PLACEHOLDERS:
                return [self.b.frame(DELIMITER, FrameKind.DELIMITER)]
            name = PLACEHOLDER_NAMES.get(ph, f"<{ph.strip().lower()}>")
            return [self.b.frame(name, self._kinds(name))]
        path = t.file.load_modules.get(module, f"load module {module}")
        s = self.meas.structure(path)
        scopes = s.scopes(ip) if s is not None else None
        if not scopes:
            name = f"{os.path.basename(path)}+{ip:#x}"
            return [self.b.frame(name, FrameKind.NATIVE, module=path, address=ip)]
        return [
            self.b.frame(sc.name, self._kinds(sc.name), sc.file, sc.line, path)
            for sc in scopes
            if sc.kind in (hpcstruct.PROCEDURE, hpcstruct.INLINED) and sc.name
        ]

    def host_names(self, t: Thread, node: int) -> list[str | None]:
        """Per host node on the path to ``node``: the name of the function it is in (the
        procedure hpcstruct gives, a placeholder's name), None where unknown; fences and
        roots are left out."""
        out: list[str | None] = []
        for n in t.path_to(node):
            module, ip = t.module[n], t.ip[n]
            if module == fmt.PLACEHOLDER_MODULE:
                ph = fmt.placeholder_name(ip)
                if ph not in _SILENT:
                    out.append(PLACEHOLDER_NAMES.get(ph, f"<{ph.strip().lower()}>"))
                continue
            s = self.meas.structure(t.file.load_modules.get(module, ""))
            scopes = s.scopes(ip) if s is not None else None
            out.append(scopes[0].name if scopes else None)
        return out

    def host_stack(self, ti: int, t: Thread, node: int) -> int:
        """Stack of a host node (or placeholder), memoized from its closest built ancestor."""
        key = (ti, node)
        hit = self._host.get(key)
        if hit is not None:
            return hit
        todo = []
        while key not in self._host and node in t.parent:
            todo.append(node)
            node = t.parent[node]
            key = (ti, node)
        sid = self._host.get(key, EMPTY_STACK)
        for n in reversed(todo):
            for f in self.host_frames(t, n):
                sid = self.b.stacks.intern((f,), sid)
            self._host[(ti, n)] = sid
        return sid

    # -- GPU -------------------------------------------------------------------------------
    def kernel_of(self, t: Thread, placeholder: int, binary: GpuBinary, pc: int) -> Kernel:
        """The launched kernel (name, file, line) of a sample: the function of the
        placeholder's unwound child (the kernel's entry), else that of the PC itself."""
        for child in t.children.get(placeholder, ()):
            if t.unwound.get(child):
                path = t.file.load_modules.get(t.module[child], "")
                if is_gpu_binary(path):
                    found = self.meas.gpu_binary(path).function_at(t.ip[child])
                    if found is not None:
                        return found
        return binary.function_at(pc)

    def kernel_frame(self, binary: GpuBinary, function: Kernel) -> int:
        if function is None:
            name = f"[kernel in {os.path.basename(binary.module)}]"
            return self.b.frame(name, FrameKind.GPU_KERNEL, module=binary.module)
        name, file, line = function
        return self.b.frame(name, FrameKind.GPU_KERNEL, file, line, binary.module)

    def pc_stack(self, kernel_sid: int, kernel: Kernel, binary: GpuBinary, pc: int) -> int:
        """``kernel ; [device function ;] lines ; instruction`` above the kernel's stack."""
        info = binary.pc(pc)
        sid = kernel_sid
        if info.function is not None and kernel is not None and info.function[0] != kernel[0]:
            sid = self.b.stacks.intern((self.kernel_frame(binary, info.function),), sid)
        for kind, file, line in info.lines:
            if kind == "loop":
                sid = self.gpu.loop(sid, file, line)
            else:
                sid = self.gpu.lines(sid, ((file, line),))
        return self.gpu.instruction(sid, info.text, info.offset, binary.module)


# (placeholder node, GPU binary, kernel) -> the stack of the kernel's frame
KernelBase = Callable[[int, GpuBinary, Kernel], int]


def gpu_sample_nodes(t: Thread, gins: dict[int, float]) -> list[tuple[int, str]]:
    """The nodes of ``t`` with GPU instruction samples, with their gpubin's path."""
    out = []
    for node in sorted(gins):
        path = t.file.load_modules.get(t.module.get(node, -1), "")
        if is_gpu_binary(path):
            out.append((node, path))
    return out


def add_pc_samples(
    maker: StackMaker,
    t: Thread,
    vals: dict[str, dict[int, float]],
    stall_names: list[str],
    period: float,
    column: int,
    base: KernelBase,
) -> float:
    """Add the GPU instruction samples of one thread (counts: ``GINS`` / period), each
    split by stall reason; returns the ``GINS`` added (weighted, as in the file)."""
    gins = vals.get(ALL_SAMPLES, {})
    stalls = {n: vals[n] for n in stall_names if n in vals}
    scale = 1.0 / period if period else 1.0
    added = 0.0
    for node, path in gpu_sample_nodes(t, gins):
        binary = maker.meas.gpu_binary(path)
        pc = t.ip[node]
        placeholder = t.parent.get(node, 0)
        kernel = maker.kernel_of(t, placeholder, binary, pc)
        sid = maker.pc_stack(base(placeholder, binary, kernel), kernel, binary, pc)
        total = gins[node]
        added += total
        own = {n[len("GINS:") :]: v.get(node, 0.0) for n, v in stalls.items()}
        for reason, value in stall_parts(total, own, NO_STALL):
            labels = maker.gpu.labels(reason, t.labels)
            maker.b.add_value(maker.gpu.stall(sid, reason), column, value * scale, labels)
    return added


NO_STALL = "STL_NONE"
GPU_TIME = SampleType("gpu-time", "nanoseconds")
KERNEL_COUNT_TYPE = SampleType("kernel-count", "count")
CPU_TIME_TYPE = SampleType("cpu-time", "nanoseconds")
# metric -> (sample type, factor)
OTHER_METRICS = {
    KERNEL_TIME: (GPU_TIME, 1e9),
    KERNEL_COUNT: (KERNEL_COUNT_TYPE, 1.0),
    CPU_TIME: (CPU_TIME_TYPE, 1e9),
}


def metric_names(meas: Measurements) -> set[str]:
    return {m.name for t in meas.threads for m in t.file.metrics}


def sample_period(meas: Measurements) -> float:
    """``GSAMP:PER``: the GPU cycles one PC sample stands for (hpcrun records it per
    kernel; the largest is kept, as the database importer does)."""
    best = 0.0
    for t in meas.threads:
        for v in t.values({PERIOD}).get(PERIOD, {}).values():
            best = max(best, v)
    return best


def build_profile(meas: Measurements) -> Profile:
    """The profile of a measurement directory alone: host stacks, ``-``, then the GPU
    kernels, their lines and instructions with the stall reasons of their samples."""
    b = ProfileBuilder([])
    maker = StackMaker(meas, b)
    names = metric_names(meas)
    stall_names = sorted(n for n in names if n.startswith(STALL_PREFIX) and n != ANY_STALL)
    wanted = {ALL_SAMPLES, *stall_names, *OTHER_METRICS}
    values = [t.values(wanted) for t in meas.threads]
    present = {name for vals in values for name, per in vals.items() if per}
    if ALL_SAMPLES in present:
        b.add_type(gpu.GPU_SAMPLES)
    for metric, (st, _) in OTHER_METRICS.items():
        if metric in present:
            b.add_type(st)
    if not b.sample_types:
        raise InputError(meas.path, "no GPU sample, kernel or CPU time values to show")
    col = {t.name: i for i, t in enumerate(b.sample_types)}
    period = sample_period(meas)
    for ti, (t, vals) in enumerate(zip(meas.threads, values, strict=True)):

        def base(placeholder: int, binary: GpuBinary, kernel: Kernel, ti=ti, t=t) -> int:
            frame = maker.kernel_frame(binary, kernel)
            return b.stacks.intern((frame,), maker.host_stack(ti, t, placeholder))

        if ALL_SAMPLES in vals:
            add_pc_samples(maker, t, vals, stall_names, period, col[gpu.GPU_SAMPLES.name], base)
        labels = b.labels(t.labels)
        for metric, (st, factor) in OTHER_METRICS.items():
            for node, value in sorted(vals.get(metric, {}).items()):
                path = t.file.load_modules.get(t.module[node], "")
                if is_gpu_binary(path):  # a launch's metric: on its kernel
                    binary = maker.meas.gpu_binary(path)
                    placeholder = t.parent.get(node, 0)
                    sid = base(
                        placeholder, binary, maker.kernel_of(t, placeholder, binary, t.ip[node])
                    )
                else:
                    sid = maker.host_stack(ti, t, node)
                b.add_value(sid, col[st.name], value * factor, labels)
    b.meta["default_type"] = 0
    if period:
        b.meta[gpu.META_PERIOD] = period
        b.meta[gpu.META_PERIOD_UNIT] = "cycles"
    profile = b.build()
    if meas.program:
        profile.meta.setdefault("title", meas.program)
    return profile
