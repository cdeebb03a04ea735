"""The timeline of an Nsight Systems export: CUDA API calls and NVTX ranges on the threads
that made them, kernels, memcpys and memsets on their GPU and stream, and a flow from each
API call to the GPU work it launched (same correlation id, same process), as the flame
graph links them.

Categories and ``args`` follow the PyTorch profiler's trace (``cuda_runtime``,
``cuda_driver``, ``kernel``, ``gpu_memcpy``, ``gpu_memset``, ``user_annotation``; the
``correlation``, ``device``, ``stream`` and ``bytes`` of GPU work), so that Perfetto, HTA and
aiflame read the written trace as a PyTorch profiler trace. GPU work is on process id =
device, thread id = stream, as there. NVTX push/pop ranges nest on their thread; start/end
ranges, which may overlap anything, are async slices. nsys' CPU samples are left out (they
are the flame graph's ``cpu-samples``, not slices).
"""

from __future__ import annotations

from collections import defaultdict

from aiflame.errors import InputError
from aiflame.model import ProfileBuilder
from aiflame.model.timeline import Timeline, TimelineBuilder
from aiflame.sources.inputs import Input
from aiflame.sources.nsys.db import NsysDB, open_db, pid_of, process_key, tid_of
from aiflame.sources.nsys.gpu import GPU_TABLES, KERNEL, MEMCPY, MEMSET, RUNTIME
from aiflame.sources.nsys.gpu import activities as gpu_activities
from aiflame.sources.nsys.labels import _thread_names
from aiflame.sources.nsys.nvtx import range_types

FLOW_CATEGORY = "ac2g"
_GPU_CATEGORY = {KERNEL: "kernel", MEMCPY: "gpu_memcpy", MEMSET: "gpu_memset"}
_DRIVER_CLASS = 1  # TRACE_PROCESS_EVENT_CUDA_DRIVER, for exports without ENUM tables
_BACKTRACE_CLASS = 67  # TRACE_PROCESS_EVENT_CUDABACKTRACE: a call's backtrace record
_START_END = {"NvtxStartEndRange", "NvtxtStartEndRange"}
_START_END_IDS = {60, 71}  # their ENUM_NSYS_EVENT_TYPE ids, for exports without the table


def load_timeline(source: Input, kernel_names: str = "full", **_: object) -> Timeline:
    with open_db(source) as db:
        if not db.is_nsys_export():
            raise InputError(
                source.path, "SQLite database, but not an Nsight Systems export (no nsys tables)"
            )
        if not any(db.has_rows(t) for t in (*GPU_TABLES, RUNTIME, "NVTX_EVENTS")):
            raise InputError(
                source.path,
                "no CUDA API calls, GPU activity or NVTX ranges in this export: no timeline "
                "(record with 'nsys profile --trace=cuda,nvtx')",
            )
        return _Builder(db, kernel_names).run()


class _Builder:
    def __init__(self, db: NsysDB, kernel_names: str) -> None:
        self.db = db
        self.kernel_names = kernel_names
        self.b = TimelineBuilder()
        self.b.flow_cat = FLOW_CATEGORY
        self.thread_names = _thread_names(db)
        self.process_names = {
            process_key(g): n for g, n in db.select("PROCESSES", ["globalPid", "name"]) if n
        }
        # (process key, correlation id) -> the API call slices with that id
        self.calls: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)

    def thread(self, gtid: int | None) -> int:
        g = gtid or 0
        return self.b.track(
            pid_of(g),
            tid_of(g),
            self.process_names.get(process_key(g), ""),
            self.thread_names.get(g, ""),
        )

    def api_calls(self) -> None:
        classes = self.db.enum("ENUM_NSYS_EVENT_CLASS")
        backtrace = {i for i, n in classes.items() if "BACKTRACE" in n} or {_BACKTRACE_CLASS}
        driver = {i for i, n in classes.items() if "DRIVER" in n} or {_DRIVER_CLASS}
        strings = self.db.strings
        cols = ["start", "end", "eventClass", "globalTid", "correlationId", "nameId"]
        for start, end, cls, gtid, corr, name_id in self.db.select(RUNTIME, cols, order='"start"'):
            if cls in backtrace:
                continue  # a copy of the call that holds its backtrace, not a call
            name = strings.get(name_id, "[unknown API call]")
            cat = "cuda_driver" if cls in driver else "cuda_runtime"
            args = {"correlation": corr} if corr is not None else None
            i = self.b.add(self.thread(gtid), start, end - start, name, cat, args)
            if corr is not None:
                self.calls[(process_key(gtid), corr)].append((end - start, i))

    def launch(self, global_pid: int | None, corr: int | None) -> int | None:
        """The slice of the API call that launched GPU work: the outermost with its id."""
        if corr is None:
            return None
        if global_pid is not None:
            found = self.calls.get((process_key(global_pid), corr))
        else:  # an old export without process ids on GPU rows: unambiguous ids only
            hits = [v for (_, c), v in self.calls.items() if c == corr]
            found = hits[0] if len(hits) == 1 else None
        return max(found)[1] if found else None

    def gpu(self) -> None:
        names = ProfileBuilder([])  # the flame graph's own naming of kernels and copies
        sources, targets = [], []
        for act in gpu_activities(self.db, names, self.kernel_names):
            name = names.frames.get(act.frame).name
            track = self.b.track(
                act.device,  # type: ignore[arg-type]  # None kept as the export writes it
                act.stream,  # type: ignore[arg-type]
                f"GPU {act.device}",
                f"stream {act.stream}",
            )
            args: dict[str, object] = {"device": act.device, "stream": act.stream}
            if act.correlation is not None:
                args["correlation"] = act.correlation
            if act.table in (MEMCPY, MEMSET):
                args["bytes"] = act.nbytes
            cat = _GPU_CATEGORY.get(act.table, "kernel")  # a whole CUDA graph: its kernels
            i = self.b.add(track, act.start, act.end - act.start, name, cat, args)
            src = self.launch(act.global_pid, act.correlation)
            if src is not None:
                sources.append(src)
                targets.append(i)
        self.b.link(sources, targets)

    def nvtx(self) -> None:
        types = range_types(self.db)
        enum = self.db.enum("ENUM_NSYS_EVENT_TYPE")
        start_end = {i for i, n in enum.items() if n in _START_END} or _START_END_IDS
        strings = self.db.strings
        rows = self.db.select(
            "NVTX_EVENTS",
            ["start", "end", "eventType", "text", "textId", "globalTid"],
            where='"end" IS NOT NULL',
            order='"start"',
        )
        for start, end, etype, text, text_id, gtid in rows:
            if etype not in types or end < start:
                continue
            name = text if text is not None else strings.get(text_id, "") if text_id else ""
            self.b.add(
                self.thread(gtid),
                start,
                end - start,
                name or "[unnamed NVTX range]",
                "user_annotation",
                is_async=etype in start_end,
            )

    def run(self) -> Timeline:
        self.api_calls()
        self.nvtx()
        self.gpu()
        self.b.meta["format"] = "nsys"
        return self.b.build()
