"""The eBPF sampler's cost to a CPU PyTorch training loop, measured by fast alternation.

    sudo python benchmarks/bench_record_alternate.py [--slots 240] [--slot 1.0] [--rate 99]

On a shared virtual machine the speed of one process drifts by several percent over tens of
seconds, more than the cost to be measured, so comparing intervals tens of seconds apart
(bench_record_overhead.py) cannot resolve a 1-3% cost. Here one training process
(record_workload.py --serve, OMP_NUM_THREADS=1) runs throughout and one sampler (the same
``CpuSampler`` that ``aiflame record`` runs as root: every CPU at ``--rate`` Hz, the target's
Python stacks walked in the kernel, new stacks' code objects named from user space) stays
loaded; its timers are switched on and off in ``--slot``-second slots, in a random order with
as many of each. Each step's wall time is assigned to its slot (steps that cross a switch are
left out), and the overhead is the mean step time in "on" slots over "off" slots, minus one,
with a 95% interval from resampling the slots (bootstrap), so slow drift falls on both sides
equally. The kernel's own timing of the sampling program (BPF_ENABLE_STATS) is printed
beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_ebpf_overhead import enable_bpf_stats, perf_prog_stats

from aiflame.collectors.ebpf.sampler import CpuSampler, SamplerOptions

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / "record_workload.py"


def run(args: argparse.Namespace, tmp: str) -> tuple[list[tuple[float, float, bool]], dict]:
    log = f"{tmp}/steps.json"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    target = subprocess.Popen(
        [sys.executable, str(WORKLOAD), "--serve", log], stdout=subprocess.PIPE, text=True, env=env
    )
    assert target.stdout is not None and target.stdout.readline().strip() == "ready"
    plan = [True, False] * (args.slots // 2)
    random.Random(args.seed).shuffle(plan)
    stats_fd = enable_bpf_stats()
    sampler = CpuSampler(SamplerOptions(freq=args.rate, pids=[target.pid]))
    slots: list[tuple[float, float, bool]] = []
    try:
        sampler.start()
        sampler.add_target(target.pid)
        t_end = time.monotonic() + 3.0  # warm-up: every stack of the loop seen and named
        while time.monotonic() < t_end:
            sampler.poll(100)
        sampler.pause()
        ns0, runs0 = perf_prog_stats(os.getpid())
        on_time = 0.0
        for on in plan:
            (sampler.resume if on else sampler.pause)()
            t0 = time.monotonic()
            while (left := t0 + args.slot - time.monotonic()) > 0:
                sampler.poll(max(1, int(left * 1000)))
            slots.append((t0, time.monotonic(), on))
            on_time += (time.monotonic() - t0) if on else 0.0
        sampler.pause()
        ns, runs = perf_prog_stats(os.getpid())
        raw = sampler.stop()
    finally:
        sampler.close()
        if stats_fd is not None:
            os.close(stats_fd)
    target.send_signal(signal.SIGINT)
    target.wait(timeout=120)
    rows = json.loads(Path(log).read_text())
    kernel = {
        "runs": runs - runs0,
        "ns": ns - ns0,
        "on_time": on_time,
        "python": raw.stats["python_stacks"],
    }
    return [(i, r[1], on) for r in rows for i, on in _slot_of(r, slots)], kernel


def _slot_of(row: list[float], slots: list[tuple[float, float, bool]]) -> list[tuple[int, bool]]:
    """[(slot index, sampler on)] of the slot holding the whole step, [] if it crossed one."""
    end, duration = row[0], row[1]
    for i, (t0, t1, on) in enumerate(slots):
        if t0 <= end - duration and end <= t1:
            return [(i, on)]
    return []


def report(steps: list[tuple[int, float, bool]], kernel: dict, args: argparse.Namespace) -> None:
    by_slot: dict[tuple[int, bool], list[float]] = {}
    for slot, duration, on in steps:
        by_slot.setdefault((slot, on), []).append(duration)
    on_slots = [statistics.fmean(v) for (_, on), v in by_slot.items() if on]
    off_slots = [statistics.fmean(v) for (_, on), v in by_slot.items() if not on]
    ratio = statistics.fmean(on_slots) / statistics.fmean(off_slots) - 1
    rng = random.Random(1)
    boot = sorted(
        statistics.fmean(rng.choices(on_slots, k=len(on_slots)))
        / statistics.fmean(rng.choices(off_slots, k=len(off_slots)))
        - 1
        for _ in range(2000)
    )
    lo, hi = boot[50], boot[1949]
    n_on = sum(1 for *_, on in steps if on)
    n_off = len(steps) - n_on
    print(
        f"{len(on_slots)} on / {len(off_slots)} off slots of {args.slot:g} s "
        f"({n_on} / {n_off} steps), {args.rate} Hz; mean step "
        f"{statistics.fmean(off_slots) * 1000:.2f} ms without the sampler"
    )
    print(
        f"overhead (mean step time on / off - 1): {ratio * 100:+.2f}% "
        f"(95%: {lo * 100:+.2f} .. {hi * 100:+.2f}%)"
    )
    if kernel["runs"]:
        print(
            f"sampling program (BPF_ENABLE_STATS): {kernel['runs']} runs, "
            f"{kernel['ns'] / kernel['runs'] / 1000:.1f} us each, "
            f"{kernel['ns'] / 1e9 / kernel['on_time'] * 100:.3f}% of one CPU while on; "
            f"{kernel['python']} samples with a Python stack walked"
        )
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--slots", type=int, default=240)
    ap.add_argument("--slot", type=float, default=1.0, help="seconds per slot")
    ap.add_argument("--rate", type=int, default=99)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        steps, kernel = run(args, tmp)
    report(steps, kernel, args)


if __name__ == "__main__":
    main()
