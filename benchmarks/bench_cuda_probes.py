#!/usr/bin/env python3
"""The cost of one probed CUDA runtime call, aiflame's CUDA probes beside bpftrace.

A C loop (benchmarks/cuda_probe_loop.c) calls PyPI's real libcudart N times per round:
``cudaLaunchKernel`` (aiflame: an entry probe, event with the user stack) and
``cudaStreamSynchronize`` (entry + return probe: time blocked). Without a GPU the calls
fail fast (about 50 ns), so the difference per call is the cost of the probe. Conditions,
each a fresh process, interleaved over ``--reps``:

* ``none``: no probe;
* ``aiflame``: CudaProbes with no cap, every call an event (stack, ring buffer, decoded
  and summed in Python while the loop runs);
* ``aiflame, over cap``: the per-second cap reached, calls dropped in the kernel (what a
  program launching millions of kernels pays once the budget is spent);
* ``bpftrace count``: ``uprobe:...{ @ = count(); }`` (the least a uprobe can do);
* ``bpftrace ustack``: ``@[ustack] = count()`` (stacks, aggregated in the kernel);
* for the sync: ``bpftrace time``: entry timestamp per thread, sum at return (and ustack).

Needs root, gcc, bpftrace, nvidia-cuda-runtime-cu12. Run:

    python benchmarks/bench_cuda_probes.py [--calls 100000] [--rounds 5] [--reps 3]
"""

from __future__ import annotations

import argparse
import os
import queue
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "src"))

from aiflame.collectors.ebpf.cuda import CudaOptions, CudaProbes  # noqa: E402
from aiflame.collectors.ebpf.cuda_apis import ApiClass  # noqa: E402


def libcudart() -> str:
    import nvidia.cuda_runtime as rt  # type: ignore[import-not-found]

    return str(sorted(Path(next(iter(rt.__path__))).glob("lib/libcudart.so.*"))[0])


def build(out: Path) -> Path:
    exe = out / "cuda_probe_loop"
    cmd = ["gcc", "-O2", "-fno-omit-frame-pointer", "-o", str(exe)]
    subprocess.run([*cmd, str(HERE / "cuda_probe_loop.c"), "-ldl"], check=True)
    return exe


def bpftrace_script(lib: str, what: str, variant: str) -> str:
    fn = "cudaLaunchKernel" if what == "launch" else "cudaStreamSynchronize"
    begin = 'BEGIN { printf("ATTACHED\\n"); } '
    if what == "launch":
        body = "@n = count();" if variant == "count" else "@[ustack] = count();"
        return begin + f"uprobe:{lib}:{fn} {{ {body} }}"
    stack = "" if variant == "time" else " @st[ustack] = count();"
    return begin + (
        f"uprobe:{lib}:{fn} {{ @s[tid] = nsecs; }} "
        f"uretprobe:{lib}:{fn} /@s[tid]/ {{ @ns = sum(nsecs - @s[tid]); delete(@s[tid]);{stack} }}"
    )


class Loop:
    """The loop program, its output read by a thread (the main thread polls probes)."""

    def __init__(self, exe: Path, lib: str, what: str, calls: int, rounds: int) -> None:
        argv = [str(exe), lib, what, str(calls), str(rounds)]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        assert self.lines.get(timeout=30) == "ready"

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.strip())
        self.lines.put("EOF")

    def go(self, poll=None) -> list[float]:  # type: ignore[no-untyped-def]
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        out = []
        while True:
            if poll is not None:
                poll()
            try:
                line = self.lines.get(timeout=0.02)
            except queue.Empty:
                continue
            if line.startswith("ns/call"):
                out.append(float(line.split()[1]))
            elif line in ("done", "EOF"):
                break
        self.proc.wait(timeout=60)
        return out


def run_none(exe, lib, what, calls, rounds):  # type: ignore[no-untyped-def]
    return Loop(exe, lib, what, calls, rounds).go(), ""


def run_aiflame(exe, lib, what, calls, rounds, capped):  # type: ignore[no-untyped-def]
    loop = Loop(exe, lib, what, calls, rounds)
    caps = {c: 0 for c in ApiClass}
    if capped:
        caps[ApiClass.LAUNCH] = caps[ApiClass.SYNC] = 1
    with CudaProbes(CudaOptions(caps=caps)) as probes:
        probes.watch(loop.proc.pid)
        times = loop.go(poll=lambda: probes.poll(0))
        probes.poll(50)
        probes.drain()
    recorded = probes.log.count({"launch", "sync"})  # the kernel's sums, read at close
    stats = probes.stats()
    capped_n = stats["over the launch cap"] + stats["over the sync cap"]
    lost = stats["lost (ring buffer full)"]
    return times, f"{recorded:,} events, {capped_n:,} over the cap, {lost:,} lost"


def run_bpftrace(exe, lib, what, calls, rounds, variant):  # type: ignore[no-untyped-def]
    loop = Loop(exe, lib, what, calls, rounds)
    script = bpftrace_script(lib, what, variant)
    bt = subprocess.Popen(
        ["bpftrace", "-p", str(loop.proc.pid), "-e", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert bt.stdout is not None
    for line in bt.stdout:
        if "ATTACHED" in line:
            break
    else:
        raise RuntimeError("bpftrace did not attach")
    times = loop.go()
    if bt.poll() is None:
        bt.send_signal(signal.SIGINT)
    rest = bt.communicate(timeout=60)[0]
    summary = next((ln.strip() for ln in rest.splitlines() if ln.startswith(("@n", "@ns"))), "")
    return times, summary


def plan(exe: Path, lib: str, what: str, calls: int, rounds: int) -> list[tuple[str, object]]:
    """(condition, run) pairs; ``run()`` -> (ns per call of each round, a note)."""
    a = (exe, lib, what, calls, rounds)
    rows = [
        ("none", lambda: run_none(*a)),
        ("aiflame", lambda: run_aiflame(*a, False)),
        ("aiflame, over cap", lambda: run_aiflame(*a, True)),
    ]
    tools = ("count", "ustack") if what == "launch" else ("time", "ustack")
    for variant in tools:
        label = variant if what == "launch" else variant.replace("ustack", "time+ustack")
        rows.append((f"bpftrace {label}", lambda v=variant: run_bpftrace(*a, v)))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=100_000, help="calls per round")
    ap.add_argument("--rounds", type=int, default=5, help="rounds per process (median)")
    ap.add_argument("--reps", type=int, default=3, help="processes per condition")
    args = ap.parse_args()
    if os.geteuid() != 0 or not shutil.which("bpftrace") or not shutil.which("gcc"):
        print("needs root, bpftrace and gcc", file=sys.stderr)
        return 1
    lib = libcudart()
    with tempfile.TemporaryDirectory() as tmp:
        exe = build(Path(tmp))
        plans = {what: plan(exe, lib, what, args.calls, args.rounds) for what in ("launch", "sync")}
        for what, rows in plans.items():
            fn = "cudaLaunchKernel" if what == "launch" else "cudaStreamSynchronize"
            results: dict[str, list[float]] = {name: [] for name, _ in rows}
            notes: dict[str, str] = {}
            for _ in range(args.reps):  # interleaved: slow drifts of the machine hit all
                for name, run in rows:
                    times, note = run()  # type: ignore[operator]
                    results[name].append(statistics.median(times))
                    notes[name] = note
                    time.sleep(0.2)
            base = statistics.median(results["none"])
            print(f"\n{fn}: {args.calls:,} calls x {args.rounds} rounds x {args.reps} processes")
            print(f"{'condition':24} {'ns/call':>9} {'probe cost ns':>14} {'vs bpftrace':>12}")
            ref = statistics.median(
                results["bpftrace count" if what == "launch" else "bpftrace time"]
            )
            for name, _ in rows:
                med = statistics.median(results[name])
                cost = med - base
                ratio = f"{cost / (ref - base):.2f}x" if name != "none" else ""
                print(f"{name:24} {med:9.0f} {cost:14.0f} {ratio:>12}   {notes[name]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
