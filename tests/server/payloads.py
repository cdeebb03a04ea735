"""What aiflame agents send (docs/fleet-protocol.md), built for tests from real profiles.

CPU profiles are real: stacks of an eBPF recording of a PyTorch training loop
(tests/data/server/torch_train_cpu.pb.gz), cut into per-period profiles with aiflame's own
pprof renderer, the way an agent cuts and writes them.
"""

from __future__ import annotations

import gzip
import json
import uuid
from dataclasses import replace
from functools import cache
from pathlib import Path

import numpy as np

from aiflame.model import Profile, SampleType
from aiflame.proto.pyroscope.push.v1 import push_pb2
from aiflame.render.pprof import render_pprof
from aiflame.sources.inputs import Input
from aiflame.sources.pprof import importer as pprof_source

DATA = Path(__file__).resolve().parents[1] / "data"
RECORDING = DATA / "server" / "torch_train_cpu.pb.gz"
CPU_TYPE = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"
SAMPLES_TYPE = "process_cpu:samples:count:cpu:nanoseconds"


@cache
def recording() -> Profile:
    return pprof_source.load(Input(str(RECORDING)))


def cpu_profile(seed: int, time_ns: int, rate_hz: int = 19, share: float = 0.5) -> Profile:
    """A period's CPU profile: a random share of the recording's stacks with random counts,
    as ``samples/count`` and ``cpu/nanoseconds`` at ``rate_hz``."""
    base = recording()
    rng = np.random.default_rng(seed)
    keep = rng.random(len(base)) < share
    keep[rng.integers(len(base))] = True
    counts = rng.integers(1, 20, size=int(keep.sum())).astype(np.float64)
    period = 1_000_000_000 // rate_hz
    values = np.stack((counts, counts * period), axis=1)
    p = replace(
        base,
        sample_types=[SampleType("samples", "count"), SampleType("cpu", "nanoseconds")],
        sample_stack=base.sample_stack[keep],
        values=values,
        sample_labels=np.zeros(int(keep.sum()), dtype=np.int64),
        label_sets=[()],
        timestamps=None,
        meta={
            "time_nanos": time_ns,
            "duration_nanos": 10_000_000_000,
            "period": period,
            "period_type": ["cpu", "nanoseconds"],
            "default_type": 1,
        },
    )
    return p


def pprof_bytes(profile: Profile) -> bytes:
    return render_pprof(profile)


def push_request(series: list[tuple[dict[str, str], list[tuple[bytes, str]]]]) -> bytes:
    """A serialized PushRequest: per series its labels and (gzipped pprof, ID) samples."""
    req = push_pb2.PushRequest()
    for labels, samples in series:
        s = req.series.add()
        for k, v in labels.items():
            s.labels.add(name=k, value=v)
        for raw, pid in samples:
            s.samples.add(raw_profile=raw, ID=pid)
    return req.SerializeToString()


def cpu_push(labels: dict[str, str], seed: int, time_ns: int) -> tuple[bytes, str, Profile]:
    """One agent push: body, profile id, and the profile that was pushed."""
    p = cpu_profile(seed, time_ns)
    pid = str(uuid.UUID(int=seed + 1))
    # As the agent labels it: __delta__=false (the profile covers one period already).
    full = {"__name__": "process_cpu", "__delta__": "false", **labels}
    return push_request([(full, [(pprof_bytes(p), pid)])]), pid, p


def telemetry(
    batch_id: str, host: str, start: float, end: float, gpus: list[dict], workloads: list[dict]
) -> bytes:
    return json.dumps(
        {
            "batch_id": batch_id,
            "host": host,
            "agent_version": "0.1.0",
            "start": start,
            "end": end,
            "gpus": gpus,
            "workloads": workloads,
        }
    ).encode()


def gzip_bytes(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)
