"""GPU activities of an nsys export and the CUDA API calls that launched them.

A kernel, memcpy or memset row carries the ``correlationId`` of the API call that issued it
(several rows for a graph launch); the call is the CUPTI_ACTIVITY_KIND_RUNTIME row with the
same id in the same process. With ``--cudabacktrace`` nsys adds, per call, a second row of
class TRACE_PROCESS_EVENT_CUDABACKTRACE that holds the ``callchainId`` of the CPU stack.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator
from itertools import islice
from typing import NamedTuple

from aiflame.model import FrameKind, ProfileBuilder
from aiflame.model.stacks import EMPTY_STACK
from aiflame.sources.nsys.db import NsysDB, process_key
from aiflame.sources.nsys.nvtx import NvtxIndex
from aiflame.sources.nsys.stacks import Callchains, callchain_offset, callers_of_api
from aiflame.symbolize.cxxnames import distinct_short_names

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
GRAPH = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"  # whole-graph activities (--cuda-graph-trace=graph)
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
GPU_TABLES = (KERNEL, MEMCPY, MEMSET, GRAPH)

_BACKTRACE_CLASS = 67  # TRACE_PROCESS_EVENT_CUDABACKTRACE, for exports without ENUM tables
# CUpti_ActivityMemcpyKind, for exports without ENUM_CUDA_MEMCPY_OPER.
_COPY_KINDS: tuple[str, ...] = ("Unknown", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA", "AtoD")
_COPY_KINDS += ("DtoA", "DtoD")
_COPY_KINDS += ("HtoH", "PtoP")
_COMMON = ["start", "end", "deviceId", "streamId", "correlationId", "globalPid"]


class Activity(NamedTuple):
    table: str
    start: int
    end: int
    device: int | None
    stream: int | None
    correlation: int | None
    global_pid: int | None
    frame: int  # the kernel / memcpy / memset frame
    nbytes: int


class Call(NamedTuple):
    """One CUDA API row: the call itself, or the backtrace record nsys adds for it."""

    start: int
    end: int
    gtid: int
    name_id: int
    callchain: int | None
    is_backtrace: bool


def require_times(db: NsysDB) -> None:
    """Fail in one line where a GPU activity table lacks the times every release writes."""
    for table in GPU_TABLES:
        db.require(table, "start", "end")


def activities(db: NsysDB, builder: ProfileBuilder, kernel_names: str) -> Iterator[Activity]:
    """Every GPU activity, with its leaf frame interned."""
    require_times(db)
    strings = db.strings
    name_cols = ["demangledName", "shortName"]
    text_of = lambda name: name if isinstance(name, str) else strings.get(name, "")  # noqa: E731
    short: dict[str, str] = {}
    if kernel_names == "short":
        # Shortened together from the demangled names, not nsys's shortName, which folds
        # every template instance into one (all of cloverleaf's par_ranged2d_kernel<lambda>).
        names = {text_of(n) for (n,) in db.select(KERNEL, [name_cols])}
        short = distinct_short_names(names - {""})
    frames: dict[object, int] = {}
    for *row, name in db.select(KERNEL, [*_COMMON, name_cols]):
        fid = frames.get(name)
        if fid is None:
            text = text_of(name)
            text = short.get(text, text)
            fid = frames[name] = builder.frame(text or "[unknown kernel]", FrameKind.GPU_KERNEL)
        yield Activity._make((KERNEL, *row, fid, 0))
    kinds = copy_kinds(db)
    copies: dict[object, int] = {}
    for *row, kind, nbytes in db.select(MEMCPY, [*_COMMON, "copyKind", "bytes"]):
        fid = copies.get(kind)
        if fid is None:
            label = kinds.get(kind, f"kind {kind}") if kind is not None else "Unknown"
            fid = copies[kind] = builder.frame(f"[memcpy {label}]", FrameKind.GPU_KERNEL)
        yield Activity._make((MEMCPY, *row, fid, nbytes or 0))
    memset = builder.frame("[memset]", FrameKind.GPU_KERNEL)
    for *row, nbytes in db.select(MEMSET, [*_COMMON, "bytes"]):
        yield Activity._make((MEMSET, *row, memset, nbytes or 0))
    for *row, graph in db.select(GRAPH, [*_COMMON, "graphId"]):
        fid = builder.frame(f"[CUDA graph {graph}]", FrameKind.GPU_KERNEL)
        yield Activity._make((GRAPH, *row, fid, 0))


def copy_kinds(db: NsysDB) -> dict[int, str]:
    """copyKind -> "HtoD" etc., from ENUM_CUDA_MEMCPY_OPER when the export has it."""
    kinds = dict(enumerate(_COPY_KINDS))
    for i, name in db.enum("ENUM_CUDA_MEMCPY_OPER").items():
        suffix = name.rpartition("KIND_")[2]
        m = re.fullmatch(r"([A-Z])TO([A-Z])", suffix)
        kinds[i] = f"{m[1]}to{m[2]}" if m else suffix.title()
    return kinds


def api_calls(db: NsysDB) -> dict[tuple[int, int], list[Call]]:
    """(process key, correlation id) -> API rows, for the ids that GPU activities use."""
    classes = db.enum("ENUM_NSYS_EVENT_CLASS")
    backtrace = {i for i, n in classes.items() if "BACKTRACE" in n} or {_BACKTRACE_CLASS}
    used = [
        f'SELECT "correlationId" FROM "{t}"' for t in GPU_TABLES if "correlationId" in db.columns(t)
    ]
    calls: dict[tuple[int, int], list[Call]] = defaultdict(list)
    if not used or "correlationId" not in db.columns(RUNTIME):
        return calls
    cols = ["start", "end", "eventClass", "globalTid", "correlationId", "nameId", "callchainId"]
    where = '"correlationId" IN (' + " UNION ".join(used) + ")"
    for start, end, cls, gtid, corr, name_id, chain in db.select(RUNTIME, cols, where):
        call = Call(start, end, gtid or 0, name_id, chain, cls in backtrace)
        calls[(process_key(gtid), corr)].append(call)
    return calls


class Launches:
    """The stack above each GPU activity: NVTX ranges, CPU backtrace, API call, ``-``."""

    def __init__(
        self,
        db: NsysDB,
        builder: ProfileBuilder,
        nvtx: NvtxIndex | None,
        chains: Callchains,
        delimiter: int,
    ) -> None:
        self.b = builder
        self.strings = db.strings
        self.nvtx = nvtx
        self.chains = chains
        self.delimiter = delimiter
        self.calls = api_calls(db)
        self._stacks: dict[tuple[int, int], tuple[int, int]] = {}
        self._by_correlation: dict[int, list[tuple[int, int]]] | None = None
        named = (
            (c.callchain, [self.strings.get(x.name_id, "") for x in group])
            for group in self.calls.values()
            for c in group
            if c.callchain is not None
        )
        self.offset = callchain_offset(chains.get, islice(named, 500)) if chains.present else 0

    def with_backtrace(self) -> int:
        return sum(1 for g in self.calls.values() if any(c.callchain is not None for c in g))

    def stack(self, global_pid: int | None, correlation: int | None) -> tuple[int, int] | None:
        """(stack down to the delimiter, launching globalTid), None if the call is absent."""
        if correlation is None:
            return None
        key: tuple[int, int] | None
        if global_pid is None:  # an old export without process ids on GPU rows
            key = self._only_process_with(correlation)
        else:
            key = (process_key(global_pid), correlation)
        if key is None:
            return None
        hit = self._stacks.get(key)
        if hit is None:
            calls = self.calls.get(key)
            if not calls:
                return None
            hit = self._stacks[key] = self._build(calls)
        return hit

    def _only_process_with(self, correlation: int) -> tuple[int, int] | None:
        if self._by_correlation is None:
            self._by_correlation = defaultdict(list)
            for key in self.calls:
                self._by_correlation[key[1]].append(key)
        keys = self._by_correlation.get(correlation, [])
        return keys[0] if len(keys) == 1 else None

    def _build(self, calls: list[Call]) -> tuple[int, int]:
        real = [c for c in calls if not c.is_backtrace] or calls
        call = max(real, key=lambda c: c.end - c.start)  # the outermost API call
        name = self.strings.get(call.name_id, "[unknown API call]")
        base = self.nvtx.stack_at(call.gtid, call.start) if self.nvtx else EMPTY_STACK
        ids = [c.callchain for c in calls if c.callchain is not None]
        chain = self.chains.get(ids[0] + self.offset) if ids else None
        if chain:
            names = {self.strings.get(c.name_id, "") for c in calls}
            base = self.b.stack(callers_of_api(chain, names), base)
        api = self.b.frame(name, FrameKind.RUNTIME)
        return self.b.stack((api, self.delimiter), base), call.gtid
