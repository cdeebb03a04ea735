"""``aiflame agent`` pushing to ``aiflame server`` end to end (as root, with the agent's eBPF
collectors): a Python program with a known hot function on this machine shows up in the
server's merged flame graph with its host label, and the agent's telemetry document is
stored. Runs where the agent is part of the tree (issue of its own) and as root."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap
import time

import pytest
from serverproc import SRC
from srvclient import Client

from aiflame.proto.pyroscope.querier.v1 import querier_pb2 as q

pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("aiflame.agent") is None,
        reason="aiflame agent is not in this tree",
    ),
    pytest.mark.skipif(os.geteuid() != 0, reason="the agent's eBPF collectors need root"),
]

HOT = textwrap.dedent(
    """
    import time
    def agent_e2e_hot_function():
        t = time.time()
        while time.time() - t < 0.2:
            pass
    end = time.time() + 30
    while time.time() < end:
        agent_e2e_hot_function()
    """
)


def test_agent_pushes_profiles_and_telemetry(server, tmp_path):
    prog = tmp_path / "hot.py"
    prog.write_text(HOT)
    # its own workload: series carry no pid, the service name finds it
    service = f"agent-e2e-hot-{os.getpid()}"
    hot = subprocess.Popen(
        [sys.executable, str(prog)], env={**os.environ, "OTEL_SERVICE_NAME": service}
    )
    env = dict(os.environ, PYTHONPATH=str(SRC))
    agent = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aiflame",
            "agent",
            "--server",
            server.url,
            "--period",
            "2",
            "--spool",
            str(tmp_path / "spool"),
            "--metrics-listen",
            "127.0.0.1:0",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    c = Client(server.url)
    try:
        deadline = time.monotonic() + 60
        found = False
        while time.monotonic() < deadline and not found:
            time.sleep(2)
            now = int(time.time() * 1000)
            req = q.SelectMergeStacktracesRequest(
                profile_typeID="process_cpu:cpu:nanoseconds:cpu:nanoseconds",
                label_selector=f'{{service_name="{service}"}}',
                start=now - 600_000,
                end=now + 60_000,
            )
            fg = c.connect("SelectMergeStacktraces", req, q.SelectMergeStacktracesResponse)
            found = any("agent_e2e_hot_function" in n for n in fg.flamegraph.names)
        assert found, "the agent's profile of the hot program did not reach the server"
    finally:
        agent.terminate()
        agent.wait(60)
        hot.kill()
        hot.wait()


MEMORY_PROGRAM = textwrap.dedent(
    """
    import ctypes, sys, time
    rt = ctypes.CDLL(sys.argv[1])
    MiB = 1 << 20

    class KVCache:
        def __init__(self):
            self.blocks = []

        def grow(self, n):
            for _ in range(n):
                p = ctypes.c_void_p()
                assert rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(4 * MiB)) == 0
                self.blocks.append(p)

    class Scratch:
        def use(self):
            p = ctypes.c_void_p()
            assert rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(16 * MiB)) == 0
            time.sleep(0.05)
            assert rt.cudaFree(p) == 0

    time.sleep(float(sys.argv[2]))  # the agent finds and probes the process meanwhile
    cache = KVCache()
    cache.grow(3)  # 12 MiB, kept
    Scratch().use()  # 16 MiB for a moment: the peak, 28 MiB
    print("done", flush=True)
    time.sleep(5)  # later periods: only what is kept
    """
)


def _stand_in_cuda(out) -> None:
    """The stand-in CUDA runtime and driver of tests/ebpf/cuda (their calls succeed)."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("needs gcc (apt-get install gcc)")
    cuda = SRC.parent / "tests" / "ebpf" / "cuda"
    flags = ["-O1", "-g", "-fno-omit-frame-pointer", "-shared", "-fPIC"]
    for step in (
        [*flags, "-Wl,-soname,libcuda.so.1", "-o", "libcuda.so.1", cuda / "fake_cuda.c"],
        [*flags, "-o", "libcudart.so.12", cuda / "fake_cudart.c", "-L.", "-l:libcuda.so.1",
         "-Wl,-rpath,$ORIGIN"],
    ):  # fmt: skip
        subprocess.run([gcc, *map(str, step)], cwd=out, check=True)


def _node_values(fg, name: str) -> tuple[int, int]:
    """(total, self) of every node of that function in a flame graph (named ``name`` or
    ``name (file:line)``), summed."""
    total = self_v = 0
    for level in fg.levels:
        v = level.values
        for i in range(0, len(v), 4):
            if fg.names[v[i + 3]] == name or fg.names[v[i + 3]].startswith(name + " ("):
                total, self_v = total + v[i + 1], self_v + v[i + 2]
    return total, self_v


@pytest.mark.slow
def test_agent_gpu_memory_profiles_in_grafana_profile_types(server, tmp_path):
    """The agent's live GPU memory of a Python program (allocations through the CUDA
    runtime in methods of two classes) reaches the server as the memory profile types
    Grafana knows, and reads there as self (the allocation calls) vs total (`Class >
    method` frames): 12 MiB kept by KVCache > grow, 16 MiB at the peak by Scratch > use."""
    from aiflame.proto.pyroscope.types.v1 import types_pb2 as t

    MiB = 1 << 20
    _stand_in_cuda(tmp_path)
    prog = tmp_path / "gpu_memory.py"
    prog.write_text(MEMORY_PROGRAM)
    service = f"agent-e2e-memory-{os.getpid()}"  # its own workload (series carry no pid)
    target = subprocess.Popen(
        [sys.executable, str(prog), str(tmp_path / "libcudart.so.12"), "6"],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "OTEL_SERVICE_NAME": service},
    )  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(SRC))
    agent = subprocess.Popen(
        [sys.executable, "-m", "aiflame", "agent", "--server", server.url, "--period", "2",
         "--spool", str(tmp_path / "spool"), "--metrics-listen", "", "--no-nvml",
         "--no-kineto-abstract"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )  # fmt: skip
    c = Client(server.url)
    try:
        out, _ = target.communicate(timeout=90)
        assert target.returncode == 0 and "done" in out
        now = int(time.time() * 1000)
        span = {"start": now - 600_000, "end": now + 60_000}
        selector = f'{{service_name="{service}"}}'
        deadline, alloc = time.monotonic() + 60, None
        while time.monotonic() < deadline:
            time.sleep(2)
            req = q.SelectMergeStacktracesRequest(
                profile_typeID="memory:alloc_space:bytes:space:bytes",
                label_selector=selector, **span,
            )  # fmt: skip
            alloc = c.connect("SelectMergeStacktraces", req, q.SelectMergeStacktracesResponse)
            if alloc.flamegraph.total >= 28 * MiB:
                break
        assert alloc is not None and alloc.flamegraph.total == 28 * MiB, "no memory profile"
    finally:
        agent.terminate()
        agent.wait(60)
        if target.poll() is None:
            target.kill()
            target.wait()
    types = c.connect("ProfileTypes", q.ProfileTypesRequest(**span), q.ProfileTypesResponse)
    ids = {pt.ID for pt in types.profile_types}
    assert {
        "memory:inuse_space:bytes:space:bytes",
        "memory:inuse_objects:count:space:bytes",
        "memory:alloc_space:bytes:space:bytes",
        "memory:alloc_objects:count:space:bytes",
    } <= ids
    fg = alloc.flamegraph
    assert _node_values(fg, "KVCache > grow")[0] == 12 * MiB
    assert _node_values(fg, "Scratch > use")[0] == 16 * MiB
    assert _node_values(fg, "cudaMalloc") == (28 * MiB, 28 * MiB)  # self: the calls
    assert _node_values(fg, "KVCache > grow")[1] == 0  # total, not self
    count = c.connect(
        "SelectMergeStacktraces",
        q.SelectMergeStacktracesRequest(
            profile_typeID="memory:alloc_objects:count:space:bytes", label_selector=selector, **span
        ),
        q.SelectMergeStacktracesResponse,
    ).flamegraph
    assert _node_values(count, "KVCache > grow")[0] == 3
    assert _node_values(count, "Scratch > use")[0] == 1
    # in use: each memory profile (one per period) says what was live at the process's
    # peak in it; the 16 MiB block only in the period of the peak
    series = c.connect(
        "SelectSeries",
        q.SelectSeriesRequest(
            profile_typeID="memory:inuse_space:bytes:space:bytes", label_selector=selector,
            step=1, **span,
        ),
        q.SelectSeriesResponse,
    )  # fmt: skip
    points = sorted(p.value for s in series.series for p in s.points)
    assert points[-1] == 28 * MiB and set(points[:-1]) <= {12 * MiB, 0}
    inuse = c.connect(
        "SelectMergeStacktraces",
        q.SelectMergeStacktracesRequest(
            profile_typeID="memory:inuse_space:bytes:space:bytes", label_selector=selector, **span
        ),
        q.SelectMergeStacktracesResponse,
    ).flamegraph
    assert _node_values(inuse, "Scratch > use")[0] == 16 * MiB
    assert _node_values(inuse, "KVCache > grow")[0] == 12 * MiB * (len(points))
    # the Drilldown app lists the service's memory types (Series) and their labels
    r = c.connect(
        "LabelValues",
        t.LabelValuesRequest(name="__type__", matchers=[selector], **span),
        t.LabelValuesResponse,
    )
    assert {"inuse_space", "alloc_space", "alloc_objects", "inuse_objects"} <= set(r.names)
