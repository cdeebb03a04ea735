"""``/metrics`` for Prometheus (prometheus-client), read from the agent's state at scrape.

GPU metrics carry dcgm-exporter's names where the meaning is the same, and its labels
(``gpu``, ``UUID``, ``device``, ``modelName``, ``pci_bus_id``, ``Hostname``, and
``namespace``/``pod``/``container`` of the pod using the GPU), so dashboards made for
dcgm-exporter work unchanged. Units are dcgm-exporter's: ``FB_USED`` in MiB, power in W,
``PROF_*`` as ratios 0..1, utilisation in percent.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

if TYPE_CHECKING:
    from aiflame.agent.daemon import Agent

MIB = 1 << 20
BUSY = "aiflame_gpu_busy_seconds"
GPU_LABELS = [
    "gpu",
    "UUID",
    "device",
    "modelName",
    "pci_bus_id",
    "Hostname",
    "namespace",
    "pod",
    "container",
]
# dcgm-exporter name, help, GpuSample attribute or GPM key, scale
DEV_FIELDS = (
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", "util", 100.0),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", "memory_used_bytes", 1 / MIB),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", "power_watts", 1.0),
    ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", "sm_clock_mhz", 1.0),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", "temperature_c", 1.0),
)
PROF_FIELDS = (  # name, what, GPM key (help texts are dcgm-exporter's, shortened)
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "graphics engine active", "gr_engine_active"),
    ("DCGM_FI_PROF_SM_ACTIVE", "cycles an SM has at least 1 warp assigned", "sm_active"),
    ("DCGM_FI_PROF_SM_OCCUPANCY", "warps resident on an SM", "sm_occupancy"),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "cycles a tensor pipe is active", "tensor_active"),
    (
        "DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE",
        "cycles the HMMA pipe is active",
        "tensor_hmma_active",
    ),
    (
        "DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE",
        "cycles the DMMA pipe is active",
        "tensor_dmma_active",
    ),
    (
        "DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE",
        "cycles the IMMA pipe is active",
        "tensor_imma_active",
    ),
    ("DCGM_FI_PROF_PIPE_FP16_ACTIVE", "cycles the fp16 pipes are active", "fp16_active"),
    ("DCGM_FI_PROF_PIPE_FP32_ACTIVE", "cycles the fp32 pipes are active", "fp32_active"),
    ("DCGM_FI_PROF_PIPE_FP64_ACTIVE", "cycles the fp64 pipes are active", "fp64_active"),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "cycles the memory interface is active", "dram_active"),
)
WORKLOAD_LABELS = [
    "host", "namespace", "pod", "container", "job_id", "job_user", "job_name", "user",
    "service_name",
]  # fmt: skip


@dataclass
class AgentCounters:
    """What the agent counts itself (thread-safe increments)."""

    profile_samples: int = 0
    profiles_cut: int = 0
    dropped_events: dict[str, int] | None = None

    def __post_init__(self) -> None:
        self.dropped_events = {}
        self.lock = threading.Lock()

    def drop(self, what: str, n: int) -> None:
        if n <= 0:
            return
        with self.lock:
            assert self.dropped_events is not None
            self.dropped_events[what] = self.dropped_events.get(what, 0) + n


class AgentCollector(Collector):
    def __init__(self, agent: Agent, extra_labels: list[str]) -> None:
        self.agent = agent
        self.workload_labels = WORKLOAD_LABELS + [
            x for x in extra_labels if x not in WORKLOAD_LABELS
        ]

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        yield from self._gpu_metrics()
        yield from self._workload_metrics()
        yield from self._agent_metrics()

    # -- GPUs -------------------------------------------------------------------------------
    def _gpu_metrics(self) -> Iterator[GaugeMetricFamily]:
        telemetry = self.agent.telemetry
        if telemetry is None:
            return
        samples = list(telemetry.last)
        families = {
            name: GaugeMetricFamily(name, help_, labels=GPU_LABELS)
            for name, help_, _, _ in DEV_FIELDS
        }
        prof = {
            name: GaugeMetricFamily(name, help_, labels=GPU_LABELS)
            for name, help_, _ in PROF_FIELDS
        }
        free = GaugeMetricFamily(
            "DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", labels=GPU_LABELS
        )
        flops = GaugeMetricFamily(
            "aiflame_gpu_flops_estimate",
            "Estimated FLOP/s: GPM pipe activity x peak per pipe (an upper bound; see basis).",
            labels=[*GPU_LABELS, "basis"],
        )
        proc_mem = GaugeMetricFamily(
            "aiflame_process_gpu_memory_bytes",
            "GPU memory of a process (NVML).",
            labels=["gpu", "UUID", "Hostname", "pid", "comm", *self.workload_labels[1:]],
        )
        proc_sm = GaugeMetricFamily(
            "aiflame_process_sm_utilization",
            "SM utilization of a process, 0..1 (NVML samples of the last poll).",
            labels=["gpu", "UUID", "Hostname", "pid", "comm", *self.workload_labels[1:]],
        )
        for s in samples:
            pod = self._pod_of(s)
            values = [
                str(s.index),
                s.uuid,
                f"nvidia{s.index}",
                s.name,
                s.pci_bus_id,
                telemetry.host,
                *pod,
            ]
            for name, _, attr, scale in DEV_FIELDS:
                v = getattr(s, attr)
                if v is not None:
                    families[name].add_metric(values, float(v) * scale)
            if s.memory_total_bytes is not None and s.memory_used_bytes is not None:
                free.add_metric(values, (s.memory_total_bytes - s.memory_used_bytes) / MIB)
            for name, _, key in PROF_FIELDS:
                if key in s.gpm:
                    prof[name].add_metric(values, s.gpm[key])
            g = telemetry.gpus.get(s.index)
            if g is not None and g.est_flops is not None:
                flops.add_metric([*values, g.flops_basis], g.est_flops)
            for pid, p in s.processes.items():
                labels = telemetry.labels_of(pid)
                row = [str(s.index), s.uuid, telemetry.host, str(pid), labels.get("comm", "")]
                row += [labels.get(k, "") for k in self.workload_labels[1:]]
                if p.memory_bytes is not None:
                    proc_mem.add_metric(row, float(p.memory_bytes))
                if p.sm_util is not None:
                    proc_sm.add_metric(row, p.sm_util)
        yield from families.values()
        yield free
        yield from prof.values()
        yield flops
        yield proc_mem
        yield proc_sm

    def _pod_of(self, s) -> list[str]:
        """namespace, pod, container of the pod the kubelet assigned the GPU to, as
        dcgm-exporter labels it; else of the (first) pod with a process on the GPU."""
        telemetry = self.agent.telemetry
        assert telemetry is not None
        holder = telemetry.holders.get(s.uuid)
        if holder is not None:
            return [holder.namespace, holder.pod, holder.container]
        for pid in sorted(s.processes):
            labels = telemetry.labels_of(pid)
            if labels.get("pod"):
                return [labels.get("namespace", ""), labels["pod"], labels.get("container", "")]
        return ["", "", ""]

    def _workload_metrics(self) -> Iterator[CounterMetricFamily]:
        telemetry = self.agent.telemetry
        if telemetry is None:
            return
        specs = (
            (BUSY, "GPU-seconds a kernel of the workload ran (utilization x time).",
             telemetry.total_busy_s),
            ("aiflame_gpu_allocated_seconds", "GPU-seconds the workload held a GPU.",
             telemetry.total_allocated_s),
            ("aiflame_gpu_estimated_flop", "Estimated FLOP (GPM pipe activity x peaks).",
             telemetry.total_flop),
        )  # fmt: skip
        for name, help_, totals in specs:
            fam = CounterMetricFamily(name, help_, labels=self.workload_labels)
            for key, value in list(totals.items()):
                labels = dict(key)
                fam.add_metric([labels.get(k, "") for k in self.workload_labels], value)
            yield fam

    # -- the agent itself -------------------------------------------------------------------
    def _agent_metrics(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        a = self.agent
        host = [a.identities.host]
        c = CounterMetricFamily(
            "aiflame_profile_samples", "CPU samples collected into profiles.", labels=["host"]
        )
        c.add_metric(host, a.counters.profile_samples)
        yield c
        pushed = CounterMetricFamily(
            "aiflame_profiles_pushed",
            "Entries a destination accepted.",
            labels=["host", "destination", "kind"],
        )
        failures = CounterMetricFamily(
            "aiflame_push_failures",
            "Push attempts that failed, by reason.",
            labels=["host", "destination", "reason"],
        )
        for sender in a.senders:
            for kind, n in list(sender.stats.pushed.items()):
                pushed.add_metric([*host, sender.dest.name, kind], n)
            for reason, n in list(sender.stats.failures.items()):
                failures.add_metric([*host, sender.dest.name, reason], n)
        yield pushed
        yield failures
        g = GaugeMetricFamily("aiflame_spool_bytes", "Bytes waiting in the spool.", labels=["host"])
        g.add_metric(host, a.spool.bytes)
        yield g
        dropped = CounterMetricFamily(
            "aiflame_dropped_events", "Events lost, by what was lost.", labels=["host", "what"]
        )
        for what, n in a.dropped_events().items():
            dropped.add_metric([*host, what], n)
        yield dropped
        cpu = CounterMetricFamily(
            "aiflame_agent_cpu_seconds",
            "CPU time of the agent: its own, and its BPF programs' in the kernel.",
            labels=["host", "part"],
        )
        cpu.add_metric([*host, "agent"], a.budget.total_agent_cpu_s)
        cpu.add_metric([*host, "bpf"], a.budget.total_bpf_cpu_s)
        yield cpu
        rate = GaugeMetricFamily(
            "aiflame_sampling_rate_hz",
            "CPU sampling rate in use (lowered by the CPU budget).",
            labels=["host"],
        )
        rate.add_metric(host, a.budget.rate_hz)
        yield rate
        if a.profiler is not None:
            seen = CounterMetricFamily(
                "aiflame_processes_seen", "Processes the agent has seen start.", labels=["host"]
            )
            seen.add_metric(host, a.profiler.stats.processes_seen)
            yield seen
        procs = GaugeMetricFamily(
            "aiflame_kineto_processes",
            "Processes polling the agent's libkineto endpoint.",
            labels=["host"],
        )
        procs.add_metric(host, len(a.fabric.processes()) if a.fabric is not None else 0)
        yield procs


def serve_metrics(address: str, collector: Collector) -> tuple[Callable[[], None], int]:
    """Serve ``/metrics`` on ``host:port``; returns (stop, the port)."""
    from prometheus_client import start_http_server

    host, _, port = address.rpartition(":")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    server, thread = start_http_server(
        int(port), addr=host.strip("[]") or "0.0.0.0", registry=registry
    )

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    return stop, server.server_address[1]
