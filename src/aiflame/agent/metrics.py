"""``/metrics`` for Prometheus (prometheus-client), read from the agent's state at scrape,
and the health probes (``/healthz``, ``/readyz``) on the same port.

GPU metrics carry dcgm-exporter's names where the meaning is the same, and its labels
(``gpu``, ``UUID``, ``device``, ``modelName``, ``pci_bus_id``, ``Hostname``, ``GPU_I_PROFILE``
and ``GPU_I_ID`` of a MIG instance, and ``namespace``/``pod``/``container`` of the pod using
the GPU), so dashboards made for dcgm-exporter work unchanged. Units are dcgm-exporter's:
``FB_USED`` in MiB, power in W, ``PROF_*`` as ratios 0..1, utilisation in percent, energy in
mJ. Where a dcgm-exporter already runs (the GPU Operator's default), the same series twice
would double every ``sum by (gpu)``: ``dcgm_metrics = "drop"`` leaves them to it (the
dashboards read its series), ``"prefix"`` names the agent's ``aiflame_DCGM_FI_*``; the
series of the agent's own (``aiflame_*``) are always there.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

from aiflame.agent.nvml import CLOCK_EVENT_REASONS, GpuSample

if TYPE_CHECKING:
    from aiflame.agent.budget import CpuBudget
    from aiflame.agent.identity import Identities
    from aiflame.agent.kineto_ipc import KinetoFabric
    from aiflame.agent.nvml import Nvml
    from aiflame.agent.profiler import ContinuousProfiler
    from aiflame.agent.push import Sender
    from aiflame.agent.spool import Spool
    from aiflame.agent.telemetry import Telemetry

MIB = 1 << 20
BUSY = "aiflame_gpu_busy_seconds"
GPU_LABELS = [
    "gpu",
    "UUID",
    "device",
    "modelName",
    "pci_bus_id",
    "Hostname",
    "GPU_I_PROFILE",
    "GPU_I_ID",
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
# dcgm-exporter's name, help, GpuHealth key
HEALTH_FIELDS = (
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "Single-bit volatile ECC errors.",
     "ecc_sbe_volatile"),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "Double-bit volatile ECC errors.",
     "ecc_dbe_volatile"),
    ("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "Single-bit persistent ECC errors.",
     "ecc_sbe_aggregate"),
    ("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "Double-bit persistent ECC errors.",
     "ecc_dbe_aggregate"),
    ("DCGM_FI_DEV_RETIRED_SBE", "Retired pages due to single-bit errors.",
     "retired_pages_sbe"),
    ("DCGM_FI_DEV_RETIRED_DBE", "Retired pages due to double-bit errors.",
     "retired_pages_dbe"),
    ("DCGM_FI_DEV_RETIRED_PENDING", "Pages pending retirement (1: yes).",
     "retired_pages_pending"),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
     "Remapped rows for correctable errors.", "remapped_rows_correctable"),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
     "Remapped rows for uncorrectable errors.", "remapped_rows_uncorrectable"),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "Whether remapping of rows has failed.",
     "row_remap_failure"),
    ("DCGM_FI_DEV_ROW_REMAP_PENDING", "Whether a row remapping is pending.",
     "row_remap_pending"),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
     "Total energy consumption since boot (in mJ).", "energy_mj"),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "PCIe transmit throughput (in B/s).",
     "pcie_tx_bytes_per_s"),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "PCIe receive throughput (in B/s).",
     "pcie_rx_bytes_per_s"),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "Total number of PCIe retries.",
     "pcie_replays"),
    ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
     "NVLink flow-control CRC errors.", "nvlink_crc_flit_errors"),
    ("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "NVLink data CRC errors.",
     "nvlink_crc_data_errors"),
    ("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "NVLink retries.",
     "nvlink_replay_errors"),
    ("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "NVLink recovery errors.",
     "nvlink_recovery_errors"),
)  # fmt: skip
FB_USED, FB_FREE = "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE"
XID, THROTTLE = "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"
WORKLOAD_LABELS = [
    "host", "namespace", "pod", "container", "job_id", "job_user", "job_name", "user",
    "service_name",
]  # fmt: skip


class AgentState(Protocol):
    """What the collector reads of the running agent at each scrape (the daemon's ``Agent``,
    which imports this module: described here, not imported)."""

    identities: Identities
    counters: AgentCounters
    spool: Spool
    budget: CpuBudget
    profiler: ContinuousProfiler | None
    telemetry: Telemetry | None
    nvml: Nvml | None
    senders: list[Sender]
    fabric: KinetoFabric | None

    def dropped_events(self) -> dict[str, int]: ...


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
    def __init__(
        self,
        agent: AgentState,
        extra_labels: list[str],
        dcgm: str = "keep",
        pid_label: bool = False,
    ) -> None:
        self.agent = agent
        self.workload_labels = WORKLOAD_LABELS + [
            x for x in extra_labels if x not in WORKLOAD_LABELS
        ]
        self.dcgm = dcgm  # "keep", "prefix", "drop" (config.DCGM_MODES)
        self.pid_label = pid_label  # a series per process for the per-process GPU metrics

    def collect(self) -> Iterator[Metric]:
        yield from self._gpu_metrics()
        yield from self._health_metrics()
        yield from self._workload_metrics()
        yield from self._agent_metrics()

    def _dcgm_families(self, specs: list[tuple[str, str]]) -> dict[str, GaugeMetricFamily]:
        """{dcgm-exporter name: its family here} for ``(name, help)`` pairs, under the name
        ``dcgm_metrics`` says (none with "drop": dcgm-exporter has them). Gauges all: a
        counter of prometheus-client would be named ``..._total``, where dcgm-exporter's
        (``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION``) are not; ``rate()`` reads either."""
        if self.dcgm == "drop":
            return {}
        prefix = "aiflame_" if self.dcgm == "prefix" else ""
        return {
            name: GaugeMetricFamily(prefix + name, help_, labels=GPU_LABELS)
            for name, help_ in specs
        }

    # -- GPUs -------------------------------------------------------------------------------
    def _gpu_metrics(self) -> Iterator[Metric]:
        telemetry = self.agent.telemetry
        if telemetry is None:
            return
        dev = self._dcgm_families([(name, help_) for name, help_, _, _ in DEV_FIELDS])
        prof = self._dcgm_families([(name, help_) for name, help_, _ in PROF_FIELDS])
        memory = self._dcgm_families([(FB_FREE, "Framebuffer memory free (in MiB).")])
        flops = GaugeMetricFamily(
            "aiflame_gpu_flops_estimate",
            "Estimated FLOP/s: GPM pipe activity x peak per pipe (an upper bound; see basis).",
            labels=[*GPU_LABELS, "basis"],
        )
        who = ["pid"] if self.pid_label else []
        process_labels = ["gpu", "UUID", "Hostname", *who, "comm", *self.workload_labels[1:]]
        proc_mem = GaugeMetricFamily(
            "aiflame_process_gpu_memory_bytes",
            "GPU memory of the processes of a workload on a GPU (NVML).",
            labels=process_labels,
        )
        proc_sm = GaugeMetricFamily(
            "aiflame_process_sm_utilization",
            "SM utilization of the processes of a workload on a GPU, 0..1 (NVML samples).",
            labels=process_labels,
        )
        for s in list(telemetry.last):
            values = self._gpu_labels(s)
            for name, _, attr, scale in DEV_FIELDS:
                v = getattr(s, attr)
                if v is not None and name in dev:
                    dev[name].add_metric(values, float(v) * scale)
            used, total = s.memory_used_bytes, s.memory_total_bytes
            if used is not None and total is not None and FB_FREE in memory:
                memory[FB_FREE].add_metric(values, (total - used) / MIB)
            for name, _, key in PROF_FIELDS:
                if key in s.gpm and name in prof:
                    prof[name].add_metric(values, s.gpm[key])
            g = telemetry.gpus.get(s.index)
            if g is not None and g.est_flops is not None:
                flops.add_metric([*values, g.flops_basis], g.est_flops)
            # per workload on the GPU (and per process where pid is a series label): summed
            memories: dict[tuple[str, ...], float] = {}
            sms: dict[tuple[str, ...], float] = {}
            for pid, p in s.processes.items():
                labels = telemetry.labels_of(pid)
                if not labels:
                    continue  # left out by the configuration
                row = (str(s.index), s.uuid, telemetry.host, *([str(pid)] if who else []),
                       labels.get("comm", ""),
                       *[labels.get(k, "") for k in self.workload_labels[1:]])  # fmt: skip
                if p.memory_bytes is not None:
                    memories[row] = memories.get(row, 0.0) + float(p.memory_bytes)
                if p.sm_util is not None:
                    sms[row] = sms.get(row, 0.0) + p.sm_util
            for row, v in memories.items():
                proc_mem.add_metric(list(row), v)
            for row, v in sms.items():
                proc_sm.add_metric(list(row), v)
        yield from dev.values()
        yield from memory.values()
        yield from prof.values()
        yield flops
        yield proc_mem
        yield proc_sm

    def _gpu_labels(
        self, s: GpuSample, pod: list[str] | None = None, mig: tuple[str, str] = ("", "")
    ) -> list[str]:
        """The values of GPU_LABELS for GPU ``s`` (or one of its MIG instances)."""
        telemetry = self.agent.telemetry
        assert telemetry is not None
        pod = pod if pod is not None else self._pod_of(s)
        return [str(s.index), s.uuid, f"nvidia{s.index}", s.name, s.pci_bus_id, telemetry.host,
                *mig, *pod]  # fmt: skip

    def _pod_of(self, s: GpuSample) -> list[str]:
        """namespace, pod, container of the pod the kubelet assigned the GPU to, as
        dcgm-exporter labels it; else of the (first) pod with a process on it."""
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

    def _health_metrics(self) -> Iterator[Metric]:
        """What operators alert on: XID errors, ECC, retired pages and remapped rows, clock
        event reasons, energy, PCIe and NVLink; the memory of each MIG instance."""
        telemetry, nvml = self.agent.telemetry, self.agent.nvml
        if telemetry is None or nvml is None:
            return
        fields = self._dcgm_families([(name, help_) for name, help_, _ in HEALTH_FIELDS])
        extra = self._dcgm_families(
            [
                (XID, "Value of the last XID error encountered."),
                (THROTTLE, "Current clock event (throttle) reasons, a bit mask."),
                (FB_USED, "Framebuffer memory used (in MiB)."),
                (FB_FREE, "Framebuffer memory free (in MiB)."),
            ]
        )
        xids = CounterMetricFamily(
            "aiflame_gpu_xid_errors", "XID errors, by XID (NVML events).",
            labels=[*GPU_LABELS, "xid"],
        )  # fmt: skip
        reasons = GaugeMetricFamily(
            "aiflame_gpu_clock_event_reason",
            "1 while this reason slows the GPU's clocks (NVML's clock event reasons).",
            labels=[*GPU_LABELS, "reason"],
        )
        nvlink = CounterMetricFamily(
            "aiflame_gpu_nvlink_bytes", "NVLink data sent and received, all links.",
            labels=[*GPU_LABELS, "direction"],
        )  # fmt: skip
        for s in list(telemetry.last):
            values = self._gpu_labels(s)
            for (index, xid), n in list(nvml.xids.items()):
                if index == s.index:
                    xids.add_metric([*values, str(xid)], n)
            if s.index in nvml.last_xid and XID in extra:
                extra[XID].add_metric(values, nvml.last_xid[s.index])
            health = telemetry.health.get(s.index)
            if health is None:
                continue
            for name, _, key in HEALTH_FIELDS:
                if key in health.values and name in fields:
                    fields[name].add_metric(values, health.values[key])
            for key, direction in (("nvlink_tx_kib", "tx"), ("nvlink_rx_kib", "rx")):
                if key in health.values:
                    nvlink.add_metric([*values, direction], health.values[key] * 1024)
            mask = health.clock_event_reasons
            if mask is not None:
                if THROTTLE in extra:
                    extra[THROTTLE].add_metric(values, mask)
                for bit, reason in CLOCK_EVENT_REASONS.items():
                    reasons.add_metric([*values, reason], float(bool(mask & bit)))
            for m in health.mig:  # dcgm-exporter's series of a MIG instance
                holder = telemetry.holders.get(m.uuid)
                pod = [holder.namespace, holder.pod, holder.container] if holder else ["", "", ""]
                row = self._gpu_labels(s, pod, (m.profile, str(m.gpu_instance)))
                if m.memory_used_bytes is None or m.memory_total_bytes is None:
                    continue
                if FB_USED in extra:
                    extra[FB_USED].add_metric(row, m.memory_used_bytes / MIB)
                    free = (m.memory_total_bytes - m.memory_used_bytes) / MIB
                    extra[FB_FREE].add_metric(row, free)
        yield from fields.values()
        yield from extra.values()
        yield xids
        yield reasons
        yield nvlink

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
        configured = GaugeMetricFamily(
            "aiflame_sampling_rate_configured_hz",
            "CPU sampling rate configured (the budget may lower the rate in use).",
            labels=["host"],
        )
        configured.add_metric(host, a.budget.max_hz)
        yield configured
        lowered = CounterMetricFamily(
            "aiflame_sampling_lowered_seconds",
            "Time the CPU budget held the sampling rate below the configured one.",
            labels=["host"],
        )
        lowered.add_metric(host, a.budget.lowered_s)
        yield lowered
        over = GaugeMetricFamily(
            "aiflame_cpu_budget_over_at_any_rate",
            "1 while the agent is over its CPU budget by a cost that no lower sampling rate "
            "would cut (per new process and per period): it samples at the configured rate.",
            labels=["host"],
        )
        over.add_metric(host, int(a.budget.over_at_any_rate))
        yield over
        if a.profiler is not None:
            stats = a.profiler.stats
            seen = CounterMetricFamily(
                "aiflame_processes_seen", "Processes the agent has seen start.", labels=["host"]
            )
            seen.add_metric(host, stats.processes_seen)
            yield seen
            incomplete = CounterMetricFamily(
                "aiflame_samples_incomplete",
                "Samples kept with part of their stack missing, by what (not a loss).",
                labels=["host", "what"],
            )
            for what, n in list(stats.incomplete.items()):
                incomplete.add_metric([*host, what], n)
            yield incomplete
            left_out = CounterMetricFamily(
                "aiflame_samples_left_out",
                "Samples of processes the configuration leaves out (filters, keep/drop).",
                labels=["host"],
            )
            left_out.add_metric(host, stats.left_out)
            yield left_out
        procs = GaugeMetricFamily(
            "aiflame_kineto_processes",
            "Processes polling the agent's libkineto endpoint.",
            labels=["host"],
        )
        procs.add_metric(host, len(a.fabric.processes()) if a.fabric is not None else 0)
        yield procs
        endpoints = GaugeMetricFamily(
            "aiflame_kineto_namespaces",
            "Network namespaces (pods) where the agent serves libkineto's @dynolog.",
            labels=["host"],
        )
        endpoints.add_metric(host, a.fabric.stats.namespaces if a.fabric is not None else 0)
        yield endpoints


Probe = Callable[[], str]  # "" when fine, else why not


class _Handler(BaseHTTPRequestHandler):
    """``GET /metrics``, ``/healthz`` (live: the agent's loop turns), ``/readyz`` (ready:
    live, and what it cuts can be spooled); 404 for the rest."""

    registry: CollectorRegistry
    live: Probe
    ready: Probe
    protocol_version = "HTTP/1.0"
    timeout = 10  # a client that sends nothing is not waited for

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._answer(200, generate_latest(self.registry), CONTENT_TYPE_LATEST)
        elif path in ("/healthz", "/readyz"):
            why = type(self).live() or (type(self).ready() if path == "/readyz" else "")
            body = (why or "ok").encode() + b"\n"
            self._answer(503 if why else 200, body, "text/plain; charset=utf-8")
        else:
            self._answer(404, b"not found: /metrics, /healthz, /readyz\n", "text/plain")

    def _answer(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass  # a scrape every few seconds is not news


def serve_metrics(
    address: str, collector: Collector, live: Probe = lambda: "", ready: Probe = lambda: ""
) -> tuple[Callable[[], None], int]:
    """Serve ``/metrics`` and the probes on ``host:port``; returns (stop, the port)."""
    host, _, port = address.rpartition(":")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    handler = type(
        "Handler", (_Handler,), {"registry": registry, "live": staticmethod(live),
                                 "ready": staticmethod(ready)}
    )  # fmt: skip
    server = ThreadingHTTPServer((host.strip("[]") or "0.0.0.0", int(port)), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="aiflame-metrics", daemon=True)
    thread.start()

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    return stop, server.server_address[1]
