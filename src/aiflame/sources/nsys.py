"""Nsight Systems exports (``nsys export --type sqlite``): GPU time with full launch stacks.

Every kernel, memcpy and memset becomes one sample weighted by its GPU duration, on the
stack ``NVTX ranges -> CPU backtrace -> CUDA API call -> '-' -> kernel``: the API call is
found by correlation id within the same process, the NVTX ranges are those open on the
launching thread when the call started, and the CPU backtrace is the one nsys attached to
the call (``--cudabacktrace``). GPU work whose API call is not in the export is kept under
``[launch not in trace]``, so the total always equals the GPU activity time. CPU samples
(``--sample=cpu``) become a ``cpu-samples`` metric on the same kind of stacks.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import NamedTuple

from aiflame.errors import AiflameError, InputError
from aiflame.model import FrameKind, Profile, ProfileBuilder, SampleType
from aiflame.model.stacks import EMPTY_STACK
from aiflame.sources.inputs import GZIP_MAGIC, Input
from aiflame.sources.nsys_db import (
    SQLITE_MAGIC,
    NsysDB,
    file_has_nsys_tables,
    open_db,
    pid_of,
    process_key,
    tid_of,
)
from aiflame.sources.nsys_nvtx import THREAD_NAME_TYPE, NvtxIndex
from aiflame.sources.nsys_stacks import (
    CpuFrames,
    callchain_offset,
    callers_of_api,
    read_callchains,
)
from aiflame.symbolize.kinds import DELIMITER

FORMAT = "nsys"

GPU_TIME = SampleType("gpu-time", "nanoseconds")
KERNEL_COUNT = SampleType("kernel-count", "count")  # GPU activities: kernels, copies, sets
GPU_BYTES = SampleType("gpu-bytes", "bytes")  # bytes copied by memcpys / set by memsets
CPU_SAMPLES = SampleType("cpu-samples", "count")

LAUNCH_NOT_IN_TRACE = "[launch not in trace]"
KERNEL_NAMES = ("full", "short")

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
GRAPH = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"  # whole-graph activities (--cuda-graph-trace=graph)
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
GPU_TABLES = (KERNEL, MEMCPY, MEMSET, GRAPH)

_BACKTRACE_CLASS = 67  # TRACE_PROCESS_EVENT_CUDABACKTRACE: a stack for a call, not a call
# CUpti_ActivityMemcpyKind, for exports without ENUM_CUDA_MEMCPY_OPER.
_COPY_KINDS = ("Unknown", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA", "AtoD", "DtoA", "DtoD", "HtoH")
_COPY_KINDS += ("PtoP",)
_RANK = re.compile(r"\brank\s*[:=#]?\s*(\d+)", re.IGNORECASE)
_RANK_ENV = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK")
_RANK_ENV += ("SLURM_PROCID",)
_MARKERS = (b"CUPTI_ACTIVITY_KIND", b"NVTX_EVENTS", b"TARGET_INFO_", b"ANALYSIS_DETAILS")


def sniff(head: bytes, path: str) -> bool:
    if not head.startswith(SQLITE_MAGIC):
        return False
    if b"StringIds" in head and any(m in head for m in _MARKERS):
        return True
    if path == "-" or _starts_with(path, GZIP_MAGIC):
        return True  # cannot peek inside; load() says clearly if it is not an export
    return file_has_nsys_tables(path)


def _starts_with(path: str, magic: bytes) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(len(magic)) == magic
    except OSError:
        return False


def load(source: Input, kernel_names: str = "full", nvtx: bool = True, **_: object) -> Profile:
    """Options: ``kernel_names`` "full" (demangled, with arguments) or "short";
    ``nvtx=False`` leaves NVTX ranges out of the stacks."""
    if kernel_names not in KERNEL_NAMES:
        raise AiflameError(f"kernel_names must be one of {', '.join(KERNEL_NAMES)}")
    with open_db(source) as db:
        if not db.is_nsys_export():
            raise InputError(
                source.path, "SQLite database, but not an Nsight Systems export (no nsys tables)"
            )
        return _Importer(db, kernel_names, nvtx).run()


class _Call(NamedTuple):
    """One CUDA API row: the call itself, or the backtrace record nsys adds for it."""

    start: int
    end: int
    gtid: int
    name_id: int
    callchain: int | None
    is_backtrace: bool


class _Importer:
    def __init__(self, db: NsysDB, kernel_names: str, nvtx: bool) -> None:
        self.db = db
        self.kernel_names = kernel_names
        self.strings = db.strings
        has_gpu = any(db.has_rows(t) for t in GPU_TABLES)
        has_cpu = db.has_rows("COMPOSITE_EVENTS")
        if not (has_gpu or has_cpu):
            raise InputError(
                db.path,
                "no GPU activity and no CPU samples in this export "
                "(record with 'nsys profile --trace=cuda' or '--sample=cpu')",
            )
        types = [GPU_TIME, KERNEL_COUNT, GPU_BYTES] if has_gpu else []
        types += [CPU_SAMPLES] if has_cpu else []
        self.b = ProfileBuilder(types)
        self.col = {t.name: i for i, t in enumerate(types)}
        self.nvtx = NvtxIndex(db, self.b) if nvtx else None
        self.cpu_frames = CpuFrames(db, self.b)
        self.delimiter = self.b.frame(DELIMITER, FrameKind.DELIMITER)
        self._label_cache: dict[tuple, int] = {}
        self.thread_names = self._thread_names()
        self.process_names = {
            process_key(g): n for g, n in db.select("PROCESSES", ["globalPid", "name"]) if n
        }
        self.ranks = self._ranks()
        # Samples, gathered as columns.
        self.stacks: list[int] = []
        self.values: list[tuple[float, ...]] = []
        self.labels: list[int] = []
        self.times: list[int] = []
        self.info: dict[str, object] = {}

    # -- threads, processes, ranks ----------------------------------------------------------
    def _thread_names(self) -> dict[int, str]:
        names = {
            g: self.strings.get(n, "")
            for n, g in self.db.select("ThreadNames", ["nameId", "globalTid"])
            if g is not None
        }
        rows = self.db.select(
            "NVTX_EVENTS", ["text", "globalTid"], f"eventType = {THREAD_NAME_TYPE}"
        )
        for text, g in rows:
            if text and g is not None:
                names.setdefault(g, text)
        return {g: n for g, n in names.items() if n}

    def _ranks(self) -> dict[int, str]:
        """Process key -> MPI rank, from thread names (nsys' MPI tracing names the main
        thread "MPI Rank N"), else from the launcher's environment for a single process."""
        ranks = {}
        for g, name in self.thread_names.items():
            m = _RANK.search(name)
            if m:
                ranks.setdefault(process_key(g), m.group(1))
        if ranks:
            return ranks
        processes = {
            process_key(g) for t in GPU_TABLES for (g,) in self.db.select(t, ["globalPid"])
        }
        env = self._environment()
        rank = next((env[k] for k in _RANK_ENV if env.get(k, "").isdigit()), None)
        if rank is not None and len(processes) == 1:
            return {processes.pop(): rank}
        return {}

    def _environment(self) -> dict[str, str]:
        rows = self.db.select("TARGET_INFO_SYSTEM_ENV", ["name", "value"])
        for name, value in rows:
            if name == "DeviceEnvironment" and value:
                return dict(kv.partition("=")[::2] for kv in value.split("\x00") if "=" in kv)
        return {}

    def label_id(self, pkey: int, gtid: int | None, device=None, stream=None) -> int:  # type: ignore[no-untyped-def]
        key = (pkey, gtid, device, stream)
        i = self._label_cache.get(key)
        if i is None:
            labels: dict[str, object] = {"pid": (pkey & 0xFFFFFF)}
            if gtid:
                labels["tid"] = tid_of(gtid)
                if gtid in self.thread_names:
                    labels["thread"] = self.thread_names[gtid]
            if pkey in self.process_names:
                labels["process"] = self.process_names[pkey]
            if pkey in self.ranks:
                labels["rank"] = self.ranks[pkey]
            if device is not None:
                labels["device"] = device
            if stream is not None:
                labels["stream"] = stream
            i = self._label_cache[key] = self.b.labels(labels)
        return i

    def add(self, stack: int, column: str, value: float, labels: int, t: int, extra=()) -> None:  # type: ignore[no-untyped-def]
        row = [0.0] * len(self.col)
        row[self.col[column]] = value
        for name, v in extra:
            row[self.col[name]] = v
        self.stacks.append(stack)
        self.values.append(tuple(row))
        self.labels.append(labels)
        self.times.append(t)

    # -- GPU ------------------------------------------------------------------------------
    def _api_calls(self) -> dict[tuple[int, int], list[_Call]]:
        classes = self.db.enum("ENUM_NSYS_EVENT_CLASS")
        backtrace = {i for i, n in classes.items() if "BACKTRACE" in n} or {_BACKTRACE_CLASS}
        calls: dict[tuple[int, int], list[_Call]] = defaultdict(list)
        cols = ["start", "end", "eventClass", "globalTid", "correlationId", "nameId", "callchainId"]
        for start, end, cls, gtid, corr, name_id, chain in self.db.select(RUNTIME, cols):
            if corr is None:
                continue
            call = _Call(start, end, gtid or 0, name_id, chain, cls in backtrace)
            calls[(process_key(gtid), corr)].append(call)
        return calls

    def _launch_stack(self, calls: list[_Call], chains: dict, offset: int) -> tuple[int, int]:  # type: ignore[type-arg]
        """(stack down to the delimiter, launching thread) for one correlation id."""
        real = [c for c in calls if not c.is_backtrace] or calls
        call = max(real, key=lambda c: c.end - c.start)  # the outermost API call
        name = self.strings.get(call.name_id, "[unknown API call]")
        base = self.nvtx.stack_at(call.gtid, call.start) if self.nvtx else EMPTY_STACK
        chain_id = next((c.callchain + offset for c in calls if c.callchain is not None), None)
        if chain_id in chains:
            api_names = {self.strings.get(c.name_id, "") for c in calls}
            base = self.b.stack(callers_of_api(chains[chain_id], api_names), base)
        api = self.b.frame(name, FrameKind.RUNTIME)
        return self.b.stack((api, self.delimiter), base), call.gtid

    def _named_callchains(self, calls: dict[tuple[int, int], list[_Call]]):  # type: ignore[no-untyped-def]
        """(callchainId, API names of its correlation id) for every call with a backtrace."""
        for group in calls.values():
            for c in group:
                if c.callchain is not None:
                    yield c.callchain, [self.strings.get(x.name_id, "") for x in group]

    def _activities(self):  # type: ignore[no-untyped-def]
        """(table, start, end, device, stream, correlation, globalPid, frame id, bytes)."""
        b = self.b
        name_cols = ["demangledName", "shortName"]
        if self.kernel_names == "short":
            name_cols.reverse()
        common = ["start", "end", "deviceId", "streamId", "correlationId", "globalPid"]
        kernel_frames: dict[object, int] = {}
        for *row, name in self.db.select(KERNEL, [*common, name_cols]):
            fid = kernel_frames.get(name)
            if fid is None:
                text = name if isinstance(name, str) else self.strings.get(name, "")
                fid = kernel_frames[name] = b.frame(
                    text or "[unknown kernel]", FrameKind.GPU_KERNEL
                )
            yield (KERNEL, *row, fid, 0)
        copy_kinds = self._copy_kinds()
        copy_frames: dict[object, int] = {}
        for *row, kind, nbytes in self.db.select(MEMCPY, [*common, "copyKind", "bytes"]):
            fid = copy_frames.get(kind)
            if fid is None:
                label = copy_kinds.get(kind, f"kind {kind}")
                fid = copy_frames[kind] = b.frame(f"[memcpy {label}]", FrameKind.GPU_KERNEL)
            yield (MEMCPY, *row, fid, nbytes or 0)
        memset = b.frame("[memset]", FrameKind.GPU_KERNEL)
        for *row, nbytes in self.db.select(MEMSET, [*common, "bytes"]):
            yield (MEMSET, *row, memset, nbytes or 0)
        for *row, graph in self.db.select(GRAPH, [*common, "graphId"]):
            yield (GRAPH, *row, b.frame(f"[CUDA graph {graph}]", FrameKind.GPU_KERNEL), 0)

    def _copy_kinds(self) -> dict[int, str]:
        kinds = dict(enumerate(_COPY_KINDS))
        for i, name in self.db.enum("ENUM_CUDA_MEMCPY_OPER").items():
            suffix = name.rpartition("KIND_")[2]
            m = re.fullmatch(r"([A-Z])TO([A-Z])", suffix)
            kinds[i] = f"{m[1]}to{m[2]}" if m else suffix.title()
        return kinds

    def import_gpu(self) -> None:
        calls = self._api_calls()
        chains = read_callchains(self.db, "CUDA_CALLCHAINS", self.cpu_frames)
        offset = callchain_offset(chains, self._named_callchains(calls)) if chains else 0
        launches: dict[tuple[int, int], tuple[int, int]] = {}
        unlinked_root = self.b.stack(
            (self.b.frame(LAUNCH_NOT_IN_TRACE, FrameKind.LABEL), self.delimiter)
        )
        counts: dict[str, int] = defaultdict(int)
        unlinked_time = unlinked_n = total_time = 0
        negative = 0
        child = self.b.stacks.child
        for table, start, end, dev, stream, corr, gpid, fid, nbytes in self._activities():
            counts[table] += 1
            duration = end - start
            if duration < 0:
                negative += 1
                duration = 0
            total_time += duration
            pkey = process_key(gpid)
            key = (pkey, corr)
            launch = launches.get(key)
            if launch is None and key in calls:
                launch = launches[key] = self._launch_stack(calls[key], chains, offset)
            if launch is None:
                unlinked_time += duration
                unlinked_n += 1
                base, gtid = unlinked_root, None
            else:
                base, gtid = launch
            labels = self.label_id(pkey, gtid, dev, stream)
            extra = (("kernel-count", 1.0), ("gpu-bytes", float(nbytes)))
            self.add(child(base, fid), "gpu-time", float(duration), labels, start, extra)
        n = sum(counts.values())
        self.info["info:gpu activities"] = (
            f"{counts[KERNEL]:,} kernels, {counts[MEMCPY]:,} memcpys, {counts[MEMSET]:,} memsets"
            + (f", {counts[GRAPH]:,} graphs" if counts[GRAPH] else "")
        )
        share = f", {100 * unlinked_time / total_time:.1f}% of GPU time" if total_time else ""
        self.info["info:unlinked gpu time"] = (
            f"{_ns(unlinked_time)} ({unlinked_n:,} of {n:,} activities{share})"
        )
        if negative:
            self.info["info:warnings"] = f"{negative:,} GPU activities with end < start (counted 0)"
        with_bt = sum(1 for cs in calls.values() if any(c.callchain is not None for c in cs))
        if with_bt:
            self.info["info:cpu backtraces"] = f"{with_bt:,} CUDA API calls with a backtrace"

    # -- CPU samples ------------------------------------------------------------------------
    def import_cpu(self) -> None:
        chains = read_callchains(self.db, "SAMPLING_CALLCHAINS", self.cpu_frames)
        no_stack = self.b.frame("[no backtrace]", FrameKind.LABEL)
        intern = self.b.stack
        threads = set()
        for cid, start, gtid in self.db.select("COMPOSITE_EVENTS", ["id", "start", "globalTid"]):
            base = self.nvtx.stack_at(gtid, start) if self.nvtx else EMPTY_STACK
            chain = chains.get(cid)
            frames = [f for f, _, _ in reversed(chain)] if chain else [no_stack]
            labels = self.label_id(process_key(gtid), gtid)
            self.add(intern(frames, base), "cpu-samples", 1.0, labels, start)
            threads.add(gtid)
        self.info["info:cpu samples"] = f"on {len(threads):,} thread(s)"

    # -- result -----------------------------------------------------------------------------
    def run(self) -> Profile:
        import numpy as np

        if "gpu-time" in self.col:
            self.import_gpu()
        if "cpu-samples" in self.col:
            self.import_cpu()
        n = len(self.stacks)
        values = np.asarray(self.values, dtype=np.float64).reshape(n, len(self.col))
        times = np.asarray(self.times, dtype=np.int64)
        self.b.add_many(np.asarray(self.stacks), values, np.asarray(self.labels), times)
        meta = self.b.meta
        meta["default_type"] = 0  # gpu-time when there is GPU activity, else cpu-samples
        if n:
            ends = times + values[:, self.col["gpu-time"]] if "gpu-time" in self.col else times
            meta["time_range_ns"] = (int(times.min()), int(ends.max()))
        version = self.db.meta("EXPORT_PRODUCT_VERSION")
        if version:
            meta["info:nsys version"] = version
        gpus = [f"{i}: {n}" for i, n in self.db.select("TARGET_INFO_GPU", ["id", "name"]) if n]
        if gpus:
            meta["info:gpus"] = ", ".join(gpus)
        if self.ranks:
            meta["info:ranks"] = ", ".join(sorted(set(self.ranks.values()), key=int))
        if self.nvtx is not None:
            meta["info:nvtx ranges"] = f"{self.nvtx.count:,}"
        meta.update(self.info)
        return self.b.build()


def _ns(value: float) -> str:
    for scale, suffix in ((1e9, "s"), (1e6, "ms"), (1e3, "us")):
        if abs(value) >= scale:
            return f"{value / scale:.3f} {suffix}"
    return f"{value:.0f} ns"


__all__ = ["FORMAT", "LAUNCH_NOT_IN_TRACE", "load", "pid_of", "sniff"]
