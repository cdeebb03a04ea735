"""The cost of a probed CUDA call made from Python, with the caller's Python stack walked.

    sudo python benchmarks/bench_cuda_probes_python.py [--calls 20000] [--reps 3]

A Python loop calls PyPI's real libcudart's ``cudaStreamSynchronize`` through ctypes
(without a GPU the call fails fast) at the bottom of 0 and 30 extra Python frames; each
round is a fresh process, with no probe and with aiflame's CUDA probes (entry and return
probes, user stack, the Python stack walked by ``bpf/pystack.h``, summed in the kernel; no
per-second cap). The difference per call is what the probes cost; the difference between
the depths is the walk's cost per Python frame. bpftrace has no Python stack walk to set
beside it; bench_cuda_probes.py compares the native part with bpftrace.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

LOOP = r"""
import ctypes, sys, time
rt = ctypes.CDLL(sys.argv[1])
n, depth = int(sys.argv[2]), int(sys.argv[3])
sync = rt.cudaStreamSynchronize
sync.argtypes = [ctypes.c_void_p]
def deep(k):
    if k:
        return deep(k - 1)
    t0 = time.perf_counter()
    for _ in range(n):
        sync(None)
    return time.perf_counter() - t0
print("ready", flush=True)
sys.stdin.readline()
print(deep(depth) / n * 1e9, flush=True)
"""


def libcudart() -> str:
    import nvidia.cuda_runtime as rt  # type: ignore[import-not-found]

    return str(sorted(Path(next(iter(rt.__path__))).glob("lib/libcudart.so.*"))[0])


def one(loop: Path, lib: str, calls: int, depth: int, probed: bool) -> float:
    from aiflame.collectors.ebpf.cuda import CudaOptions, CudaProbes

    argv = [sys.executable, str(loop), lib, str(calls), str(depth)]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdin is not None
    assert proc.stdout.readline().strip() == "ready"
    probes = CudaProbes(CudaOptions(caps={})) if probed else None
    try:
        if probes is not None:
            probes.watch(proc.pid)
            assert probes.python is not None, "this kernel does not walk Python stacks"
        proc.stdin.write("go\n")
        proc.stdin.flush()
        ns = float(proc.stdout.readline())
        proc.wait(timeout=60)
    finally:
        if probes is not None:
            probes.close()
    return ns


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    lib = libcudart()
    with tempfile.TemporaryDirectory() as tmp:
        loop = Path(tmp) / "loop.py"
        loop.write_text(LOOP)
        print("| extra Python frames | no probe, ns per call | probed, ns per call | probe cost |")
        print("|---|---|---|---|")
        cost = {}
        for depth in (0, 30):
            runs = {p: [] for p in (False, True)}
            for _ in range(args.reps):
                for probed in (False, True):
                    runs[probed].append(one(loop, lib, args.calls, depth, probed))
            none, probed = statistics.median(runs[False]), statistics.median(runs[True])
            cost[depth] = probed - none
            print(f"| {depth} | {none:,.0f} | {probed:,.0f} | {cost[depth] / 1000:.1f} us |")
        print(f"\nper Python frame walked: {(cost[30] - cost[0]) / 30:.0f} ns")


if __name__ == "__main__":
    main()
