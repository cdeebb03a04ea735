"""Nsight Systems exports (``nsys export --type sqlite``): GPU time with full launch stacks.

Every kernel, memcpy and memset becomes one sample weighted by its GPU duration, on the
stack ``NVTX ranges -> CPU backtrace -> CUDA API call -> '-' -> kernel``: the API call is
found by correlation id within the same process, the NVTX ranges are those open on the
launching thread when the call started (outermost first, at the root: they are the phases
and ops a program marks, so they stay grouped even when deep native stacks differ), and
the CPU backtrace is the one nsys attached to the call (``--cudabacktrace``). GPU work
whose API call is not in the export is kept under ``[launch not in trace]``, so the total
always equals the GPU activity time. CPU samples (``--sample=cpu``) become a
``cpu-samples`` metric on ``NVTX ranges -> sampled call stack``.
"""

from __future__ import annotations

from array import array
from collections import defaultdict
from typing import TYPE_CHECKING

import numpy as np

from aiflame.errors import AiflameError, InputError
from aiflame.model import FrameKind, Profile, ProfileBuilder, SampleType
from aiflame.model.stacks import EMPTY_STACK
from aiflame.model.trace import TraceData
from aiflame.sources.gpu_idle_samples import GPU_IDLE, add_gpu_idle, slice_stacks
from aiflame.sources.inputs import GZIP_MAGIC, Input
from aiflame.sources.nsys.db import SQLITE_MAGIC, NsysDB, file_has_nsys_tables, open_db
from aiflame.sources.nsys.gpu import GPU_TABLES, GRAPH, KERNEL, MEMCPY, MEMSET, Launches
from aiflame.sources.nsys.gpu import activities as gpu_activities
from aiflame.sources.nsys.labels import Labels
from aiflame.sources.nsys.nvtx import NvtxIndex
from aiflame.sources.nsys.stacks import Callchains, CpuFrames
from aiflame.sources.trace_input import TraceInput
from aiflame.symbolize.kinds import DELIMITER

if TYPE_CHECKING:
    from aiflame.model.timeline import Timeline

FORMAT = "nsys"

GPU_TIME = SampleType("gpu-time", "nanoseconds")
KERNEL_COUNT = SampleType("kernel-count", "count")  # GPU activities: kernels, copies, sets
GPU_BYTES = SampleType("gpu-bytes", "bytes")  # bytes copied by memcpys / set by memsets
CPU_SAMPLES = SampleType("cpu-samples", "count")

LAUNCH_NOT_IN_TRACE = "[launch not in trace]"
KERNEL_NAMES = ("full", "short")

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


def load(
    source: Input,
    kernel_names: str = "full",
    nvtx: bool = True,
    trace: TraceData | None = None,
    **_: object,
) -> Profile:
    """Options: ``kernel_names`` "full" (demangled, with arguments) or "short";
    ``nvtx=False`` leaves NVTX ranges out of the stacks. ``trace``: the export's
    :class:`TraceData` when already read (its ``gpu-idle`` is drawn from it)."""
    if kernel_names not in KERNEL_NAMES:
        raise AiflameError(f"kernel_names must be one of {', '.join(KERNEL_NAMES)}")
    with open_db(source) as db:
        if not db.is_nsys_export():
            raise InputError(
                source.path, "SQLite database, but not an Nsight Systems export (no nsys tables)"
            )
        return _Importer(db, kernel_names, nvtx, trace).run()


def trace_input(source: Input, **_: object) -> TraceInput:
    """The export for ``aiflame analyze`` and its flame graph (read again on demand: an
    export's tables are indexed, so a second read is cheap)."""
    from aiflame.sources.nsys.trace_data import read_nsys

    # One Input for both reads: it keeps stdin's bytes.
    trace = read_nsys(source)
    return TraceInput(FORMAT, trace, lambda: load(source, trace=trace))


def trace(source: Input, **options: object) -> TraceData:
    return trace_input(source, **options).trace


class _Importer:
    def __init__(
        self, db: NsysDB, kernel_names: str, nvtx: bool, trace: TraceData | None = None
    ) -> None:
        self.db = db
        self.trace = trace
        self.kernel_names = kernel_names
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
        self.types = types
        self.b = ProfileBuilder(types)
        self.nvtx = NvtxIndex(db, self.b) if nvtx else None
        self.cpu_frames = CpuFrames(db, self.b)
        self.delimiter = self.b.frame(DELIMITER, FrameKind.DELIMITER)
        self.labels = Labels(db, self.b, GPU_TABLES)
        # Samples, gathered as columns: GPU activities first, then CPU samples; each value
        # column holds the values of its own samples only (the others are 0).
        self.stack_col = array("q")
        self.label_col = array("q")
        self.time_col = array("q")
        self.value_cols = {t.name: array("d") for t in types}
        self.info: dict[str, object] = {}

    # -- GPU ------------------------------------------------------------------------------
    def import_gpu(self) -> None:
        b = self.b
        chains = Callchains(self.db, "CUDA_CALLCHAINS", self.cpu_frames)
        launches = Launches(self.db, b, self.nvtx, chains, self.delimiter)
        unlinked_root = b.stack((b.frame(LAUNCH_NOT_IN_TRACE, FrameKind.LABEL), self.delimiter))
        counts: dict[str, int] = defaultdict(int)
        unlinked_time = unlinked_n = total_time = negative = 0
        child, label_id = b.stacks.child, self.labels.id
        cols = self.value_cols
        gpu_time, count, nbytes_col = cols["gpu-time"], cols["kernel-count"], cols["gpu-bytes"]
        for act in gpu_activities(self.db, b, self.kernel_names):
            counts[act.table] += 1
            if act.start is None or act.end is None:
                raise InputError(self.db.path, f"a row of {act.table} has no start or end time")
            duration = act.end - act.start
            if duration < 0:
                negative += 1
                duration = 0
            total_time += duration
            launch = launches.stack(act.global_pid, act.correlation)
            if launch is None:
                unlinked_time += duration
                unlinked_n += 1
                base, gtid = unlinked_root, None
            else:
                base, gtid = launch
            self.stack_col.append(child(base, act.frame))
            owner = act.global_pid if act.global_pid is not None else gtid
            self.label_col.append(label_id(owner, gtid, act.device, act.stream))
            self.time_col.append(act.start)
            gpu_time.append(duration)
            count.append(1.0)
            nbytes_col.append(act.nbytes)
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
        with_bt = launches.with_backtrace()
        if with_bt:
            self.info["info:cpu backtraces"] = f"{with_bt:,} CUDA API calls with a backtrace"

    def import_gpu_idle(self) -> None:
        """``gpu-idle``: the GPU's idle time on the stacks of the API calls, NVTX ranges and
        backtrace frames that kept it waiting (:mod:`aiflame.sources.gpu_idle_samples`)."""
        from aiflame.sources.nsys.trace_data import read_db

        trace = self.trace if self.trace is not None else read_db(self.db, self.db.path)
        column = self.b.add_type(GPU_IDLE)
        stacks = slice_stacks(self.b, trace)
        label_id = self.labels.id

        def thread_labels(gtids: np.ndarray) -> np.ndarray:
            return np.asarray(
                [label_id(g, g) if g >= 0 else 0 for g in gtids.tolist()], dtype=np.int64
            )

        add_gpu_idle(self.b, column, trace, stacks, thread_labels, timestamps=True)

    # -- CPU samples ------------------------------------------------------------------------
    def import_cpu(self) -> None:
        """One sample per COMPOSITE_EVENTS row, merged by id with its callchain."""
        chains = Callchains(self.db, "SAMPLING_CALLCHAINS", self.cpu_frames)
        chain_iter = chains.iter_all()
        next_id, next_chain = next(chain_iter, (None, ()))
        no_stack = self.b.frame("[no backtrace]", FrameKind.LABEL)
        stacks: dict[tuple[int, int], int] = {}
        intern, label_id = self.b.stack, self.labels.id
        samples = self.value_cols["cpu-samples"]
        threads = set()
        rows = self.db.select("COMPOSITE_EVENTS", ["id", "start", "globalTid"], order='"id"')
        for cid, start, gtid in rows:
            while next_id is not None and next_id < cid:
                next_id, next_chain = next(chain_iter, (None, ()))
            chain = next_chain if next_id == cid else ()
            base = self.nvtx.stack_at(gtid, start) if self.nvtx else EMPTY_STACK
            key = (base, id(chain))  # chains are shared tuples, kept alive by `chains`
            stack = stacks.get(key)
            if stack is None:
                frames = [f for f, _, _ in reversed(chain)] if chain else [no_stack]
                stack = stacks[key] = intern(frames, base)
            self.stack_col.append(stack)
            self.label_col.append(label_id(gtid, gtid))
            self.time_col.append(start)
            samples.append(1.0)
            threads.add(gtid)
        self.info["info:cpu samples"] = f"on {len(threads):,} thread(s)"

    # -- result -----------------------------------------------------------------------------
    def run(self) -> Profile:
        if "gpu-time" in self.value_cols:
            self.import_gpu()
        if "cpu-samples" in self.value_cols:
            self.import_cpu()
        n = len(self.stack_col)
        values = np.zeros((n, len(self.types)))
        n_gpu = len(self.value_cols["gpu-time"]) if "gpu-time" in self.value_cols else 0
        for c, t in enumerate(self.types):
            col = np.frombuffer(self.value_cols[t.name], dtype=np.float64)
            rows = slice(n_gpu, n) if t is CPU_SAMPLES else slice(0, n_gpu)
            values[rows, c] = col
        times = np.frombuffer(self.time_col, dtype=np.int64)
        self.b.add_many(
            np.frombuffer(self.stack_col, dtype=np.int64),
            values,
            np.frombuffer(self.label_col, dtype=np.int64),
            times,
        )
        if "gpu-time" in self.value_cols:
            self.import_gpu_idle()
        meta = self.b.meta
        meta["default_type"] = 0  # gpu-time when there is GPU activity, else cpu-samples
        if n:
            ends = times + values[:, 0] if "gpu-time" in self.value_cols else times
            meta["time_range_ns"] = (int(times.min()), int(ends.max()))
        self._describe(meta)
        return self.b.build()

    def _describe(self, meta: dict[str, object]) -> None:
        version = self.db.meta("EXPORT_PRODUCT_VERSION")
        if version:
            meta["info:nsys version"] = version
        gpus = [f"{i}: {n}" for i, n in self.db.select("TARGET_INFO_GPU", ["id", "name"]) if n]
        if gpus:
            meta["info:gpus"] = ", ".join(gpus)
        ranks = self.labels.ranks
        if ranks:
            meta["info:ranks"] = ", ".join(sorted(set(ranks.values()), key=int))
        if self.nvtx is not None:
            meta["info:nvtx ranges"] = f"{self.nvtx.count:,}"
        meta.update(self.info)


def _ns(value: float) -> str:
    for scale, suffix in ((1e9, "s"), (1e6, "ms"), (1e3, "us")):
        if abs(value) >= scale:
            return f"{value / scale:.3f} {suffix}"
    return f"{value:.0f} ns"


__all__ = ["FORMAT", "LAUNCH_NOT_IN_TRACE", "load", "load_timeline", "sniff"]


def load_timeline(source: Input, kernel_names: str = "full", **_: object) -> Timeline:
    """API calls, NVTX ranges and GPU activity in time, for the Chrome trace exporter."""
    from aiflame.sources.nsys.timeline import load_timeline as timeline

    if kernel_names not in KERNEL_NAMES:
        raise AiflameError(f"kernel_names must be one of {', '.join(KERNEL_NAMES)}")
    return timeline(source, kernel_names=kernel_names)
