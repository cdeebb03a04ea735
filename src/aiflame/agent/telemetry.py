"""GPU telemetry of one period, and who the GPU time belongs to (docs/fleet-protocol.md).

Each NVML poll covers the time since the previous one (``dt``); per GPU and poll:

* **allocated** GPU-seconds: ``dt`` for the GPU, split evenly among the workloads whose
  processes have a context on it; a GPU with no process that the kubelet's pod-resources
  API assigns to a container (:mod:`.pod_resources`) is allocated to that pod's workload
  (namespace, pod, container), which holds it even while it runs nothing;
* **busy**: ``dt x utilization.gpu``, split among the processes on it in proportion to
  their SM utilization samples (evenly when there are none); a process whose busy time the
  driver accounts itself (accounting mode on) gets that instead;
* **useful**: ``dt x sm_active`` (GPM), split as busy; absent without GPM;
* **est_flop**: ``dt x Σ pipe activity x pipe peak`` (an estimate, see :mod:`.gpu_peaks`).

A workload is the set of processes that share the workload labels (everything that says
whose work it is: namespace, pod, container, job, user, team, model, service...; not the
pid, command or rank, which differ between the processes of one job). The last poll of a
period is taken at its end, so the polls tile the period exactly.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from aiflame.agent.gpu_peaks import estimate_flops, peaks_for
from aiflame.agent.identity import service_name
from aiflame.agent.nvml import GpuHealth, GpuSample, Nvml
from aiflame.agent.pod_resources import GpuHolder
from aiflame.version import __version__

# labels of one process that do not make a workload (they differ between its processes)
PROCESS_ONLY = frozenset(
    {"pid", "comm", "command", "rank", "local_rank", "world_size", "container_id", "pod_uid"}
)
WorkloadKey = tuple[tuple[str, str], ...]
LabelsOf = Callable[[int], Mapping[str, str]]
HoldersOf = Callable[[], Mapping[str, GpuHolder]]  # GPU UUID -> the container holding it


def workload_key(labels: Mapping[str, str]) -> WorkloadKey:
    return tuple(sorted((k, v) for k, v in labels.items() if k not in PROCESS_ONLY))


@dataclass
class WorkloadUse:
    pids: set[int] = field(default_factory=set)
    gpu_uuids: set[str] = field(default_factory=set)
    allocated_s: float = 0.0
    busy_s: float = 0.0
    useful_s: float = 0.0
    est_flop: float = 0.0
    gpu_memory_bytes: int = 0
    has_gpm: bool = False
    has_flops: bool = False


@dataclass
class GpuPeriod:
    """One GPU over a period: time-weighted means, last values."""

    sample: GpuSample  # the last one
    seconds: float = 0.0
    util_s: float = 0.0  # ∫ util dt
    power_j: float = 0.0  # ∫ power dt
    gpm_s: dict[str, float] = field(default_factory=dict)  # ∫ metric dt
    gpm_seconds: float = 0.0
    flops_s: float = 0.0  # ∫ est FLOP/s dt
    flops_basis: str = ""
    est_flops: float | None = None  # the last poll's estimate


class Telemetry:
    """Polls NVML and accumulates the period (and the totals behind the counters)."""

    def __init__(
        self, nvml: Nvml, labels_of: LabelsOf, host: str, holders: HoldersOf | None = None
    ) -> None:
        self.nvml = nvml
        self.labels_of = labels_of
        self.host = host
        self.holders_of = holders
        self.holders: Mapping[str, GpuHolder] = {}  # as of the last poll
        self.last: list[GpuSample] = []
        self.health: dict[int, GpuHealth] = {}  # as of the last cut (read once a period)
        self._last_time: float | None = None
        self._acct_ms: dict[tuple[int, int], float] = {}  # (gpu, pid) -> accounted busy ms
        self.gpus: dict[int, GpuPeriod] = {}
        self.workloads: dict[WorkloadKey, WorkloadUse] = {}
        # since the agent started, for Prometheus counters
        self.total_busy_s: dict[WorkloadKey, float] = {}
        self.total_allocated_s: dict[WorkloadKey, float] = {}
        self.total_flop: dict[WorkloadKey, float] = {}
        self.period_start: float | None = None

    def poll(self) -> list[GpuSample]:
        samples = self.nvml.poll()
        now = samples[0].time if samples else None
        if now is None:
            return samples
        if self._last_time is None:
            self._last_time = self.period_start = now
        dt = max(now - self._last_time, 0.0)
        self._last_time = now
        if self.holders_of is not None:
            self.holders = self.holders_of()
        for s in samples:
            self._account(s, dt)
        self.last = samples
        return samples

    def _account(self, s: GpuSample, dt: float) -> None:
        g = self.gpus.get(s.index)
        if g is None:
            g = self.gpus[s.index] = GpuPeriod(s)
        g.sample = s
        g.seconds += dt
        if s.util is not None:
            g.util_s += s.util * dt
        if s.power_watts is not None:
            g.power_j += s.power_watts * dt
        if s.gpm:
            g.gpm_seconds += dt
            for k, v in s.gpm.items():
                g.gpm_s[k] = g.gpm_s.get(k, 0.0) + v * dt
        flops = None
        peaks = peaks_for(s.name)
        if s.gpm and peaks is not None:
            flops, g.flops_basis = estimate_flops(
                peaks,
                s.gpm.get("tensor_hmma_active"),
                s.gpm.get("tensor_active"),
                s.gpm.get("tensor_dmma_active"),
                s.gpm.get("fp16_active"),
                s.gpm.get("fp32_active"),
                s.gpm.get("fp64_active"),
            )
            g.flops_s += flops * dt
        g.est_flops = flops
        holder = self.holders.get(s.uuid)
        if not s.processes and holder is not None and dt > 0:
            self._account_holder(s, holder, dt, flops)
        if not s.processes or dt <= 0:
            self._remember_accounting(s)
            return
        by_workload: dict[WorkloadKey, list[int]] = {}
        for pid in s.processes:
            # {} for a process the configuration leaves out: its share is no one's
            by_workload.setdefault(workload_key(self.labels_of(pid)), []).append(pid)
        weights = _weights(s)
        for key, pids in by_workload.items():
            if not key:
                continue
            use = self.workloads.setdefault(key, WorkloadUse())
            use.pids.update(pids)
            use.gpu_uuids.add(s.uuid)
            use.allocated_s += dt / len(by_workload)
            self.total_allocated_s[key] = self.total_allocated_s.get(key, 0.0) + dt / len(
                by_workload
            )
            busy = 0.0
            for pid in pids:
                accounted = self._accounted_s(s, pid)
                busy += accounted if accounted is not None else (s.util or 0.0) * dt * weights[pid]
            use.busy_s += busy
            self.total_busy_s[key] = self.total_busy_s.get(key, 0.0) + busy
            share = sum(weights[p] for p in pids)
            if "sm_active" in s.gpm:
                use.useful_s += s.gpm["sm_active"] * dt * share
                use.has_gpm = True
            if flops is not None:
                use.est_flop += flops * dt * share
                use.has_flops = True
                self.total_flop[key] = self.total_flop.get(key, 0.0) + flops * dt * share
            mem = sum(s.processes[p].memory_bytes or 0 for p in pids)
            use.gpu_memory_bytes = mem  # the last poll's
        self._remember_accounting(s)

    def _account_holder(
        self, s: GpuSample, holder: GpuHolder, dt: float, flops: float | None
    ) -> None:
        """A GPU assigned to a container that runs nothing on it: its time is that pod's."""
        labels = {"host": self.host, "namespace": holder.namespace, "pod": holder.pod,
                  "container": holder.container}  # fmt: skip
        labels["service_name"] = service_name(labels)
        key = workload_key(labels)
        use = self.workloads.setdefault(key, WorkloadUse())
        use.gpu_uuids.add(s.uuid)
        use.allocated_s += dt
        self.total_allocated_s[key] = self.total_allocated_s.get(key, 0.0) + dt
        busy = (s.util or 0.0) * dt  # (what no visible process ran)
        use.busy_s += busy
        self.total_busy_s[key] = self.total_busy_s.get(key, 0.0) + busy
        if "sm_active" in s.gpm:
            use.useful_s += s.gpm["sm_active"] * dt
            use.has_gpm = True
        if flops is not None:
            use.est_flop += flops * dt
            use.has_flops = True
            self.total_flop[key] = self.total_flop.get(key, 0.0) + flops * dt

    def _accounted_s(self, s: GpuSample, pid: int) -> float | None:
        p = s.processes[pid]
        if p.accounting_busy_ms is None:
            return None
        before = self._acct_ms.get((s.index, pid))
        if before is None:
            return None  # the first reading of a process: its busy time before is not ours
        return max(p.accounting_busy_ms - before, 0.0) / 1000.0

    def _remember_accounting(self, s: GpuSample) -> None:
        for pid, p in s.processes.items():
            if p.accounting_busy_ms is not None:
                self._acct_ms[(s.index, pid)] = p.accounting_busy_ms

    # -- the period -------------------------------------------------------------------------
    def cut(self, end: float | None = None) -> dict[str, object]:
        """The period's telemetry document (docs/fleet-protocol.md), then a new period.
        A poll is taken first so that the period ends now."""
        self.poll()
        with contextlib.suppress(Exception):  # a driver in trouble: the rest still counts
            self.health = self.nvml.health()
        start = self.period_start if self.period_start is not None else end or 0.0
        end = self._last_time if self._last_time is not None else start
        doc = {
            "batch_id": str(uuid.uuid4()),
            "host": self.host,
            "agent_version": __version__,
            "start": start,
            "end": end,
            "gpus": [_gpu_doc(g) for _, g in sorted(self.gpus.items())],
            "workloads": [_workload_doc(k, u) for k, u in self.workloads.items()],
        }
        for g in self.gpus.values():  # the next period starts from here
            g.seconds = g.util_s = g.power_j = g.gpm_seconds = g.flops_s = 0.0
            g.gpm_s = {}
        self.workloads = {}
        self.period_start = end
        return doc


def _weights(s: GpuSample) -> dict[int, float]:
    """Each process's share of the GPU's busy time in this poll."""
    pids = list(s.processes)
    utils = {p: s.processes[p].sm_util or 0.0 for p in pids}
    total = sum(utils.values())
    if total > 0:
        return {p: u / total for p, u in utils.items()}
    return {p: 1.0 / len(pids) for p in pids}


def _gpu_doc(g: GpuPeriod) -> dict[str, object]:
    s = g.sample
    out: dict[str, object] = {"index": s.index, "uuid": s.uuid, "name": s.name}
    if s.pci_bus_id:
        out["pci_bus_id"] = s.pci_bus_id
    if g.seconds > 0 and s.util is not None:
        out["util"] = g.util_s / g.seconds
    for key in ("memory_used_bytes", "memory_total_bytes", "sm_clock_mhz", "temperature_c"):
        value = getattr(s, key)
        if value is not None:
            out[key] = value
    if g.seconds > 0 and s.power_watts is not None:
        out["power_watts"] = g.power_j / g.seconds
    if g.gpm_seconds > 0:
        for k, v in g.gpm_s.items():
            out[k] = v / g.gpm_seconds
        if g.flops_basis:
            out["est_flops"] = g.flops_s / g.gpm_seconds
            out["est_flops_basis"] = g.flops_basis
    return out


def _workload_doc(key: WorkloadKey, u: WorkloadUse) -> dict[str, object]:
    out: dict[str, object] = {
        "labels": dict(key),
        "pids": sorted(u.pids),
        "gpu_uuids": sorted(u.gpu_uuids),
        "allocated_gpu_seconds": u.allocated_s,
        "busy_gpu_seconds": u.busy_s,
        "gpu_memory_bytes": u.gpu_memory_bytes,
    }
    if u.has_gpm:
        out["useful_gpu_seconds"] = u.useful_s
    if u.has_flops:
        out["est_flop"] = u.est_flop
    return out


def encode_document(doc: Mapping[str, object]) -> bytes:
    return gzip.compress(json.dumps(doc, separators=(",", ":")).encode(), compresslevel=6, mtime=0)
