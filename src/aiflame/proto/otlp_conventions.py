"""How aiflame's labels, frame kinds and profile names meet OpenTelemetry's profiles signal.

Shared by the server's OTLP ingest (attributes -> labels, frame types -> kinds) and the
agent's OTLP output (the other way). Plain tables: nothing here imports the
``opentelemetry-proto`` package.

- Resource attributes by the semantic conventions become aiflame's workload labels
  (``service.name`` -> ``service_name``, ``k8s.pod.name`` -> ``pod``...); attributes without
  an aiflame name keep theirs (dots are valid in label names). Per-process and per-thread
  attributes (``process.pid``, the command line, the environment, ``thread.*``) name no
  series: a series is a workload, not a process, and a command line or an environment may
  hold a credential.
- ``profile.frame.type`` (a location attribute; values of the semantic conventions, as the
  OpenTelemetry eBPF profiler writes them: ``native``, ``kernel``, ``cpython``, ``jvm``...,
  and ``cuda`` for GPU frames) gives a frame its kind; aiflame's own finer kind travels in
  ``Function.system_name`` as in pprof (``"<name> [aiflame:<kind>]"``, proto/conventions.py).
- A profile's sample type names its ``__name__`` as aiflame's agent and Pyroscope name them.
"""

from __future__ import annotations

import re

from aiflame.model import FrameKind

FRAME_TYPE_KEY = "profile.frame.type"

# semantic conventions -> aiflame's label of the same meaning (docs/fleet-protocol.md)
ATTRIBUTE_LABELS: dict[str, str] = {
    "service.name": "service_name",
    "host.name": "host",
    "k8s.namespace.name": "namespace",
    "k8s.pod.name": "pod",
    "k8s.pod.uid": "pod_uid",
    "k8s.container.name": "container",
    "container.id": "container_id",
    "process.executable.name": "comm",
    "process.owner": "user",
}
LABEL_ATTRIBUTES: dict[str, str] = {v: k for k, v in ATTRIBUTE_LABELS.items()}
# aiflame labels written as attributes of another name or type on the way out
LABEL_ATTRIBUTES.update({"pid": "process.pid", "command": "process.command_line"})
INT_ATTRIBUTES = frozenset({"process.pid"})

# Attributes that never name a series (per process, per thread, per CPU, or secret-prone).
NOT_LABELS = frozenset(
    {
        "process.pid",
        "process.parent_pid",
        "process.command",
        "process.command_line",
        "process.command_args",
        "process.executable.path",
        "process.args_count",
        "process.working_directory",
    }
)
NOT_LABEL_PREFIXES = (
    "process.environment_variable.",
    "thread.",
    "cpu.",
    "pprof.",
    FRAME_TYPE_KEY,
)

# The workload's name when there is no service.name: a pod's owner, as the agent names it.
K8S_OWNERS = (
    "k8s.deployment.name",
    "k8s.statefulset.name",
    "k8s.daemonset.name",
    "k8s.cronjob.name",
    "k8s.job.name",
    "k8s.replicaset.name",
)

# profile.frame.type -> kind; None: native code, whose kind the name tells (C, C++, CUDA API)
FRAME_TYPE_KINDS: dict[str, FrameKind | None] = {
    "native": None,
    "go": None,
    "rust": None,
    "kernel": FrameKind.KERNEL,
    "cpython": FrameKind.PYTHON,
    "python": FrameKind.PYTHON,  # the value before the conventions named it cpython
    "jvm": FrameKind.JIT,
    "v8js": FrameKind.JIT,
    "dotnet": FrameKind.JIT,
    "beam": FrameKind.JIT,
    "luajit": FrameKind.JIT,
    "cuda": FrameKind.GPU_KERNEL,
    "cuda-pc": FrameKind.GPU_INSTRUCTION,  # Parca's eBPF profiler: a GPU PC sample
}

# kind -> profile.frame.type written by the agent ("" writes none: synthetic frames)
KIND_FRAME_TYPES: dict[FrameKind, str] = {
    FrameKind.UNKNOWN: "native",
    FrameKind.PYTHON: "cpython",
    FrameKind.NATIVE: "native",
    FrameKind.CPP: "native",
    FrameKind.KERNEL: "kernel",
    FrameKind.RUNTIME: "native",  # the CUDA/HIP runtime is native code in the process
    FrameKind.JIT: "native",  # code generated at run time (oneDNN, perf maps)
    FrameKind.GPU_KERNEL: "cuda",
    FrameKind.GPU_SOURCE: "cuda",
    FrameKind.GPU_INSTRUCTION: "cuda",
    FrameKind.GPU_STALL: "cuda",
    FrameKind.DELIMITER: "",
    FrameKind.LABEL: "",
}

# (sample type, unit) -> __name__, as aiflame's agent names its profiles
PROFILE_NAMES: dict[tuple[str, str], str] = {
    ("samples", "count"): "process_cpu",
    ("cpu", "nanoseconds"): "process_cpu",
    ("alloc_objects", "count"): "memory",
    ("alloc_space", "bytes"): "memory",
    ("inuse_objects", "count"): "memory",
    ("inuse_space", "bytes"): "memory",
    ("launches", "count"): "gpu_api",
    ("sync", "nanoseconds"): "gpu_api",
    ("copies", "count"): "gpu_api",
    ("copy", "bytes"): "gpu_api",
    ("off_cpu", "nanoseconds"): "off_cpu",
}
_NAME_CHARS = re.compile(r"[^a-zA-Z0-9_]")
_LABEL_CHARS = re.compile(r"[^a-zA-Z0-9_.]")


def profile_name(sample_type: str, unit: str) -> str:
    """The ``__name__`` of a profile of one sample type."""
    known = PROFILE_NAMES.get((sample_type, unit))
    if known:
        return known
    name = _NAME_CHARS.sub("_", sample_type)[:64]
    return name if name and not name[0].isdigit() else f"otel_{name}"


def label_name(key: str) -> str | None:
    """The label an attribute becomes, or None when it names no series."""
    if key in NOT_LABELS or key.startswith(NOT_LABEL_PREFIXES) or not key or key[:2] == "__":
        return None  # (names starting with __ are reserved: __name__, __delta__)
    mapped = ATTRIBUTE_LABELS.get(key)
    if mapped:
        return mapped
    name = _LABEL_CHARS.sub("_", key)[:128]
    return name if not name[0].isdigit() else "_" + name


def attribute_name(label: str) -> str:
    """The attribute an aiflame label is written as."""
    return LABEL_ATTRIBUTES.get(label, label)


def frame_type_kind(frame_type: str) -> FrameKind | None:
    """The kind a frame type gives (None: tell it from the name)."""
    return FRAME_TYPE_KINDS.get(frame_type)
