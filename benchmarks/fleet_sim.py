"""Simulated GPU hosts for the server benchmarks: real agent payloads, many hosts.

Profiles are real stacks (an eBPF recording of a PyTorch training loop,
tests/data/server/torch_train_cpu.pb.gz) cut into per-host, per-period profiles and
written by aiflame's pprof renderer, as an agent writes them: 8 ranks sampled at 19 Hz for
10 s, ~1,500 samples over a few hundred distinct stacks. Each of the 50 models has its own
copy of the training script's Python frames (its own files), so the fleet holds 50x the
distinct stacks of one job. Labels: 100 jobs, 20 teams, 50 models; telemetry: 8 GPUs per
host, one or two workloads (docs/fleet-protocol.md).

``mixed_fleet()`` is a small fleet as platform teams run them, for checking the numbers:
a Slurm job on two hosts, Kubernetes pods without job ids (the agent's pod labels), an idle
notebook, GPUs nobody holds; ``fleet_telemetry()`` its documents, ``fleet_truth()`` the
GPU hours it holds (capacity and unallocated per host, allocated per workload).
"""

from __future__ import annotations

import copy
import json
import random
import uuid
from dataclasses import dataclass, replace

import numpy as np

from aiflame.model import Profile, SampleType
from aiflame.model.strings import StringTable
from aiflame.render.pprof import render_pprof
from aiflame.sources.inputs import Input
from aiflame.sources.pprof import importer as pprof_source

RECORDING = "tests/data/server/torch_train_cpu.pb.gz"
JOBS, TEAMS, MODELS = 100, 20, 50
PERIOD_S = 10
RATE_HZ = 19
RANKS = 8


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _len_field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def model_variant(base: Profile, model: int) -> Profile:
    """The recording with its training script's frames in the model's own files (the
    same string ids: frames refer to strings by index)."""
    table = StringTable()
    table.strings = [
        s.replace("train.py", f"models/m{model:02d}/train.py") for s in base.strings.strings
    ]
    table._index = {s: i for i, s in enumerate(table.strings)}
    frames = copy.copy(base.frames)
    frames.strings = table
    return replace(base, strings=table, frames=frames)


def host_profile(base: Profile, rng: np.random.Generator, time_ns: int) -> Profile:
    """One period of one host: a subset of the stacks, RANKS x RATE_HZ x PERIOD_S samples."""
    n = len(base)
    keep = rng.random(n) < 0.6
    weights = rng.pareto(1.2, size=int(keep.sum())) + 0.05
    samples = RANKS * RATE_HZ * PERIOD_S
    counts = np.maximum(1, np.round(weights / weights.sum() * samples)).astype(np.float64)
    period = 1_000_000_000 // RATE_HZ
    return replace(
        base,
        sample_types=[SampleType("samples", "count"), SampleType("cpu", "nanoseconds")],
        sample_stack=base.sample_stack[keep],
        values=np.stack((counts, counts * period), axis=1),
        sample_labels=np.zeros(int(keep.sum()), dtype=np.int64),
        label_sets=[()],
        timestamps=None,
        meta={
            "time_nanos": time_ns,
            "duration_nanos": PERIOD_S * 1_000_000_000,
            "period": period,
            "period_type": ["cpu", "nanoseconds"],
            "default_type": 1,
        },
    )


@dataclass
class Host:
    index: int
    name: str
    labels: dict[str, str]  # the workload labels of its (first) job
    jobs: list[dict[str, str]]
    series_prefix: bytes  # serialized RawProfileSeries labels (field 1 entries)
    profiles: list[bytes]  # gzipped pprof blobs it cycles through


def make_fleet(hosts: int, variants: int = 4, seed: int = 7) -> list[Host]:
    base = pprof_source.load(Input(RECORDING))
    rng = np.random.default_rng(seed)
    pyrng = random.Random(seed)
    models = [model_variant(base, m) for m in range(MODELS)]
    blobs: dict[int, list[bytes]] = {}
    out = []
    for h in range(hosts):
        job = h % JOBS
        model = job % MODELS
        team = job % TEAMS
        labels = {
            "job_id": f"job-{job:03d}",
            "team": f"team-{team:02d}",
            "model": f"model-{model:02d}",
            "user": f"user-{job % 37:02d}",
            "namespace": f"ns-{team:02d}",
        }
        jobs = [labels]
        if pyrng.random() < 0.25:  # a host shared by two jobs (4 GPUs each)
            j2 = (job + 50) % JOBS
            jobs.append(
                {
                    **labels,
                    "job_id": f"job-{j2:03d}",
                    "team": f"team-{j2 % TEAMS:02d}",
                    "model": f"model-{j2 % MODELS:02d}",
                }
            )
        if model not in blobs:
            blobs[model] = [
                render_pprof(host_profile(models[model], rng, 0)) for _ in range(variants)
            ]
        series_labels = {
            "__name__": "process_cpu",
            "service_name": f"train-{job:03d}",
            "host": f"gpu-node-{h:05d}",
            **labels,
        }
        prefix = b"".join(
            _len_field(1, _len_field(1, k.encode()) + _len_field(2, v.encode()))
            for k, v in series_labels.items()
        )
        out.append(Host(h, f"gpu-node-{h:05d}", labels, jobs, prefix, blobs[model]))
    return out


def push_body(host: Host, period: int) -> tuple[bytes, str]:
    """A PushRequest of one profile, with a fresh ID (the idempotency key)."""
    pid = str(uuid.uuid4())
    raw = host.profiles[period % len(host.profiles)]
    sample = _len_field(1, raw) + _len_field(2, pid.encode())
    series = host.series_prefix + _len_field(2, sample)
    return _len_field(1, series), pid


def telemetry_body(host: Host, start: float, rng: random.Random) -> bytes:
    end = start + PERIOD_S
    gpus = []
    for i in range(8):
        util = rng.uniform(0.3, 0.98)
        sm = util * rng.uniform(0.4, 0.8)
        gpus.append(
            {
                "index": i,
                "uuid": f"GPU-{host.index:05d}-{i}",
                "name": "NVIDIA H200",
                "pci_bus_id": f"00000000:{0x19 + i:02x}:00.0",
                "util": round(util, 3),
                "memory_used_bytes": 80 << 30,
                "memory_total_bytes": 141 << 30,
                "power_watts": round(200 + 500 * util, 1),
                "sm_clock_mhz": 1980,
                "temperature_c": 60,
                "sm_active": round(sm, 3),
                "sm_occupancy": round(sm * 0.5, 3),
                "tensor_active": round(sm * 0.6, 3),
                "fp16_active": 0.0,
                "fp32_active": 0.05,
                "fp64_active": 0.0,
                "dram_active": 0.3,
                "est_flops": round(sm * 0.6 * 989.4e12, -6),
                "est_flops_basis": "tensor_active x 989.4 TFLOP/s dense BF16 (H200 SXM)",
            }
        )
    share = 8 // len(host.jobs)
    workloads = []
    for j, labels in enumerate(host.jobs):
        mine = gpus[j * share : (j + 1) * share]
        workloads.append(
            {
                "labels": labels,
                "pids": [1000 + j * 10 + k for k in range(share)],
                "gpu_uuids": [g["uuid"] for g in mine],
                "allocated_gpu_seconds": float(PERIOD_S * share),
                "busy_gpu_seconds": round(sum(g["util"] for g in mine) * PERIOD_S, 3),
                "useful_gpu_seconds": round(sum(g["sm_active"] for g in mine) * PERIOD_S, 3),
                "est_flop": sum(g["est_flops"] for g in mine) * PERIOD_S,
                "gpu_memory_bytes": share * (80 << 30),
                "input_bytes": share * 64 << 20,
            }
        )
    doc = {
        "batch_id": str(uuid.uuid4()),
        "host": host.name,
        "agent_version": "0.1.0",
        "start": start,
        "end": end,
        "gpus": gpus,
        "workloads": workloads,
    }
    return json.dumps(doc).encode()


# -- a mixed fleet: Slurm jobs, Kubernetes pods, an idle notebook, GPUs nobody holds --------
@dataclass
class SimWorkload:
    """A workload as the agent reports it: its labels, the GPUs it holds on its host, the
    mean utilization of those GPUs, and the labels of one of its processes (for traces)."""

    labels: dict[str, str]
    gpus: list[int]
    util: float
    process: dict[str, str]


@dataclass
class SimHost:
    name: str
    gpus: int
    gpu_name: str
    workloads: list[SimWorkload]


def _pod(host: str, ns: str, pod: str, container: str, gpus: list[int], util: float, pid: int):
    owner = pod.rsplit("-", 2)[0] if pod.count("-") >= 2 else pod
    labels = {
        "host": host,
        "namespace": ns,
        "pod": pod,
        "container": container,
        "service_name": f"{ns}/{owner}",
    }
    process = {**labels, "pid": str(pid), "comm": "python3", "command": "python3 serve.py"}
    return SimWorkload(labels, gpus, util, process)


def _job(host: str, job: str, rank0: int, gpus: list[int], util: float, pid: int):
    labels = {
        "host": host,
        "job_id": job,
        "job_user": "ana",
        "job_name": "pretrain-7b",
        "user": "ana",
        "team": "llm",
        "model": "llama-7b",
        "service_name": "pretrain-7b",
    }
    process = {**labels, "pid": str(pid), "comm": "python", "rank": str(rank0)}
    return SimWorkload(labels, gpus, util, process)


def mixed_fleet() -> list[SimHost]:
    """Six hosts of 8 GPUs: one Slurm job on two hosts; two inference pods (no job id)
    and two GPUs nobody holds on a third; a training pod on a fourth; a notebook holding
    one GPU and running nothing, beside seven free GPUs; a spare host nobody uses."""
    h100, h200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"
    every = list(range(8))
    notebook = {"host": "ws-1", "user": "alice", "service_name": "jupyter-lab"}
    serving = "serving"
    return [
        SimHost("slurm-a", 8, h100, [_job("slurm-a", "4411", 0, every, 0.92, 5100)]),
        SimHost("slurm-b", 8, h100, [_job("slurm-b", "4411", 8, every, 0.90, 5200)]),
        SimHost(
            "k8s-a",
            8,
            h200,
            [
                _pod("k8s-a", serving, "infer-qwen-7c9d8f6b5-x2kqp", "server", [0, 1], 0.55, 7100),
                _pod(
                    "k8s-a",
                    serving,
                    "infer-llama-5f6c7d8e9-bq9zt",
                    "server",
                    [2, 3, 4, 5],
                    0.7,
                    7200,
                ),
            ],
        ),
        SimHost(
            "k8s-b",
            8,
            h200,
            [_pod("k8s-b", "research", "train-bert-0", "trainer", every, 0.81, 8100)],
        ),
        SimHost(
            "ws-1",
            8,
            h100,
            [SimWorkload(notebook, [0], 0.0, {**notebook, "pid": "9100", "comm": "python3"})],
        ),
        SimHost("spare-1", 8, h100, []),
    ]


def fleet_telemetry(
    hosts: list[SimHost], start: float, periods: int, period_s: float, seed: int = 3
) -> list[bytes]:
    """Every host's telemetry documents, one per period (docs/fleet-protocol.md): all its
    GPUs listed, each workload with the GPUs it holds and their busy seconds."""
    rng = random.Random(seed)
    docs = []
    for k in range(periods):
        t0 = start + k * period_s
        for h in hosts:
            held = {g: w for w in h.workloads for g in w.gpus}
            utils = {}
            for g in range(h.gpus):  # a held GPU near its workload's mean, a free one idle
                mean = held[g].util if g in held else 0.0
                utils[g] = min(1.0, max(0.0, mean + rng.uniform(-0.05, 0.05))) if mean else 0.0
            gpus = [
                {"index": g, "uuid": f"GPU-{h.name}-{g}", "name": h.gpu_name,
                 "util": round(utils[g], 4), "power_watts": 90.0 + 600 * utils[g]}
                for g in range(h.gpus)
            ]  # fmt: skip
            workloads = [
                {
                    "labels": w.labels,
                    "pids": [int(w.process["pid"])],
                    "gpu_uuids": [f"GPU-{h.name}-{g}" for g in w.gpus],
                    "allocated_gpu_seconds": period_s * len(w.gpus),
                    "busy_gpu_seconds": period_s * sum(round(utils[g], 4) for g in w.gpus),
                }
                for w in h.workloads
            ]
            doc = {
                "batch_id": f"sim-{h.name}-{k}",
                "host": h.name,
                "agent_version": "0.1.0",
                "start": t0,
                "end": t0 + period_s,
                "gpus": gpus,
                "workloads": workloads,
            }
            docs.append(json.dumps(doc).encode())
    return docs


def fleet_truth(hosts: list[SimHost], periods: int, period_s: float) -> dict[str, object]:
    """What the simulation holds, in GPU hours: each host's capacity and unallocated
    hours, each workload's allocated hours (by its labels)."""
    hours = periods * period_s / 3600
    return {
        "capacity": {h.name: h.gpus * hours for h in hosts},
        "unallocated": {
            h.name: (h.gpus - sum(len(w.gpus) for w in h.workloads)) * hours for h in hosts
        },
        "allocated": [(w.labels, len(w.gpus) * hours) for h in hosts for w in h.workloads],
    }


def host_address(index: int) -> str:
    """A loopback address of its own for simulated host ``index`` (127.1.0.1, 127.1.0.2...)."""
    return f"127.1.{index // 250}.{index % 250 + 1}"
