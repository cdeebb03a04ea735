"""What watching for CUDA/HIP libraries from the first call costs the machine's processes.

    sudo python benchmarks/bench_cuda_first_calls.py [--rounds 9]

The CUDA probes see a process's first calls by watching its dynamic loader: a uprobe on
``_dl_debug_state`` (called twice per ``dlopen``/``dlclose``; the BPF program looks at the
libraries added to the loader's list since it last looked) and a hook at each ``exec``;
a process that loaded a CUDA/HIP library it is not set up for waits, stopped, while its
probes go in. Rounds alternate, in a shuffled order, nothing loaded and ``CudaProbes``
loaded for every process (as ``record --all`` and the agent), and time, per operation:

* ``getppid()``: a system call (nothing should change: no system call is hooked);
* ``dlopen()`` + ``dlclose()`` of a small library (the loader's probe fires four times);
* ``fork()`` + ``exec()`` of a program that exits at once (the exec hook);

each the median of the rounds, from a C program built here with gcc (wall time minus run
delay, ``/proc/PID/schedstat``: the time it held a CPU). Then the stop itself: a
program that loads PyPI's libcudart and calls it at once, launched under ``CudaProbes``:
how long it was stopped.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aiflame.collectors.ebpf.cuda import CudaOptions, CudaProbes

OPS_C = r"""
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
int main(int argc, char **argv)
{
    long n = atol(argv[2]);
    for (long i = 0; i < n; i++) {
        if (!strcmp(argv[1], "syscall")) {
            getppid();
        } else if (!strcmp(argv[1], "dlopen")) {
            void *h = dlopen(argv[3], RTLD_NOW | RTLD_LOCAL);
            if (!h) return 1;
            dlclose(h);
        } else {
            pid_t p = fork();
            if (p == 0) { execl(argv[3], argv[3], (char *)0); _exit(127); }
            waitpid(p, 0, 0);
        }
    }
    return 0;
}
"""
LIB_C = "int answer(void) { return 42; }\n"
OPERATIONS = {"syscall": 2_000_000, "dlopen": 20_000, "exec": 1_000}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_cuda_first_calls: needs root (eBPF)")
    cc = shutil.which("gcc")
    if cc is None:
        sys.exit("bench_cuda_first_calls: gcc is needed")
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        (t / "ops.c").write_text(OPS_C)
        (t / "lib.c").write_text(LIB_C)
        (t / "exit.c").write_text("int main(void) { return 0; }\n")
        subprocess.run([cc, "-O1", "-o", t / "ops", t / "ops.c", "-ldl"], check=True)
        subprocess.run([cc, "-O1", "-shared", "-fPIC", "-o", t / "libsmall.so", t / "lib.c"])
        subprocess.run([cc, "-O1", "-o", t / "exit", t / "exit.c"], check=True)
        extra = {"syscall": "", "dlopen": str(t / "libsmall.so"), "exec": str(t / "exit")}
        per_op: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.rounds):
            setups = ["alone", "probes"]
            random.shuffle(setups)
            for setup in setups:
                probes = CudaProbes(CudaOptions(every_process=True)) if setup == "probes" else None
                try:
                    for op, n in OPERATIONS.items():
                        argv = [str(t / "ops"), op, str(n), extra[op]]
                        held = _held_time(argv)
                        per_op.setdefault((op, setup), []).append(held / n * 1e9)
                finally:
                    if probes is not None:
                        probes.close()
        print(f"{args.rounds} rounds, medians, ns per operation")
        print("| operation | alone | CUDA probes loaded | difference |")
        print("|---|---:|---:|---:|")
        for op in OPERATIONS:
            a = statistics.median(per_op[op, "alone"])
            b = statistics.median(per_op[op, "probes"])
            print(f"| {op} | {a:,.0f} | {b:,.0f} | {b - a:+,.0f} |")
    stop_time()


def _held_time(argv: list[str]) -> float:
    """Seconds the program held a CPU (wall time minus its run delay)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv)
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
    wall = time.perf_counter() - t0
    with open(f"/proc/{proc.pid}/schedstat") as f:
        _, delay_ns, _ = (int(x) for x in f.read().split())
    proc.wait()
    if proc.returncode:
        sys.exit(f"bench_cuda_first_calls: {' '.join(argv)} failed")
    return wall - delay_ns / 1e9


def stop_time() -> None:
    """How long a program that loads libcudart and calls it at once is stopped."""
    try:
        import nvidia.cuda_runtime as rt  # type: ignore[import-not-found]
    except ImportError:
        print("(no nvidia-cuda-runtime-cu12: the stop is not timed)")
        return
    lib = sorted(Path(next(iter(rt.__path__))).glob("lib/libcudart.so.*"))[0]
    code = (
        f"import ctypes; ctypes.CDLL({str(lib)!r}).cudaMalloc(ctypes.byref(ctypes.c_void_p()), 8)"
    )
    longest = []
    for _ in range(5):
        with CudaProbes(CudaOptions()) as probes:
            proc = subprocess.Popen([sys.executable, "-c", code], preexec_fn=probes.preexec)
            probes.watch(proc.pid)
            while proc.poll() is None:
                probes.poll(20)
            probes.drain()
        longest.append(probes.holds.longest_s * 1000)
    print(
        f"stopped while set up (a Python process loading libcudart): "
        f"{statistics.median(longest):.1f} ms (median of 5; {min(longest):.1f}-{max(longest):.1f})"
    )


if __name__ == "__main__":
    main()
