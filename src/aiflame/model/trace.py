"""A GPU timeline trace as columns: what the analyses read, whatever the input format.

Sources (Kineto, Nsight Systems, generic Chrome traces) fill a :class:`TraceData` with the
GPU activity of one rank and the CPU slices around it, linked by launch; ``analysis`` reads
nothing else. Times are integer nanoseconds on one clock.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

# Communication kernels, recognised by what they do, whatever library wrote them:
# - by library (substring, any case): NCCL/RCCL and vLLM's custom all-reduce as TraceLens
#   matches them, and the libraries that move data between GPUs in kernels of their own
#   (DeepEP/MoRI, NVSHMEM and its InfiniBand GPUDirect Async transport IBGDA, MSCCL/MSCCL++,
#   UCCL, the all-reduce kernels of PyTorch symmetric memory, TensorRT-LLM and vLLM's quick
#   reduce), which TraceLens would count as computation;
# - by namespace: expert-parallel libraries (``deep_ep::``, DeepSeek's ``dpsk::ep::``,
#   ``...::internode::``, ``intranode::``, ``internode_ll::``);
# - by the kernel function's own name: expert-parallel dispatch and combine and their
#   notifications (``notify_dispatch``, ``cached_notify``, ``dispatch_ll``, MoRI's
#   ``EpDispatchInterNodeKernel``), all-to-all (``a2a``), send/receive, all-gather,
#   reduce-scatter, all-reduce, broadcast, collective permutes.
COMM_PATTERN = re.compile(
    r"nccl|rccl|cross_device_reduce|deep_ep::|mori::|mscclpp|msccl|nvshmem|ibgda|uccl|"
    r"allreduce|_all_reduce",
    re.IGNORECASE,
)
_COMM_NAMESPACE = re.compile(r"(^|[\s:<(])(\w+_)?ep::|(^|::)(intra|inter)node(_ll)?::", re.I)
_COMM_FUNCTION = re.compile(
    r"^(ep_?)?(cached_)?(notify_)?(dispatch|combine)(_ll|_?kernel|_inter_?node|_intra_?node)*$|"
    r"^ep_?(dispatch|combine)|^cached_notify|all_?to_?all|all_?gather|reduce_?scatter|"
    r"all_?reduce|^(send|recv|send_?recv|isend|irecv|broadcast|bcast|ppermute|"
    r"collective_?permute)(_?kernel)?$",
    re.IGNORECASE,
)
_A2A = re.compile(r"A2A|(^|_)a2a(_|$)")  # all-to-all, as a word: moeA2ADispatchKernel, a2a_send


def kernel_function(name: str) -> tuple[str, str]:
    """(qualified name, function name) of a kernel's name as profilers write it:
    ``void dpsk::ep::internode::combine<false, 8>(int4*, ...)`` ->
    (``dpsk::ep::internode::combine``, ``combine``)."""
    s = name.strip().replace("(anonymous namespace)", "anonymous")
    s = s.removeprefix("void ").strip()
    cut = [i for i in (s.find("<"), s.find("(")) if i >= 0]
    head = s[: min(cut)] if cut else s
    head = head.split()[-1] if head.split() else head  # a return type before the name
    return head, head.rsplit("::", 1)[-1]


def is_communication(name: str) -> bool:
    """A collective or GPU-to-GPU transfer kernel, by its name."""
    if COMM_PATTERN.search(name) is not None:
        return True
    head, function = kernel_function(name)
    return (
        _COMM_NAMESPACE.search(head) is not None
        or _COMM_FUNCTION.search(function) is not None
        or _A2A.search(function) is not None
    )


class Kind:
    """What a GPU activity is, for the time breakdown (TraceLens' buckets)."""

    COMPUTE = 0  # kernels that are not collectives
    COMM = 1  # NCCL/RCCL collectives (by kernel name)
    MEMCPY = 2
    MEMSET = 3  # counted as computation, as TraceLens does; kept apart for the report


_GPU_OPTIONAL = ("gpu_stream", "gpu_bytes", "gpu_origin")


@dataclass
class TraceData:
    """One rank's trace: GPU activity and the CPU slices that launched it.

    ``gpu_launch[j]`` is the CPU slice whose runtime call launched activity ``j`` (-1: not
    in the trace); ``gpu_op[j]`` the nearest operator enclosing that launch (-1: none).
    ``cpu_parent`` nests the CPU slices of each thread (-1 at the top). Names are indices
    into ``names``.
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
    format: str = "kineto"  # the source that read it: kineto, nsys, trace_events
    op_shapes: dict[int, tuple[Any, Any]] = field(default_factory=dict)  # op -> (dims, types)
    device_info: list[dict[str, Any]] = field(default_factory=list)
    cpu_is_runtime: np.ndarray | None = None  # bool: a runtime/driver call (cudaX, hipX)
    # Optional columns (None where the reader does not have them):
    cpu_thread: np.ndarray | None = None  # thread id of each CPU slice
    cpu_is_annotation: np.ndarray | None = None  # bool: user annotation (ProfilerStep#N...)
    gpu_stream: np.ndarray | None = None  # index into names
    gpu_bytes: np.ndarray | None = None  # bytes a memcpy/memset moved, -1: not recorded
    # For graph replays matched to their capture: the captured launch of each replayed
    # activity (a CPU slice of the capture, on its own thread), -1 elsewhere; and how many
    # CPU slices are this trace's own (the capture's follow them, at the capture's times).
    gpu_origin: np.ndarray | None = None
    cpu_own: int | None = None
    # Graph launches that fit several captured graphs (the capture of other batch sizes
    # names the same kernels): matched to the first, so their operators' shapes may not be
    # the replay's.
    replays_ambiguous: int = 0
    cpu_kernel: np.ndarray | None = None  # the kernel a launch call names (index), -1: none
    op_concrete: dict[int, Any] = field(default_factory=dict)  # op -> Concrete Inputs
    # Host memory freed (profile_memory=True's ``[memory]`` events of the CPU device, the
    # frees only): when, on which thread (as cpu_thread), how many bytes.
    host_free_ts: np.ndarray | None = None
    host_free_thread: np.ndarray | None = None
    host_free_bytes: np.ndarray | None = None
    notes: list[str] = field(default_factory=list)  # what the source could not give

    def threads(self) -> np.ndarray:
        """``cpu_thread``, or one thread for all slices when the reader has none."""
        if self.cpu_thread is not None:
            return self.cpu_thread
        return np.zeros(self.cpu_ts.size, dtype=np.int64)

    def own_slices(self) -> int:
        """How many CPU slices (the first ones) happened on this trace's timeline."""
        return self.cpu_ts.size if self.cpu_own is None else self.cpu_own

    def op_launch(self) -> np.ndarray:
        """Per GPU activity, the CPU slice its operator is looked up from: its launch, or
        for a replayed graph matched to its capture, the captured launch."""
        if self.gpu_origin is None:
            return self.gpu_launch
        return np.where(self.gpu_origin >= 0, self.gpu_origin, self.gpu_launch)

    def select_gpu(self, keep: np.ndarray) -> TraceData:
        """The same trace with only the GPU activities where ``keep`` is true."""
        opt: dict[str, Any] = {
            k: (None if getattr(self, k) is None else getattr(self, k)[keep]) for k in _GPU_OPTIONAL
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
