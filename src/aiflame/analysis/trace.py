"""The columns an analysis needs from one trace (one rank), independent of its format."""

from __future__ import annotations

from dataclasses import dataclass, field
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
