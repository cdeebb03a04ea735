"""The columns an analysis needs from one trace (one rank), independent of its format."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np


class Kind:
    """What a GPU activity is, for the time breakdown (TraceLens' buckets)."""

    COMPUTE = 0  # kernels that are not collectives
    COMM = 1  # NCCL/RCCL collectives (by kernel name)
    MEMCPY = 2
    MEMSET = 3  # counted as computation, as TraceLens does; kept apart for the report


@dataclass
class TraceData:
    """One rank's trace: GPU activity and the CPU operators that launched it.

    Times are integer nanoseconds on one clock. ``gpu_launch[j]`` is the CPU slice whose
    runtime call launched activity ``j`` (-1: not in the trace); ``gpu_op[j]`` the
    outermost operator enclosing that launch (-1: none).
    """

    path: str
    rank: str | None
    gpu_ts: np.ndarray
    gpu_dur: np.ndarray
    gpu_kind: np.ndarray
    gpu_name: np.ndarray  # index into names
    gpu_device: np.ndarray  # index into names
    gpu_launch: np.ndarray
    gpu_op: np.ndarray
    cpu_ts: np.ndarray
    cpu_dur: np.ndarray
    cpu_name: np.ndarray
    cpu_is_op: np.ndarray  # bool: an operator (cpu_op), not Python/runtime/annotation
    cpu_parent: np.ndarray  # enclosing slice, -1 at the top
    names: list[str]
    op_shapes: dict[int, tuple[Any, Any]] = field(default_factory=dict)  # op -> (dims, types)
    device_info: list[dict[str, Any]] = field(default_factory=list)
    cpu_is_runtime: np.ndarray | None = None  # bool: a runtime/driver call (cudaX, hipX)
    # Optional columns (None where the reader does not have them):
    cpu_thread: np.ndarray | None = None  # thread id of each CPU slice
    cpu_is_annotation: np.ndarray | None = None  # bool: user annotation (ProfilerStep#N...)
    gpu_stream: np.ndarray | None = None  # index into names
    gpu_bytes: np.ndarray | None = None  # bytes a memcpy/memset moved, -1: not recorded
    op_concrete: dict[int, Any] = field(default_factory=dict)  # op -> Concrete Inputs

    def threads(self) -> np.ndarray:
        """``cpu_thread``, or one thread for all slices when the reader has none."""
        if self.cpu_thread is not None:
            return self.cpu_thread
        return np.zeros(self.cpu_ts.size, dtype=np.int64)

    def select_gpu(self, keep: np.ndarray) -> TraceData:
        """The same trace with only the GPU activities where ``keep`` is true."""
        opt = {
            k: (None if getattr(self, k) is None else getattr(self, k)[keep])
            for k in ("gpu_stream", "gpu_bytes")
        }
        return replace(
            self,
            gpu_ts=self.gpu_ts[keep],
            gpu_dur=self.gpu_dur[keep],
            gpu_kind=self.gpu_kind[keep],
            gpu_name=self.gpu_name[keep],
            gpu_device=self.gpu_device[keep],
            gpu_launch=self.gpu_launch[keep],
            gpu_op=self.gpu_op[keep],
            **opt,
        )
