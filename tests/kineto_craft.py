"""Kineto traces written event by event, in the PyTorch profiler's own format.

For tests that need a pattern no recorded trace in ``tests/data`` shows: the events carry
the fields torch.profiler writes (``cat`` ``python_function``/``cpu_op``/``user_annotation``/
``cuda_runtime``/``cuda_driver``/``kernel``/``gpu_memcpy``/``gpu_memset``, ``args`` with
``correlation``, ``External id``, ``device``, ``stream``, ``bytes``, ``ac2g`` flow arrows,
``[memory]`` instant events with ``Bytes``/``Addr``/``Device Type``), the top-level
``deviceProperties`` and ``distributedInfo``. Times are microseconds, as in the files.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

A100 = {
    "id": 0, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85095874560,
    "computeMajor": 8, "computeMinor": 0, "maxThreadsPerBlock": 1024,
    "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536,
    "regsPerMultiprocessor": 65536, "warpSize": 32, "sharedMemPerBlock": 49152,
    "sharedMemPerMultiprocessor": 167936, "numSms": 108, "sharedMemPerBlockOptin": 166912,
}  # fmt: skip
H800 = {**A100, "name": "NVIDIA H800", "totalGlobalMem": 84943110144, "computeMajor": 9,
        "numSms": 132}  # fmt: skip


class Trace:
    """A trace being written: add events, then :meth:`write` it (``.json.gz``)."""

    def __init__(self, device: dict[str, Any] = A100, pid: int = 4242, tid: int = 4242) -> None:
        self.pid, self.tid = pid, tid
        self.device = device
        self.events: list[dict[str, Any]] = []
        self.meta: dict[str, Any] = {"schemaVersion": 1, "deviceProperties": [device]}
        self._corr = 100
        self._ext = 1

    def rank(self, rank: int, world: int) -> Trace:
        self.meta["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": world}
        return self

    def _cpu(self, cat: str, name: str, ts: float, dur: float, tid: int | None, **args: Any):
        self.events.append({
            "ph": "X", "cat": cat, "name": name, "pid": self.pid,
            "tid": self.tid if tid is None else tid, "ts": ts, "dur": dur, "args": args,
        })  # fmt: skip
        return self.events[-1]

    def py(self, name: str, ts: float, dur: float, tid: int | None = None) -> dict[str, Any]:
        """A Python function (``file.py(12): fn``), as with_stack=True records them."""
        return self._cpu("python_function", name, ts, dur, tid, **{"Python id": len(self.events)})

    def op(
        self, name: str, ts: float, dur: float, tid: int | None = None, **shapes: Any
    ) -> dict[str, Any]:
        """An operator; ``dims``/``types``/``concrete`` as record_shapes=True writes them."""
        args: dict[str, Any] = {"External id": self._ext, "Sequence number": self._ext}
        self._ext += 1
        for key, field in (("dims", "Input Dims"), ("types", "Input type"),
                           ("concrete", "Concrete Inputs")):  # fmt: skip
            if key in shapes:
                args[field] = shapes[key]
        return self._cpu("cpu_op", name, ts, dur, tid, **args)

    def annotation(self, name: str, ts: float, dur: float, tid: int | None = None):
        """A user annotation: ``ProfilerStep#N``, ``record_function`` blocks."""
        return self._cpu("user_annotation", name, ts, dur, tid)

    def runtime(
        self,
        name: str,
        ts: float,
        dur: float,
        tid: int | None = None,
        cat: str = "cuda_runtime",
        **args: Any,
    ) -> dict[str, Any]:
        """A runtime (or ``cuda_driver``) call that launches nothing (a launch while a graph
        is captured; ``kernel=`` names its kernel as ROCm's profiler does)."""
        return self._cpu(cat, name, ts, dur, tid, correlation=self._next(), **args)

    def graph_launch(
        self,
        ts: float,
        dur: float,
        kernels: list[tuple[str, float, float]],
        stream: int = 7,
        call: str = "cudaGraphLaunch",
    ) -> None:
        """A graph launch and the kernels its replay runs (all with its correlation id)."""
        corr = self._next()
        self._cpu("cuda_runtime", call, ts, dur, None, correlation=corr)
        for name, gpu_ts, gpu_dur in kernels:
            self.events.append({
                "ph": "X", "cat": "kernel", "name": name, "pid": self.device["id"],
                "tid": stream, "ts": gpu_ts, "dur": gpu_dur,
                "args": {"device": self.device["id"], "stream": stream, "correlation": corr},
            })  # fmt: skip

    def _next(self) -> int:
        self._corr += 1
        return self._corr

    def launch(
        self,
        kernel: str,
        ts: float,
        dur: float,
        gpu_ts: float,
        gpu_dur: float,
        stream: int = 7,
        call: str = "cudaLaunchKernel",
        tid: int | None = None,
        cat: str = "kernel",
        **gpu_args: Any,
    ) -> dict[str, Any]:
        """A launch call and the GPU activity it launched (linked by correlation id and an
        ``ac2g`` arrow); ``cat``: ``kernel``, ``gpu_memcpy`` or ``gpu_memset``."""
        corr = self._next()
        tid = self.tid if tid is None else tid
        self._cpu("cuda_runtime", call, ts, dur, tid, correlation=corr,
                  **{"External id": self._ext})  # fmt: skip
        gpu = {
            "ph": "X", "cat": cat, "name": kernel, "pid": self.device["id"], "tid": stream,
            "ts": gpu_ts, "dur": gpu_dur,
            "args": {"External id": self._ext, "device": self.device["id"], "context": 1,
                     "stream": stream, "correlation": corr, **gpu_args},
        }  # fmt: skip
        self.events.append(gpu)
        self.events.append({"ph": "s", "id": corr, "pid": self.pid, "tid": tid, "ts": ts,
                            "cat": "ac2g", "name": "ac2g"})  # fmt: skip
        self.events.append({"ph": "f", "id": corr, "pid": gpu["pid"], "tid": stream,
                            "ts": gpu_ts, "cat": "ac2g", "name": "ac2g", "bp": "e"})  # fmt: skip
        return gpu

    def copy(
        self,
        direction: str,
        memory: str,
        ts: float,
        dur: float,
        gpu_ts: float,
        gpu_dur: float,
        nbytes: int,
        call: str = "cudaMemcpyAsync",
        stream: int = 7,
    ) -> dict[str, Any]:
        """A copy as CUPTI names it: ``Memcpy DtoH (Device -> Pageable)``."""
        src, dst = (memory, "Device") if direction == "HtoD" else ("Device", memory)
        if direction == "DtoD":
            src = dst = "Device"
        name = f"Memcpy {direction} ({src} -> {dst})"
        return self.launch(name, ts, dur, gpu_ts, gpu_dur, stream, call, cat="gpu_memcpy",
                           bytes=nbytes)  # fmt: skip

    def memory(self, ts: float, nbytes: int, addr: int, device_type: int = 0, device: int = -1):
        """A ``[memory]`` event (profile_memory=True): ``nbytes`` < 0 for a free."""
        self.events.append({
            "ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]",
            "pid": self.pid, "tid": self.tid, "ts": ts,
            "args": {"Total Reserved": 0, "Total Allocated": 0, "Bytes": nbytes, "Addr": addr,
                     "Device Id": device, "Device Type": device_type},
        })  # fmt: skip

    def write(self, path: Path) -> Path:
        doc = {**self.meta, "traceEvents": self.events, "traceName": path.name}
        with gzip.open(path, "wt", encoding="utf-8") as f:
            json.dump(doc, f)
        return path
