"""``POST /api/v1/telemetry``: one document per host per period (docs/fleet-protocol.md).

Decoded against a typed schema (msgspec), so a wrong type, a fraction outside 0..1 or a
period that ends before it starts is a 400 naming the field. Each GPU becomes a
``gpu_telemetry`` row, each workload a ``workload_telemetry`` row whose labels also carry
``host`` and ``gpu_model``, so GPU hours can be grouped by any of them; a workload's
energy is the power of its GPUs over the period, a GPU held by several workloads split
evenly (as its allocated seconds are).
"""

from __future__ import annotations

from typing import Annotated

import msgspec
import numpy as np
import pyarrow as pa

from aiflame.server import validate
from aiflame.server.errors import BadRequest
from aiflame.server.labels import check_labels, series_id

# Every number is bounded by what its column holds (and by what is physically sensible),
# so that what is acknowledged is storable: an index past UInt16, a byte count past UInt64 or
# an infinite float is a 400 naming the field.
Fraction = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
NonNeg = Annotated[float, msgspec.Meta(ge=0.0, le=1e30)]
Watts = Annotated[float, msgspec.Meta(ge=0.0, le=1e6)]
Mhz = Annotated[float, msgspec.Meta(ge=0.0, le=1e6)]
Celsius = Annotated[float, msgspec.Meta(ge=-273.15, le=1e4)]
Bytes = Annotated[int, msgspec.Meta(ge=0, le=validate.INT64_MAX)]
GpuIndex = Annotated[int, msgspec.Meta(ge=0, le=validate.UINT16_MAX)]
Pid = Annotated[int, msgspec.Meta(ge=0, le=validate.UINT32_MAX)]
Seconds = Annotated[float, msgspec.Meta(ge=0.0, le=validate.MAX_TIME_MS / 1000)]
Text = Annotated[str, msgspec.Meta(max_length=1024)]
MAX_PERIOD_S = 3600.0


class Gpu(msgspec.Struct, forbid_unknown_fields=False):
    index: GpuIndex
    uuid: Text
    name: Text = ""
    pci_bus_id: Text = ""
    util: Fraction | None = None
    memory_used_bytes: Bytes | None = None
    memory_total_bytes: Bytes | None = None
    power_watts: Watts | None = None
    sm_clock_mhz: Mhz | None = None
    temperature_c: Celsius | None = None
    sm_active: Fraction | None = None
    sm_occupancy: Fraction | None = None
    tensor_active: Fraction | None = None
    fp16_active: Fraction | None = None
    fp32_active: Fraction | None = None
    fp64_active: Fraction | None = None
    dram_active: Fraction | None = None
    gr_engine_active: Fraction | None = None
    tensor_hmma_active: Fraction | None = None
    tensor_dmma_active: Fraction | None = None
    tensor_imma_active: Fraction | None = None
    est_flops: NonNeg | None = None
    est_flops_basis: Text = ""


class Workload(msgspec.Struct, forbid_unknown_fields=False):
    labels: dict[str, str]
    allocated_gpu_seconds: NonNeg
    pids: Annotated[list[Pid], msgspec.Meta(max_length=4096)] = []
    gpu_uuids: Annotated[list[Text], msgspec.Meta(max_length=1024)] = []
    busy_gpu_seconds: NonNeg | None = None
    useful_gpu_seconds: NonNeg | None = None
    est_flop: NonNeg | None = None
    gpu_memory_bytes: Bytes | None = None
    input_bytes: Bytes | None = None


class Telemetry(msgspec.Struct, forbid_unknown_fields=False):
    batch_id: Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
    host: Annotated[str, msgspec.Meta(min_length=1, max_length=255)]
    start: Seconds
    end: Seconds
    agent_version: Annotated[str, msgspec.Meta(max_length=64)] = ""
    gpus: Annotated[list[Gpu], msgspec.Meta(max_length=1024)] = []
    workloads: Annotated[list[Workload], msgspec.Meta(max_length=4096)] = []


_DECODER = msgspec.json.Decoder(Telemetry)
_MS = pa.timestamp("ms", tz="UTC")
_MAP = pa.map_(pa.string(), pa.string())
_GPU_FLOATS = (
    "util",
    "power_watts",
    "sm_clock_mhz",
    "temperature_c",
    "sm_active",
    "sm_occupancy",
    "tensor_active",
    "fp16_active",
    "fp32_active",
    "fp64_active",
    "dram_active",
    "gr_engine_active",
    "tensor_hmma_active",
    "tensor_dmma_active",
    "tensor_imma_active",
)


def parse(body: bytes) -> Telemetry:
    doc: Telemetry = validate.decode_json(_DECODER, body, "telemetry")
    if doc.end <= doc.start:
        raise BadRequest("invalid telemetry: 'end' must be after 'start'")
    if doc.end - doc.start > MAX_PERIOD_S:
        raise BadRequest(f"invalid telemetry: a period longer than {MAX_PERIOD_S:.0f} s")
    if len(doc.gpus) > 1024 or len(doc.workloads) > 4096:
        raise BadRequest("invalid telemetry: too many GPUs or workloads in one document")
    period = doc.end - doc.start
    for w in doc.workloads:
        # A workload cannot hold more GPU-seconds than the host's GPUs have in the period.
        bound = period * max(len(doc.gpus), len(w.gpu_uuids), 1) * 1.001
        for name in ("allocated_gpu_seconds", "busy_gpu_seconds", "useful_gpu_seconds"):
            v = getattr(w, name)
            if v is not None and v > bound:
                raise BadRequest(f"invalid telemetry: {name} {v} exceeds the period's GPUs")
    return doc


def tables(doc: Telemetry, tenant: str, received_ms: int, max_labels: int) -> dict[str, dict]:
    start_ms, end_ms = int(doc.start * 1000), int(doc.end * 1000)
    period = doc.end - doc.start
    gpus = doc.gpus
    by_uuid = {g.uuid: g for g in gpus}
    holders: dict[str, int] = {}
    for w in doc.workloads:
        for u in set(w.gpu_uuids):
            holders[u] = holders.get(u, 0) + 1
    out: dict[str, dict] = {}
    if gpus:
        n = len(gpus)
        g = {
            "tenant": [tenant] * n,
            "host": [doc.host] * n,
            "start": pa.array([start_ms] * n, _MS),
            "end": pa.array([end_ms] * n, _MS),
            "gpu_index": pa.array([x.index for x in gpus], pa.uint16()),
            "uuid": [x.uuid for x in gpus],
            "name": [x.name for x in gpus],
            "pci_bus_id": [x.pci_bus_id for x in gpus],
            "memory_used_bytes": pa.array([x.memory_used_bytes for x in gpus], pa.uint64()),
            "memory_total_bytes": pa.array([x.memory_total_bytes for x in gpus], pa.uint64()),
            "est_flops": pa.array([x.est_flops for x in gpus], pa.float64()),
            "est_flops_basis": [x.est_flops_basis for x in gpus],
        }
        for f in _GPU_FLOATS:
            g[f] = pa.array([getattr(x, f) for x in gpus], pa.float32())
        out["gpu_telemetry"] = g
    rows = []
    for w in doc.workloads:
        labels = check_labels(list(w.labels.items()), max_labels)
        labels.setdefault("host", doc.host)
        models = sorted({by_uuid[u].name for u in w.gpu_uuids if u in by_uuid and by_uuid[u].name})
        if models:
            labels.setdefault("gpu_model", ",".join(models))
        energy: float | None = None
        powered = [by_uuid[u] for u in set(w.gpu_uuids) if u in by_uuid]
        watts = [(x.power_watts, holders[x.uuid]) for x in powered]
        if watts and all(p is not None for p, _ in watts):
            energy = sum(float(p or 0.0) * period / n for p, n in watts)
        rows.append((w, labels, series_id(labels), energy))
    if rows:
        n = len(rows)
        out["workload_telemetry"] = {
            "tenant": [tenant] * n,
            "host": [doc.host] * n,
            "start": pa.array([start_ms] * n, _MS),
            "end": pa.array([end_ms] * n, _MS),
            "workload_id": pa.array(np.array([r[2] for r in rows], dtype=np.uint64)),
            "labels": pa.array([list(r[1].items()) for r in rows], _MAP),
            "pids": pa.array([r[0].pids for r in rows], pa.list_(pa.uint32())),
            "gpu_uuids": pa.array([r[0].gpu_uuids for r in rows], pa.list_(pa.string())),
            "allocated_gpu_seconds": [r[0].allocated_gpu_seconds for r in rows],
            "busy_gpu_seconds": pa.array([r[0].busy_gpu_seconds for r in rows], pa.float64()),
            "useful_gpu_seconds": pa.array([r[0].useful_gpu_seconds for r in rows], pa.float64()),
            "est_flop": pa.array([r[0].est_flop for r in rows], pa.float64()),
            "energy_joules": pa.array([r[3] for r in rows], pa.float64()),
            "gpu_memory_bytes": pa.array([r[0].gpu_memory_bytes for r in rows], pa.uint64()),
            "input_bytes": pa.array([r[0].input_bytes for r in rows], pa.uint64()),
        }
    out["telemetry_batches"] = {
        "tenant": [tenant],
        "id": [doc.batch_id],
        "host": [doc.host],
        "start": pa.array([start_ms], _MS),
        "received": pa.array([received_ms], _MS),
    }
    return out
