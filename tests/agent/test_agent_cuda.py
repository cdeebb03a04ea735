"""The agent's CUDA profiles, on the stand-in runtime and driver of tests/ebpf/cuda (their
calls succeed, so allocations are real ones for the probes): a program the agent finds by
itself, probes when it maps the libraries, and whose launches, syncs and GPU memory by
allocation site come out in the gpu_api and memory profiles with the pattern's exact
counts. What a real driver does inside is not seen here (docs/record.md)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from agent_helpers import need

from aiflame.sources import load

pytestmark = pytest.mark.usefixtures("ebpf")
CUDA = Path(__file__).parents[1] / "ebpf" / "cuda"
SERVICE = f"memory-target-{os.getpid()}"
CFLAGS = ["-O1", "-g", "-Wall", "-fno-omit-frame-pointer", "-fno-optimize-sibling-calls"]
MiB = 1 << 20


@pytest.fixture(scope="module")
def stand_in_cuda(tmp_path_factory) -> Path:
    gcc = shutil.which("gcc")
    need(gcc is not None, "gcc is not installed")
    out = tmp_path_factory.mktemp("cuda")
    lib = [*CFLAGS, "-shared", "-fPIC"]
    steps = [
        [*lib, "-Wl,-soname,libcuda.so.1", "-o", "libcuda.so.1", CUDA / "fake_cuda.c"],
        [*lib, "-o", "libcudart.so.12", CUDA / "fake_cudart.c", "-L.", "-l:libcuda.so.1",
         "-Wl,-rpath,$ORIGIN"],
        [*CFLAGS, "-o", "memory_target", CUDA / "memory_target.c", "-ldl"],
    ]  # fmt: skip
    for step in steps:
        subprocess.run([gcc, *map(str, step)], cwd=out, check=True)
    return out


def leafs(profile, column: int) -> dict[str, float]:
    """'site;API[;-;kernel]' -> value, from the program's main down."""
    out: dict[str, float] = {}
    for sid, value in profile.iter_stack_values(column):
        names = profile.stack_names(sid)
        if value and "main" in names:
            key = ";".join(names[names.index("main") + 1 :])
            out[key] = out.get(key, 0) + value
    return out


def test_gpu_api_and_memory_profiles_of_a_cuda_program(agents, tmp_path, short_tmp, stand_in_cuda):
    agent = agents(
        ["--period", "2", "--metrics-listen", "", "--no-nvml", "--no-kineto-abstract",
         "--api-socket", str(short_tmp / "a.sock"), "--trace-dir", str(tmp_path / "t")],
        tmp_path / "spool",
    )  # fmt: skip
    # it maps the libraries at once, then waits 8 s (the agent probes it meanwhile: at first
    # sight, or 0.5, 2 or 5 s later on a loaded machine), runs
    target = subprocess.Popen(
        [str(stand_in_cuda / "memory_target"), str(stand_in_cuda / "libcudart.so.12"),
         str(stand_in_cuda / "libcuda.so.1"), "8000"],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "OTEL_SERVICE_NAME": SERVICE},
    )  # fmt: skip
    out, _ = target.communicate(timeout=60)
    assert target.returncode == 0 and "done" in out
    time.sleep(5)  # the period it ran in is cut
    assert agent.stop() == 0
    entries = []
    for meta_path in sorted((tmp_path / "spool" / "local").glob("*.json")):
        meta = json.loads(meta_path.read_text())
        # one series: the program's (no pid in it), named by OTEL_SERVICE_NAME
        if meta["labels"].get("service_name") == SERVICE:
            entries.append((meta, meta_path.parent / f"{meta_path.stem}.{meta['ext']}"))
    kinds = {m["profile_type"] for m, _ in entries}
    assert {"gpu_api", "memory"} <= kinds, agent.output()

    api = [load(str(p)) for m, p in entries if m["profile_type"] == "gpu_api"]
    assert [t.name for t in api[0].sample_types] == ["launches", "sync", "copies", "copy"]
    launches: dict[str, float] = {}
    syncs: dict[str, float] = {}
    for p in api:
        for k, v in leafs(p, 0).items():
            launches[k] = launches.get(k, 0) + v
        for k, v in leafs(p, 1).items():
            syncs[k] = syncs.get(k, 0) + v
    assert launches == {
        "launch_site;cuLaunchKernel;-;driver::kernel_a()": 3,
        "launch_site;cuLaunchKernel;-;kernel_b(float*)": 2,
    }
    assert list(syncs) == ["sync_site;cudaDeviceSynchronize"]
    assert syncs["sync_site;cudaDeviceSynchronize"] >= 2 * 2e6  # two 2 ms waits

    memory = [(m, load(str(p))) for m, p in entries if m["profile_type"] == "memory"]
    names = [t.name for t in memory[0][1].sample_types]
    assert names == ["alloc_objects", "alloc_space", "inuse_objects", "inuse_space"]
    allocated: dict[str, float] = {}
    bytes_: dict[str, float] = {}
    for _, p in memory:
        for k, v in leafs(p, 0).items():
            allocated[k] = allocated.get(k, 0) + v
        for k, v in leafs(p, 1).items():
            bytes_[k] = bytes_.get(k, 0) + v
    assert allocated == {
        "keep_site;cudaMalloc": 3,
        "temp_site;cudaMalloc": 4,
        "driver_site;cuMemAlloc_v2": 1,
        "peak_site;cudaMalloc": 1,
    }  # the failed 1 TiB call and pinned host memory are not GPU memory allocated
    assert bytes_ == {
        "keep_site;cudaMalloc": 3 * MiB,
        "temp_site;cudaMalloc": 8 * MiB,
        "driver_site;cuMemAlloc_v2": MiB // 2,
        "peak_site;cudaMalloc": 8 * MiB,
    }
    # in-use: what was live at the program's peak (the first moment it held the most: 11.5
    # MiB, the 8 MiB block beside what it kept), not what was left at the period's end
    peak = max((p for _, p in memory), key=lambda p: sum(leafs(p, 3).values()))
    assert leafs(peak, 3) == {
        "keep_site;cudaMalloc": 3 * MiB,
        "driver_site;cuMemAlloc_v2": MiB // 2,
        "peak_site;cudaMalloc": 8 * MiB,
    }
    assert leafs(peak, 2) == {
        "keep_site;cudaMalloc": 3,
        "driver_site;cuMemAlloc_v2": 1,
        "peak_site;cudaMalloc": 1,
    }
    # the period type of Go's heap profiles: Grafana knows memory:inuse_space:bytes:space:bytes
    assert all(p.meta.get("period_type") == ["space", "bytes"] for _, p in memory), [
        p.meta.get("period_type") for _, p in memory
    ]
