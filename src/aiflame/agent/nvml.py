"""GPU telemetry through NVML (``nvidia-ml-py``), without DCGM.

Per GPU and per poll: ``utilization.gpu`` (a kernel was running), memory used/total,
power, SM clock, temperature; on Hopper and newer the GPM metrics (SM activity and
occupancy, tensor/FP16/FP32/FP64 pipe activity, DRAM bandwidth), which need two samples:
each poll's metrics cover the time since the previous one. Per process: the compute
processes and their GPU memory, their SM utilization samples
(``nvmlDeviceGetProcessUtilization``), and where accounting mode is on (``nvidia-smi -am
1``), the driver's own busy time per process (``nvmlDeviceGetAccountingStats``: time the
context lived x its GPU utilization).

A host without NVIDIA GPUs (no ``libnvidia-ml.so.1``, no driver, no device) gets
``Nvml.open()`` -> None and one line saying why.
"""

from __future__ import annotations

import contextlib
import ctypes
import time
from dataclasses import dataclass, field
from typing import Any

ACCOUNTING_ENABLED = 1
# NVML_GPM_METRIC_* ids (nvml.h) and the fields they fill
GPM_METRICS = {
    1: "gr_engine_active",
    2: "sm_active",
    3: "sm_occupancy",
    5: "tensor_active",
    6: "tensor_dmma_active",
    7: "tensor_hmma_active",
    9: "tensor_imma_active",
    10: "dram_active",
    11: "fp64_active",
    12: "fp32_active",
    13: "fp16_active",
}
HOPPER = 9  # NVML_DEVICE_ARCH_HOPPER


@dataclass
class ProcessOnGpu:
    pid: int
    memory_bytes: int | None = None
    sm_util: float | None = None  # mean of the period's samples, 0..1
    accounting_busy_ms: float | None = None  # cumulative, from accounting mode


@dataclass
class GpuSample:
    """One poll of one GPU."""

    index: int
    uuid: str
    name: str
    pci_bus_id: str
    time: float
    util: float | None = None  # 0..1
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    power_watts: float | None = None
    sm_clock_mhz: int | None = None
    temperature_c: int | None = None
    gpm: dict[str, float] = field(default_factory=dict)  # GPM_METRICS names, 0..1
    processes: dict[int, ProcessOnGpu] = field(default_factory=dict)


class Nvml:
    """An initialised NVML and the state of its polls (GPM samples, timestamps)."""

    def __init__(self, nvml: Any) -> None:
        self.nv = nvml
        self.driver = ""
        with contextlib.suppress(Exception):
            self.driver = _text(nvml.nvmlSystemGetDriverVersion())
        self.handles = [
            nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())
        ]
        self.static = [self._static(i, h) for i, h in enumerate(self.handles)]
        self._gpm_prev: dict[int, Any] = {}
        self._gpm_ok = [self._gpm_supported(h) for h in self.handles]
        self._util_ts: dict[int, int] = {}

    @classmethod
    def open(cls) -> tuple[Nvml | None, str]:
        """(NVML, "") or (None, why not) on a host where it cannot be used."""
        try:
            import pynvml
        except ImportError:
            return None, "nvidia-ml-py is not installed (pip install 'aiflame[fleet]')"
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as e:
            return None, f"NVML unavailable ({e}): no NVIDIA driver or GPU"
        except OSError as e:
            return None, f"NVML unavailable ({e})"
        try:
            nv = cls(pynvml)
        except pynvml.NVMLError as e:
            with contextlib.suppress(Exception):
                pynvml.nvmlShutdown()
            return None, f"NVML unusable ({e})"
        if not nv.handles:
            nv.close()
            return None, "NVML found no GPU"
        return nv, ""

    def close(self) -> None:
        for sample in self._gpm_prev.values():
            with contextlib.suppress(Exception):
                self.nv.nvmlGpmSampleFree(sample)
        self._gpm_prev.clear()
        with contextlib.suppress(Exception):
            self.nv.nvmlShutdown()

    def _static(self, i: int, h: Any) -> dict[str, str]:
        nv = self.nv
        out = {"uuid": "", "name": "", "pci_bus_id": ""}
        with contextlib.suppress(nv.NVMLError):
            out["uuid"] = _text(nv.nvmlDeviceGetUUID(h))
        with contextlib.suppress(nv.NVMLError):
            out["name"] = _text(nv.nvmlDeviceGetName(h))
        with contextlib.suppress(nv.NVMLError):
            out["pci_bus_id"] = _text(nv.nvmlDeviceGetPciInfo(h).busId)
        return out

    def _gpm_supported(self, h: Any) -> bool:
        nv = self.nv
        try:
            if nv.nvmlDeviceGetArchitecture(h) < HOPPER:
                return False
            return bool(nv.nvmlGpmQueryDeviceSupport(h).isSupportedDevice)
        except (nv.NVMLError, AttributeError):
            return False

    # -- one poll ---------------------------------------------------------------------------
    def poll(self) -> list[GpuSample]:
        now = time.time()
        return [self._poll_one(i, h, now) for i, h in enumerate(self.handles)]

    def _poll_one(self, i: int, h: Any, now: float) -> GpuSample:
        nv, st = self.nv, self.static[i]
        s = GpuSample(i, st["uuid"], st["name"], st["pci_bus_id"], now)
        with contextlib.suppress(nv.NVMLError):
            s.util = nv.nvmlDeviceGetUtilizationRates(h).gpu / 100.0
        with contextlib.suppress(nv.NVMLError):
            mem = nv.nvmlDeviceGetMemoryInfo(h)
            s.memory_used_bytes, s.memory_total_bytes = int(mem.used), int(mem.total)
        with contextlib.suppress(nv.NVMLError):
            s.power_watts = nv.nvmlDeviceGetPowerUsage(h) / 1000.0
        with contextlib.suppress(nv.NVMLError):
            s.sm_clock_mhz = int(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))
        with contextlib.suppress(nv.NVMLError):
            s.temperature_c = int(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))
        if self._gpm_ok[i]:
            s.gpm = self._gpm(i, h)
        s.processes = self._processes(i, h)
        return s

    def _gpm(self, i: int, h: Any) -> dict[str, float]:
        nv = self.nv
        try:
            sample = nv.nvmlGpmSampleAlloc()
            nv.nvmlGpmSampleGet(h, sample)
        except nv.NVMLError:
            return {}
        prev = self._gpm_prev.get(i)
        self._gpm_prev[i] = sample
        if prev is None:
            return {}
        out: dict[str, float] = {}
        try:
            req = nv.c_nvmlGpmMetricsGet_t()
            req.version = nv.NVML_GPM_METRICS_GET_VERSION
            req.numMetrics = len(GPM_METRICS)
            req.sample1, req.sample2 = prev, sample
            for k, metric in enumerate(GPM_METRICS):
                req.metrics[k].metricId = metric
            nv.nvmlGpmMetricsGet(req)
            for k, metric in enumerate(GPM_METRICS):
                m = req.metrics[k]
                if m.nvmlReturn == 0:
                    out[GPM_METRICS[metric]] = float(m.value) / 100.0
        except nv.NVMLError:
            pass
        finally:
            with contextlib.suppress(nv.NVMLError):
                nv.nvmlGpmSampleFree(prev)
        return out

    def _processes(self, i: int, h: Any) -> dict[int, ProcessOnGpu]:
        nv = self.nv
        procs: dict[int, ProcessOnGpu] = {}
        with contextlib.suppress(nv.NVMLError):
            for p in nv.nvmlDeviceGetComputeRunningProcesses(h):
                mem = p.usedGpuMemory
                procs[int(p.pid)] = ProcessOnGpu(int(p.pid), int(mem) if mem is not None else None)
        since = self._util_ts.get(i, 0)
        sums: dict[int, list[float]] = {}
        with contextlib.suppress(nv.NVMLError):
            for u in nv.nvmlDeviceGetProcessUtilization(h, since):
                if int(u.timeStamp) > since:
                    sums.setdefault(int(u.pid), []).append(float(u.smUtil) / 100.0)
                    self._util_ts[i] = max(self._util_ts.get(i, 0), int(u.timeStamp))
        for pid, values in sums.items():
            procs.setdefault(pid, ProcessOnGpu(pid)).sm_util = sum(values) / len(values)
        with contextlib.suppress(nv.NVMLError):
            if nv.nvmlDeviceGetAccountingMode(h) == ACCOUNTING_ENABLED:
                for pid in nv.nvmlDeviceGetAccountingPids(h):
                    with contextlib.suppress(nv.NVMLError):
                        st = nv.nvmlDeviceGetAccountingStats(h, pid)
                        if pid in procs or st.isRunning:
                            busy = float(st.time) * float(st.gpuUtilization) / 100.0
                            procs.setdefault(pid, ProcessOnGpu(pid)).accounting_busy_ms = busy
        return procs


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, ctypes.Array):
        return bytes(value).split(b"\0", 1)[0].decode("utf-8", "replace")
    return str(value)
