"""GPU telemetry through NVML (``nvidia-ml-py``), without DCGM.

Per GPU and per poll: ``utilization.gpu`` (a kernel was running), memory used/total,
power, SM clock, temperature; on Hopper and newer the GPM metrics (SM activity and
occupancy, tensor/FP16/FP32/FP64 pipe activity, DRAM bandwidth), which need two samples:
each poll's metrics cover the time since the previous one. Per process: the compute
processes and their GPU memory, their SM utilization samples
(``nvmlDeviceGetProcessUtilization``), and where accounting mode is on (``nvidia-smi -am
1``), the driver's own busy time per process (``nvmlDeviceGetAccountingStats``: time the
context lived x its GPU utilization).

What operators alert on is read once a period (:meth:`Nvml.health`: NVML calls that are
not free on a driver, and counters that change rarely): ECC error counts (volatile and
aggregate, corrected and not), retired pages and row remapping, the clock event (throttle)
reasons, the energy counter, PCIe throughput and replays, NVLink traffic and error counters
(``nvmlDeviceGetFieldValues``), and the MIG instances of a GPU in MIG mode (their GPU
instance id, profile and memory). XID errors are events: registered once, drained at each
poll (:attr:`Nvml.xids`). Whatever a GPU does not support is left out, never zero.

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
XID_CRITICAL = 0x8  # nvmlEventTypeXidCriticalError
NVML_ERROR_TIMEOUT = 10
# nvmlDeviceGetFieldValues ids (nvml.h) -> health key; NVLink's are totals over all links
FIELDS = {
    138: "nvlink_tx_kib",  # NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, KiB since the driver loaded
    139: "nvlink_rx_kib",
    38: "nvlink_crc_flit_errors",  # NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL
    45: "nvlink_crc_data_errors",
    52: "nvlink_replay_errors",
    59: "nvlink_recovery_errors",
}
# ECC counters: (error type, counter type) of nvmlDeviceGetTotalEccErrors -> health key
ECC = {
    (0, 0): "ecc_sbe_volatile",  # corrected, since the driver loaded
    (1, 0): "ecc_dbe_volatile",  # uncorrected
    (0, 1): "ecc_sbe_aggregate",  # over the GPU's life
    (1, 1): "ecc_dbe_aggregate",
}
# clock event (throttle) reason bits (nvml.h nvmlClocksEventReason*)
CLOCK_EVENT_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


@dataclass
class ProcessOnGpu:
    pid: int
    memory_bytes: int | None = None
    sm_util: float | None = None  # mean of the period's samples, 0..1
    accounting_busy_ms: float | None = None  # cumulative, from accounting mode
    gpu_instance: int | None = None  # the MIG GPU instance it runs in


@dataclass
class MigInstance:
    """One MIG instance of a GPU (a device of its own for CUDA and the kubelet)."""

    uuid: str
    profile: str  # "1g.10gb", from the instance's name
    gpu_instance: int
    compute_instance: int
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None


@dataclass
class GpuHealth:
    """What a GPU says about its health, read once a period; keys absent where the GPU
    does not report them."""

    values: dict[str, float] = field(default_factory=dict)
    clock_event_reasons: int | None = None  # a CLOCK_EVENT_REASONS bit mask
    mig: list[MigInstance] = field(default_factory=list)


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
        self.xids: dict[tuple[int, int], int] = {}  # (GPU index, XID) -> events seen
        self.last_xid: dict[int, int] = {}  # GPU index -> the last XID (dcgm-exporter's gauge)
        self._events = self._register_xid_events()

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
        if self._events is not None:
            with contextlib.suppress(Exception):
                self.nv.nvmlEventSetFree(self._events)
            self._events = None
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

    # -- XID errors (events) -----------------------------------------------------------------
    def _register_xid_events(self) -> Any:
        nv = self.nv
        try:
            events = nv.nvmlEventSetCreate()
        except (nv.NVMLError, AttributeError):
            return None
        registered = 0
        for h in self.handles:
            with contextlib.suppress(nv.NVMLError):
                if nv.nvmlDeviceGetSupportedEventTypes(h) & XID_CRITICAL:
                    nv.nvmlDeviceRegisterEvents(h, XID_CRITICAL, events)
                    registered += 1
        if not registered:
            with contextlib.suppress(nv.NVMLError):
                nv.nvmlEventSetFree(events)
            return None
        return events

    def _drain_xids(self) -> None:
        """Count the XID errors that occurred since the last poll (never waits)."""
        nv = self.nv
        for _ in range(256):  # bounded: a GPU in an error storm cannot hold the poll
            try:
                data = nv.nvmlEventSetWait_v2(self._events, 0)
            except nv.NVMLError:
                return  # NVML_ERROR_TIMEOUT: none left (or the set broke: next poll)
            index = self._index_of(data.device)
            if index is None or not data.eventType & XID_CRITICAL:
                continue
            xid = int(data.eventData)
            self.xids[(index, xid)] = self.xids.get((index, xid), 0) + 1
            self.last_xid[index] = xid

    def _index_of(self, handle: Any) -> int | None:
        address = ctypes.cast(handle, ctypes.c_void_p).value
        for i, h in enumerate(self.handles):
            if ctypes.cast(h, ctypes.c_void_p).value == address:
                return i
        return None

    # -- one poll ---------------------------------------------------------------------------
    def poll(self) -> list[GpuSample]:
        now = time.time()
        if self._events is not None:
            self._drain_xids()
        return [self._poll_one(i, h, now) for i, h in enumerate(self.handles)]

    # -- health, once a period ------------------------------------------------------------
    def health(self) -> dict[int, GpuHealth]:
        return {i: self._health_one(h) for i, h in enumerate(self.handles)}

    def _health_one(self, h: Any) -> GpuHealth:
        nv = self.nv
        out = GpuHealth()
        v = out.values
        for (error, counter), key in ECC.items():
            with contextlib.suppress(nv.NVMLError):
                v[key] = float(nv.nvmlDeviceGetTotalEccErrors(h, error, counter))
        for cause, key in ((0, "retired_pages_sbe"), (1, "retired_pages_dbe")):
            with contextlib.suppress(nv.NVMLError):
                v[key] = float(len(nv.nvmlDeviceGetRetiredPages(h, cause)))
        with contextlib.suppress(nv.NVMLError):
            v["retired_pages_pending"] = float(nv.nvmlDeviceGetRetiredPagesPendingStatus(h))
        with contextlib.suppress(nv.NVMLError):
            corr, unc, pending, failure = nv.nvmlDeviceGetRemappedRows(h)
            v["remapped_rows_correctable"] = float(corr)
            v["remapped_rows_uncorrectable"] = float(unc)
            v["row_remap_pending"], v["row_remap_failure"] = float(pending), float(failure)
        reasons = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
        reasons = reasons or nv.nvmlDeviceGetCurrentClocksThrottleReasons  # older bindings
        with contextlib.suppress(nv.NVMLError):
            out.clock_event_reasons = int(reasons(h))
        with contextlib.suppress(nv.NVMLError):
            v["energy_mj"] = float(nv.nvmlDeviceGetTotalEnergyConsumption(h))
        for counter, key in ((0, "pcie_tx_bytes_per_s"), (1, "pcie_rx_bytes_per_s")):
            with contextlib.suppress(nv.NVMLError):
                v[key] = float(nv.nvmlDeviceGetPcieThroughput(h, counter)) * 1024
        with contextlib.suppress(nv.NVMLError):
            v["pcie_replays"] = float(nv.nvmlDeviceGetPcieReplayCounter(h))
        with contextlib.suppress(nv.NVMLError, AttributeError):
            for f in nv.nvmlDeviceGetFieldValues(h, list(FIELDS)):
                if f.nvmlReturn == 0 and f.fieldId in FIELDS:
                    v[FIELDS[f.fieldId]] = float(f.value.ullVal)
        out.mig = self._mig_instances(h)
        return out

    def _mig_instances(self, h: Any) -> list[MigInstance]:
        nv = self.nv
        try:
            if nv.nvmlDeviceGetMigMode(h)[0] != 1:
                return []
            count = nv.nvmlDeviceGetMaxMigDeviceCount(h)
        except (nv.NVMLError, AttributeError):
            return []
        out = []
        for k in range(count):
            try:
                mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(h, k)
                name = _text(nv.nvmlDeviceGetName(mig))
                inst = MigInstance(
                    uuid=_text(nv.nvmlDeviceGetUUID(mig)),
                    profile=name.rsplit(" MIG ", 1)[-1] if " MIG " in name else name,
                    gpu_instance=int(nv.nvmlDeviceGetGpuInstanceId(mig)),
                    compute_instance=int(nv.nvmlDeviceGetComputeInstanceId(mig)),
                )
            except nv.NVMLError:
                continue  # no instance at this index
            with contextlib.suppress(nv.NVMLError):
                mem = nv.nvmlDeviceGetMemoryInfo(mig)
                inst.memory_used_bytes, inst.memory_total_bytes = int(mem.used), int(mem.total)
            out.append(inst)
        return out

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
                gi = getattr(p, "gpuInstanceId", 0xFFFFFFFF)
                if gi is not None and gi != 0xFFFFFFFF:
                    procs[int(p.pid)].gpu_instance = int(gi)
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
