"""What a CPU sample of a Python thread costs in the kernel, per CPython version (3.8-3.15).

    sudo python benchmarks/bench_python_walk.py [--rounds 5] [--depth 30] [--seconds 1.5]

For each interpreter found (pyenv's ``~/.pyenv/versions/3.X.*``, ``/usr/bin/python3.X``, and
the chroots ``.ci/pythons`` installs under ``.cache/pythons/<release>/``; run there through
``chroot``, as a program in a container), a Python program spins in pure Python at the
bottom of a call chain ``--depth`` frames deep, while aiflame's CPU sampler (``CpuSampler``,
as ``aiflame record -- PROGRAM`` runs it: that program only, user + kernel stacks, the
Python stack walked in the kernel) samples it at 999 Hz. Rounds visit the interpreters in
a shuffled order.

The kernel times every run of the sampling program (``BPF_ENABLE_STATS``). Runs on samples
of other processes (the machine's other CPU, other work) end after one lookup; their cost
is measured alone first (the sampler with no target) and taken out, which leaves the cost
of the program's own samples: the native stacks, the Python walk of ``depth`` + 4 frames
(the module, the chain, the loop, its generator expression), the counting. Reported: the
median per sample of each version and its ratio to 3.12's.
"""

from __future__ import annotations

import argparse
import glob
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aiflame.collectors.ebpf.sampler import CpuSampler, SamplerOptions

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
from bench_ebpf_overhead import enable_bpf_stats, perf_prog_stats  # noqa: E402

PROGRAM = """
import sys, time

def spin(seconds):
    t0 = time.thread_time()
    while time.thread_time() - t0 < seconds:
        sum(i * i for i in range(100))

def chain(n, seconds):
    return chain(n - 1, seconds) if n else spin(seconds)

chain(int(sys.argv[1]), float(sys.argv[2]))
"""
HZ = 999


def interpreters() -> dict[str, tuple[list[str], str]]:
    """name -> (the command prefix that runs it, the root it sees its files under)."""
    found: dict[str, tuple[list[str], str]] = {}
    for exe in sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.*/bin/python3.*"))):
        version = _version(exe)
        if version:
            found[f"{version} pyenv"] = ([exe], "/")
    chroots = Path(os.environ.get("AIFLAME_PYTHONS_DIR") or ROOT / ".cache" / "pythons")
    for root in sorted(chroots.glob("*")) if chroots.is_dir() else []:
        for host in sorted(root.glob("usr/bin/python3.*")):
            version = _version(str(host))
            if version:
                exe = f"/usr/bin/{host.name}"
                found[f"{version} {root.name}"] = (["chroot", str(root), exe], str(root))
    return found


def _version(exe: str) -> str | None:
    """``3.10`` of ``.../python3.10``; None for other names and versions before 3.8."""
    major, _, minor = os.path.basename(exe).removeprefix("python").partition(".")
    ok = major == "3" and minor.isdigit() and int(minor) >= 8
    return f"3.{minor}" if ok else None


def other_samples_cost(seconds: float) -> float:
    """ns per run of the sampling program on samples of processes not sampled."""
    sampler = CpuSampler(SamplerOptions(freq=HZ, pids=[]))
    sampler.start()
    try:
        before = perf_prog_stats(os.getpid())
        time.sleep(seconds)
        after = perf_prog_stats(os.getpid())
    finally:
        sampler.close()
    ns, runs = after[0] - before[0], after[1] - before[1]
    return ns / runs if runs else 0.0


def one_run(argv: list[str], other_ns: float) -> tuple[float, int]:
    """(ns per sample of the program, its samples with a Python stack)."""
    sampler = CpuSampler(SamplerOptions(freq=HZ, pids=[]))
    sampler.start()
    try:
        before = perf_prog_stats(os.getpid())
        proc = subprocess.Popen(argv, preexec_fn=sampler.preexec)
        sampler.add_target(proc.pid)
        while proc.poll() is None:
            sampler.poll(50)
        after = perf_prog_stats(os.getpid())
        raw = sampler.stop()
    finally:
        sampler.close()
    if proc.returncode != 0:
        sys.exit(f"bench_python_walk: {' '.join(argv)} failed")
    samples = raw.stats["samples"]
    ns, runs = after[0] - before[0], after[1] - before[1]
    own = ns - (runs - samples) * other_ns
    return own / max(samples, 1), raw.stats["python_stacks"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--depth", type=int, default=30)
    ap.add_argument("--seconds", type=float, default=1.5)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_python_walk: needs root (eBPF)")
    stats_fd = enable_bpf_stats()
    if stats_fd is None:
        sys.exit("bench_python_walk: the kernel refused BPF_ENABLE_STATS")
    found = interpreters()
    if not found:
        sys.exit("bench_python_walk: no CPython 3.8+ found (pyenv, or .ci/pythons)")
    costs: dict[str, list[float]] = {name: [] for name in found}
    walked: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        scripts = {}
        for name, (_, root) in found.items():  # where each interpreter can read the program
            where = Path(tempfile.mkdtemp(dir=Path(root) / "tmp")) if root != "/" else Path(tmp)
            (where / "walk.py").write_text(PROGRAM)
            scripts[name] = "/" + str((where / "walk.py").relative_to(root))
        try:
            other_ns = other_samples_cost(2.0)
            print(f"other processes' samples: {other_ns:.0f} ns per run of the program")
            for r in range(args.rounds):
                order = list(found)
                random.shuffle(order)
                for name in order:
                    argv = [*found[name][0], scripts[name], str(args.depth), str(args.seconds)]
                    ns, python = one_run(argv, other_ns)
                    costs[name].append(ns)
                    walked[name] = python
                print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
        finally:
            for name, (_, root) in found.items():
                if root != "/":
                    Path(Path(root) / scripts[name].lstrip("/")).unlink(missing_ok=True)
                    os.rmdir(Path(root) / os.path.dirname(scripts[name]).lstrip("/"))
    os.close(stats_fd)
    medians = {name: statistics.median(v) for name, v in costs.items()}
    base = [v for name, v in medians.items() if name.startswith("3.12 ")]
    ref = statistics.median(base) if base else None
    print(f"\n{HZ} Hz, Python stack {args.depth + 4} frames deep, {args.rounds} rounds")
    print("| Python | per sample (ns, median) | range | samples walked | vs 3.12 |")
    print("|---|---:|---:|---:|---:|")
    for name in sorted(medians, key=lambda n: (int(n.split()[0].split(".")[1]), n)):
        v = costs[name]
        ratio = f"{medians[name] / ref:.2f}" if ref else "-"
        print(
            f"| {name} | {medians[name]:,.0f} | {min(v):,.0f}-{max(v):,.0f} | "
            f"{walked[name]:,} | {ratio} |"
        )


if __name__ == "__main__":
    main()
