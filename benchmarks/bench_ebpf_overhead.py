"""What the eBPF CPU sampler costs a CPU-bound program: aiflame vs bpftrace, at 99 Hz.

    sudo python benchmarks/bench_ebpf_overhead.py [--rounds 15] [--work 1.0] [--hz 99]

A C program (built here with gcc, frame pointers, a call chain ten deep so the unwinder
has work) does a fixed amount of work per run. Rounds alternate three setups: nothing
attached, aiflame's sampler (``CpuSampler``: every CPU, user + kernel stacks, counted in the
kernel; the same code ``aiflame record`` runs) of the whole system (``aiflame``, as
``record --all``) and of the program alone (``aiflame-pid``, as ``record -- PROGRAM``: the
others' samples are dropped after one map lookup), and ``bpftrace -e 'profile:hz:99 {
@[kstack, ustack, pid, tid, comm] = count(); }'`` (the same job, written the usual way;
its map cleared at exit rather than printed).
Both samplers are started before the program and stopped after it, outside the timing.

Per run it records the wall time, and from ``/proc/PID/schedstat`` (read while the program
is a zombie, before it is reaped) the time it waited for a CPU. The machine this was
written on is shared (2 cores, other workloads' load), so wall time swings by tens of
percent; **wall minus run delay** (the time the program held a CPU, including the sampling
interrupts taken while it ran) is what other processes' load does not disturb. Medians of
each setup, and their ratio to the no-sampler runs.

With ``BPF_ENABLE_STATS`` on (a file descriptor, so it ends with this process) the kernel
also times every run of the sampling programs: their mean cost per sample, and what that
is per CPU at this rate, is the part of the overhead that can be measured exactly.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from aiflame.collectors.ebpf.sampler import CpuSampler, SamplerOptions

WORKLOAD_C = r"""
#include <stdlib.h>
static volatile unsigned long sink;
__attribute__((noinline)) unsigned long leaf(unsigned long x)
{
    for (int i = 0; i < 2000; i++)
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return x;
}
__attribute__((noinline)) unsigned long chain(unsigned long x, int depth)
{
    return depth ? chain(x, depth - 1) + 1 : leaf(x);
}
int main(int argc, char **argv)
{
    long n = atol(argv[1]);
    unsigned long x = 1;
    for (long i = 0; i < n; i++)
        x = chain(x, 8);
    sink = x;
    return 0;
}
"""
# The map is cleared at exit: printing (symbolizing) it is not what is measured.
BPFTRACE_SCRIPT = (
    "profile:hz:{hz} {{ @[kstack, ustack, pid, tid, comm] = count(); }} END {{ clear(@); }}"
)
_BPF_ENABLE_STATS = 32
_BPF_SYSCALL = {"x86_64": 321, "aarch64": 280}


@dataclass
class Runs:
    wall: list[float] = field(default_factory=list)
    held: list[float] = field(default_factory=list)  # wall minus run delay
    prog_ns: list[tuple[int, int]] = field(default_factory=list)  # (run_time_ns, run_cnt)

    def line(self, name: str, base: Runs | None) -> str:
        w, h = statistics.median(self.wall), statistics.median(self.held)
        q = statistics.quantiles(self.held, n=4) if len(self.held) > 1 else [h, h, h]
        text = f"{name:<12} wall {w:7.3f} s   held a CPU {h:7.3f} s (IQR {q[0]:.3f}-{q[2]:.3f})"
        if base is not None:
            bw, bh = statistics.median(base.wall), statistics.median(base.held)
            text += f"   ratio wall {w / bw:6.4f}   held {h / bh:6.4f}"
        return text


def build(tmp: Path) -> Path:
    src, exe = tmp / "work.c", tmp / "work"
    src.write_text(WORKLOAD_C)
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        sys.exit("bench_ebpf_overhead: gcc is needed")
    subprocess.run(
        [cc, "-O1", "-fno-omit-frame-pointer", "-fno-optimize-sibling-calls", "-o", exe, src],
        check=True,
    )
    return exe


def calibrate(exe: Path, seconds: float) -> int:
    """Iterations for about ``seconds`` of CPU."""
    n = 1000
    while True:
        t = run_once(exe, n)[1]
        if t > 0.2:
            return max(1, int(n * seconds / t))
        n *= 4


def run_once(exe: Path, n: int, preexec=None) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """(wall, wall minus run delay) of one run."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([str(exe), str(n)], preexec_fn=preexec)
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # a zombie: schedstat readable
    wall = time.perf_counter() - t0
    with open(f"/proc/{proc.pid}/schedstat") as f:
        _, run_delay_ns, _ = (int(x) for x in f.read().split())
    proc.wait()
    return wall, wall - run_delay_ns / 1e9


def enable_bpf_stats() -> int | None:
    number = _BPF_SYSCALL.get(platform.machine())
    if number is None:
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    attr = ctypes.create_string_buffer(8)  # enable_stats.type = BPF_STATS_RUN_TIME (0)
    fd = libc.syscall(ctypes.c_long(number), _BPF_ENABLE_STATS, attr, ctypes.c_uint(8))
    return fd if fd >= 0 else None


def perf_prog_stats(pid: int) -> tuple[int, int]:
    """Sum of (run_time_ns, run_cnt) of the perf-event programs ``pid`` holds."""
    total_ns = total_cnt = 0
    base = f"/proc/{pid}/fdinfo"
    for fd in os.listdir(base):
        try:
            with open(os.path.join(base, fd)) as f:
                fields = dict(ln.split(":", 1) for ln in f.read().splitlines() if ":" in ln)
        except OSError:
            continue
        if fields.get("prog_type", "").strip() == "7":  # BPF_PROG_TYPE_PERF_EVENT
            total_ns += int(fields.get("run_time_ns", 0))
            total_cnt += int(fields.get("run_cnt", 0))
    return total_ns, total_cnt


def with_aiflame(exe: Path, n: int, hz: int, runs: Runs, only_target: bool) -> None:
    sampler = CpuSampler(SamplerOptions(freq=hz, pids=[] if only_target else None))
    sampler.start()
    try:
        before = perf_prog_stats(os.getpid())
        wall, held = run_once(exe, n, sampler.preexec if only_target else None)
        after = perf_prog_stats(os.getpid())
        sampler.poll(0)
        sampler.stop()
    finally:
        sampler.close()
    runs.wall.append(wall)
    runs.held.append(held)
    runs.prog_ns.append((after[0] - before[0], after[1] - before[1]))


def with_bpftrace(exe: Path, n: int, hz: int, runs: Runs) -> None:
    bt = subprocess.Popen(
        ["bpftrace", "-e", BPFTRACE_SCRIPT.format(hz=hz)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert bt.stdout is not None
        seen = []
        for line in bt.stdout:  # warnings (RLIMIT_MEMLOCK), then "Attaching 1 probe..."
            seen.append(line.strip())
            if "Attaching" in line:
                break
        else:
            raise RuntimeError(f"bpftrace did not start: {' / '.join(seen)}")
        time.sleep(0.2)  # its perf events are opened after the message
        before = perf_prog_stats(bt.pid)
        wall, held = run_once(exe, n)
        after = perf_prog_stats(bt.pid)
    finally:
        bt.send_signal(signal.SIGINT)
        try:
            bt.communicate(timeout=30)
        except subprocess.TimeoutExpired:  # its exit can take minutes on a loaded machine
            bt.kill()
            bt.communicate()
    runs.wall.append(wall)
    runs.held.append(held)
    runs.prog_ns.append((after[0] - before[0], after[1] - before[1]))


def prog_cost(name: str, runs: Runs, hz: int) -> str:
    ns = sum(t for t, _ in runs.prog_ns)
    cnt = sum(c for _, c in runs.prog_ns)
    if not cnt:
        return f"{name:<12} no program statistics (BPF_ENABLE_STATS unavailable?)"
    per = ns / cnt
    return (
        f"{name:<12} {per:8.0f} ns per sample ({cnt:,} samples), "
        f"{per * hz / 1e9 * 100:.4f}% of a CPU at {hz} Hz"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--work", type=float, default=1.0, help="CPU seconds per run")
    ap.add_argument("--hz", type=int, default=99)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_ebpf_overhead: run as root (eBPF)")
    have_bpftrace = shutil.which("bpftrace") is not None
    stats_fd = enable_bpf_stats()
    with tempfile.TemporaryDirectory() as tmp:
        exe = build(Path(tmp))
        n = calibrate(exe, args.work)
        setups = ["none", "aiflame", "aiflame-pid"] + (["bpftrace"] if have_bpftrace else [])
        results = {name: Runs() for name in setups}
        rng = random.Random(args.seed)
        for r in range(args.rounds):
            order = setups[:]
            rng.shuffle(order)  # no setup always follows the same one
            for setup in order:
                if setup == "none":
                    wall, held = run_once(exe, n)
                    results["none"].wall.append(wall)
                    results["none"].held.append(held)
                elif setup.startswith("aiflame"):
                    with_aiflame(exe, n, args.hz, results[setup], setup == "aiflame-pid")
                else:
                    with_bpftrace(exe, n, args.hz, results["bpftrace"])
            print(f"round {r + 1}/{args.rounds}", file=sys.stderr)
    if stats_fd is not None:
        os.close(stats_fd)
    load = os.getloadavg()[0]
    print(f"{args.rounds} rounds, {args.work:g} s of work per run, {args.hz} Hz, load {load:.1f}")
    base = results["none"]
    print(base.line("none", None))
    for name in setups[1:]:
        print(results[name].line(name, base))
    print("in-kernel cost of the sampling program (BPF_ENABLE_STATS):")
    for name in setups[1:]:
        print(prog_cost(name, results[name], args.hz))
    return 0


if __name__ == "__main__":
    sys.exit(main())
