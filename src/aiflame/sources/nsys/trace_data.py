"""An Nsight Systems SQLite export as :class:`~aiflame.model.trace.TraceData` (for analysis).

What maps from the export:

- GPU activity: CUPTI_ACTIVITY_KIND_KERNEL (collectives by name, as for Kineto), MEMCPY
  (named like Kineto's ``Memcpy HtoD (Pageable -> Device)`` from copyKind/srcKind/dstKind,
  so the same rules apply), MEMSET and whole CUDA graphs (GRAPH_TRACE, as computation);
- CPU slices: the CUDA API calls of CUPTI_ACTIVITY_KIND_RUNTIME (runtime calls; version
  suffixes such as ``_v3020`` dropped), the NVTX push/pop and start/end ranges (standing
  for operators: PyTorch's ``emit_nvtx()`` names them after the ops), and, between them,
  the frames of the CPU backtrace nsys recorded for a call (``--cudabacktrace``). Those
  frames are shared by the calls with the same backtrace under the same NVTX range, and
  their ts/dur span those calls: they are stack frames, not timed slices;
- launches: a GPU row's correlationId and process name its API call;
- devices: TARGET_INFO_GPU, with Kineto's deviceProperties names where they exist.

Not in an export: operator input shapes and dtypes, hence no FLOPs, MFU or roofline.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from itertools import islice
from typing import Any

import numpy as np

from aiflame.errors import InputError
from aiflame.model import ProfileBuilder
from aiflame.model.trace import Kind, TraceData, is_communication
from aiflame.sources.inputs import Input
from aiflame.sources.nsys.db import NsysDB, open_db, process_key
from aiflame.sources.nsys.gpu import (
    GPU_TABLES,
    GRAPH,
    KERNEL,
    MEMCPY,
    MEMSET,
    RUNTIME,
    require_times,
)
from aiflame.sources.nsys.gpu import copy_kinds as nsys_copy_kinds
from aiflame.sources.nsys.labels import Labels
from aiflame.sources.nsys.nvtx import range_types
from aiflame.sources.nsys.stacks import Callchains, CpuFrames, callchain_offset, callers_of_api
from aiflame.transforms import correlate

SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
_BACKTRACE_CLASS = 67  # TRACE_PROCESS_EVENT_CUDABACKTRACE, for exports without ENUM tables
_VERSION = re.compile(r"_v\d+$")
# nsys' memory kinds (its ENUM_CUDA_MEM_KIND, not CUPTI's numbering), for exports without
# that table; spelt as Kineto does.
_MEM_KINDS: tuple[str, ...] = ("Pageable", "Pinned", "Device", "Array", "Managed")
_MEM_KINDS += ("Device Static", "Managed Static", "Unknown")
_SYNC_TYPES = {1: "event synchronize", 2: "stream wait event", 3: "stream synchronize"}
_SYNC_TYPES |= {4: "context synchronize"}


def read_nsys(source: Input) -> TraceData:
    """The trace of an export; its ``notes`` say what the export cannot give."""
    with open_db(source) as db:
        if not db.is_nsys_export():
            raise InputError(source.path, "SQLite database, but not an Nsight Systems export")
        return _Reader(db, source.path).run()


def read_db(db: NsysDB, path: str) -> TraceData:
    """The trace of an export already open (see :func:`read_nsys`)."""
    return _Reader(db, path).run()


def _mem_kinds(db: NsysDB) -> dict[int, str]:
    enum = db.enum("ENUM_CUDA_MEM_KIND")
    if enum:
        # CUDA_MEMOPR_MEMORY_KIND_DEVICE_STATIC -> Device Static
        return {i: n.rpartition("_KIND_")[2].replace("_", " ").title() for i, n in enum.items()}
    return dict(enumerate(_MEM_KINDS))


class _Reader:
    def __init__(self, db: NsysDB, path: str) -> None:
        self.db = db
        self.path = path
        self.names: list[str] = []
        self._ids: dict[str, int] = {}
        self.notes: list[str] = []

    def name(self, s: str) -> int:
        i = self._ids.get(s)
        if i is None:
            i = self._ids[s] = len(self.names)
            self.names.append(s)
        return i

    # -- GPU ------------------------------------------------------------------------------
    def gpu(self) -> dict[str, np.ndarray]:
        db, strings = self.db, self.db.strings
        common = ["start", "end", "deviceId", "correlationId", "globalPid", "streamId"]
        require_times(db)
        # (*common, name, kind, bytes)
        rows: list[tuple[int, int, int, int, int, int, int, int, int]] = []
        for *r, name in db.select(KERNEL, [*common, ["demangledName", "shortName"]]):
            text = name if isinstance(name, str) else strings.get(name, "") or "[unknown kernel]"
            kind = Kind.COMM if is_communication(text) else Kind.COMPUTE
            rows.append((*r, self.name(text), kind, -1))
        copy, mem = nsys_copy_kinds(db), _mem_kinds(db)
        cols_copy = [*common, "copyKind", "srcKind", "dstKind", "bytes"]
        for *r, ck, src, dst, nbytes in db.select(MEMCPY, cols_copy):
            what = copy.get(ck, "Unknown") if ck is not None else "Unknown"
            label = f"Memcpy {what}"
            if src is not None and dst is not None:
                label += f" ({mem.get(src, 'Unknown')} -> {mem.get(dst, 'Unknown')})"
            rows.append((*r, self.name(label), Kind.MEMCPY, -1 if nbytes is None else nbytes))
        for *r, dst, nbytes in db.select(MEMSET, [*common, "memKind", "bytes"]):
            label = f"Memset ({mem.get(dst, 'Unknown')})" if dst is not None else "Memset"
            rows.append((*r, self.name(label), Kind.MEMSET, -1 if nbytes is None else nbytes))
        for *r, graph in db.select(GRAPH, [*common, "graphId"]):
            rows.append((*r, self.name(f"[CUDA graph {graph}]"), Kind.COMPUTE, -1))
        cols = list(zip(*rows, strict=True)) if rows else [()] * 9
        if None in cols[0] or None in cols[1]:
            raise InputError(self.path, "a GPU activity has no start or end time")
        start = np.asarray(cols[0], dtype=np.int64)
        end = np.asarray(cols[1], dtype=np.int64)
        devices = [self.name(str(d if d is not None else "?")) for d in cols[2]]
        corr = np.asarray([c if c is not None else -1 for c in cols[3]], dtype=np.int64)
        pids = np.asarray([process_key(p) if p is not None else -1 for p in cols[4]])
        order = np.argsort(start, kind="stable")
        return {
            "ts": start[order],
            "dur": np.maximum(end - start, 0)[order],
            "device": np.asarray(devices, dtype=np.int64)[order],
            "corr": corr[order],
            "pkey": pids.astype(np.int64)[order],
            "stream": np.asarray(
                [self.name(str(x) if x is not None else "?") for x in cols[5]], dtype=np.int64
            )[order],
            "name": np.asarray(cols[6], dtype=np.int64)[order],
            "kind": np.asarray(cols[7], dtype=np.int8)[order],
            "bytes": np.asarray(cols[8], dtype=np.int64)[order],
        }

    # -- CPU ------------------------------------------------------------------------------
    def api_calls(self) -> tuple[list[tuple[int, int, int, int, int]], dict[tuple[int, int], int]]:
        """API calls (start, end, gtid, correlation, name) and their backtrace chain ids."""
        classes = self.db.enum("ENUM_NSYS_EVENT_CLASS")
        backtrace = {i for i, n in classes.items() if "BACKTRACE" in n} or {_BACKTRACE_CLASS}
        calls: list[tuple[int, int, int, int, int]] = []
        chains: dict[tuple[int, int], int] = {}
        strings = self.db.strings
        cols = ["start", "end", "eventClass", "globalTid", "correlationId", "nameId", "callchainId"]
        for start, end, cls, gtid, corr, name_id, chain in self.db.select(RUNTIME, cols):
            key = (process_key(gtid), corr if corr is not None else -1)
            if chain is not None:
                chains.setdefault(key, chain)
            if cls in backtrace:
                continue
            name = _VERSION.sub("", strings.get(name_id, "") or "[unknown API call]")
            calls.append((start, max(end, start), gtid or 0, key[1], self.name(name)))
        return calls, chains

    def nvtx(self) -> list[tuple[int, int, int, int]]:
        types = range_types(self.db)
        strings = self.db.strings
        out = []
        rows = self.db.select(
            "NVTX_EVENTS",
            ["start", "end", "eventType", "text", "textId", "globalTid"],
            where='"end" IS NOT NULL',
        )
        for start, end, etype, text, text_id, gtid in rows:
            if etype in types and end >= start:
                name = text if text is not None else strings.get(text_id, "") if text_id else ""
                out.append((start, end, gtid or 0, self.name(name or "[unnamed NVTX range]")))
        return out

    def backtraces(
        self, calls: list[tuple[int, int, int, int, int]], chain_of: dict[tuple[int, int], int]
    ) -> tuple[dict[int, list[str]], int]:
        """Call index -> the names of its callers from its backtrace (root first)."""
        builder = ProfileBuilder([])
        frames = CpuFrames(self.db, builder)
        chains = Callchains(self.db, "CUDA_CALLCHAINS", frames)
        if not chains.present or not chain_of:
            return {}, 0
        by_key = {(process_key(c[2]), c[3]): i for i, c in enumerate(calls)}
        named = (
            (cid, [self.names[calls[by_key[k]][4]]]) for k, cid in chain_of.items() if k in by_key
        )
        offset = callchain_offset(chains.get, islice(named, 500))
        out: dict[int, list[str]] = {}
        for key, cid in chain_of.items():
            i = by_key.get(key)
            chain = chains.get(cid + offset) if i is not None else None
            if chain and i is not None:
                ids = callers_of_api(chain, [self.names[calls[i][4]]])
                out[i] = [builder.frames.name_of(f) for f in ids]
        return out, len(out)

    # -- whole ----------------------------------------------------------------------------
    def run(self) -> TraceData:
        gpu = self.gpu()
        calls, chain_of = self.api_calls()
        ranges = self.nvtx()
        if gpu["ts"].size == 0 and not calls:
            raise InputError(
                self.path,
                "no GPU activity and no CUDA API calls in this export "
                "(record with 'nsys profile --trace=cuda')",
            )
        n_nvtx = len(ranges)
        slices = ranges + [(s, e, g, n) for s, e, g, _, n in calls]
        ts = np.asarray([s[0] for s in slices], dtype=np.int64)
        dur = np.asarray([s[1] - s[0] for s in slices], dtype=np.int64)
        thread = np.asarray([s[2] for s in slices], dtype=np.int64)
        name = [s[3] for s in slices]
        rank = np.r_[np.zeros(n_nvtx, dtype=np.int64), np.ones(len(calls), dtype=np.int64)]
        parent = correlate.nest(thread, ts, dur, rank).parent.tolist()
        is_op = [True] * n_nvtx + [False] * len(calls)
        is_rt = [False] * n_nvtx + [True] * len(calls)
        stacks, with_bt = self.backtraces(calls, chain_of)
        span: dict[int, list[int]] = {}
        frame_thread: list[int] = []  # a shared frame is on the thread of its first call
        node_of: dict[tuple[int, int], int] = {}
        for i, callers in stacks.items():
            call = n_nvtx + i
            up = parent[call]
            for frame in callers:
                key = (up, self.name(frame))
                node = node_of.get(key)
                if node is None:
                    node = node_of[key] = len(name)
                    name.append(key[1])
                    parent.append(up)
                    is_op.append(False)
                    is_rt.append(False)
                    span[node] = [int(ts[call]), int(ts[call] + dur[call])]
                    frame_thread.append(int(thread[call]))
                s = span[node]
                s[0], s[1] = min(s[0], int(ts[call])), max(s[1], int(ts[call] + dur[call]))
                up = node
            parent[call] = up
        extra = sorted(span)
        ts = np.r_[ts, [span[k][0] for k in extra]].astype(np.int64)
        dur = np.r_[dur, [span[k][1] - span[k][0] for k in extra]].astype(np.int64)
        parent_a = np.asarray(parent, dtype=np.int64)
        is_op_a = np.asarray(is_op, dtype=bool)
        launch = self.launches(gpu, calls, n_nvtx)
        self.describe(gpu, calls, n_nvtx, with_bt, chain_of)
        labels = Labels(self.db, ProfileBuilder([]), GPU_TABLES)
        ranks = sorted(set(labels.ranks.values()))
        trace = TraceData(
            path=self.path,
            rank=ranks[0] if len(ranks) == 1 else None,
            gpu_ts=gpu["ts"],
            gpu_dur=gpu["dur"],
            gpu_kind=gpu["kind"],
            gpu_name=gpu["name"],
            gpu_device=gpu["device"],
            gpu_launch=launch,
            gpu_op=correlate.nearest_enclosing(parent_a, is_op_a, launch),
            cpu_ts=ts,
            cpu_dur=dur,
            cpu_name=np.asarray(name, dtype=np.int64),
            cpu_is_op=is_op_a,
            cpu_parent=parent_a,
            names=self.names,
            format="nsys",
            device_info=self.devices(gpu),
            cpu_is_runtime=np.asarray(is_rt, dtype=bool),
            cpu_thread=np.r_[thread, np.asarray(frame_thread, dtype=np.int64)],
            gpu_stream=gpu["stream"],
            gpu_bytes=gpu["bytes"],
        )
        trace.notes.extend(self.notes)
        return trace

    def launches(
        self, gpu: dict[str, np.ndarray], calls: list[tuple[int, int, int, int, int]], first: int
    ) -> np.ndarray:
        """The CPU slice of the API call that issued each GPU activity (-1: not in the export)."""
        by_key = {(process_key(c[2]), c[3]): first + i for i, c in enumerate(calls)}
        by_corr: dict[int, list[int]] = defaultdict(list)
        for (_, corr), i in by_key.items():
            by_corr[corr].append(i)
        out = np.full(gpu["ts"].size, -1, dtype=np.int64)
        for j, (pkey, corr) in enumerate(
            zip(gpu["pkey"].tolist(), gpu["corr"].tolist(), strict=True)
        ):
            if corr < 0:
                continue
            hit = by_key.get((pkey, corr)) if pkey >= 0 else None
            if hit is None and pkey < 0 and len(by_corr.get(corr, ())) == 1:
                hit = by_corr[corr][0]  # old exports: no process on GPU rows
            out[j] = -1 if hit is None else hit
        return out

    def devices(self, gpu: dict[str, np.ndarray]) -> list[dict[str, Any]]:
        """TARGET_INFO_GPU rows of the GPUs with activity, with Kineto's key names."""
        used = {self.names[d] for d in np.unique(gpu["device"]).tolist()}
        cols = ["id", "name", "totalMemory", "computeMajor", "computeMinor", "smCount"]
        cols += ["clockRate", "memoryBandwidth", "l2CacheSize", "busLocation"]
        out = []
        for row in self.db.select("TARGET_INFO_GPU", cols):
            d = dict(zip(cols, row, strict=True))
            if used and str(d["id"]) not in used:
                continue
            out.append(
                {
                    "id": d["id"],
                    "name": d["name"],
                    "totalGlobalMem": d["totalMemory"],
                    "computeMajor": d["computeMajor"],
                    "computeMinor": d["computeMinor"],
                    "numSms": d["smCount"],
                    "clockRateHz": d["clockRate"],
                    "memoryBandwidthBytesPerS": d["memoryBandwidth"],
                    "l2CacheSize": d["l2CacheSize"],
                    "source": "nsys TARGET_INFO_GPU",
                }
            )
        return out

    def describe(
        self,
        gpu: dict[str, np.ndarray],
        calls: list[tuple[int, int, int, int, int]],
        n_nvtx: int,
        with_bt: int,
        chain_of: dict[tuple[int, int], int],
    ) -> None:
        notes = self.notes  # (no shapes, hence no FLOPs: the CLI puts that in "unavailable")
        procs = np.unique(gpu["pkey"][gpu["pkey"] >= 0]).size
        if procs > 1:
            notes.append(
                f"{procs} processes ran GPU work in this export and are analysed as one; for "
                "one report per rank, profile each rank to its own file (nsys -o name.%q{RANK})"
            )
        if n_nvtx:
            notes.append(f"ops are the {n_nvtx:,} NVTX ranges (innermost one enclosing a launch)")
        else:
            notes.append(
                "no NVTX ranges: no op breakdown (annotate the code with NVTX, e.g. "
                "torch.autograd.profiler.emit_nvtx(), and record with --trace=cuda,nvtx)"
            )
        if calls and not with_bt:
            notes.append(
                "no CPU backtraces of CUDA API calls: findings name no call stacks (record "
                "with 'nsys profile --cudabacktrace=all')"
            )
        sync: Counter[str] = Counter()
        blocked: Counter[str] = Counter()
        for start, end, stype in self.db.select(SYNC, ["start", "end", "syncType"]):
            what = _SYNC_TYPES.get(stype, "other")
            sync[what] += 1
            blocked[what] += max(0, (end or 0) - (start or 0))
        if sync:
            parts = ", ".join(
                f"{what} {n:,} ({blocked[what] / 1e6:.3f} ms)" for what, n in sync.most_common()
            )
            notes.append(f"CUDA synchronization records (CUPTI): {parts}")
        if not self.db.has_rows(SYNC) and SYNC not in self.db.tables:
            notes.append("no CUPTI synchronization records in this export")
