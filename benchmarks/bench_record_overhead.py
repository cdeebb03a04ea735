"""What recording costs a CPU PyTorch training loop: aiflame record vs py-spy vs torch.profiler.

    python benchmarks/bench_record_overhead.py [--cycles 5] [--interval 24] [--lead 8]

The machine this was written on is shared (2 cores, load average 5-9 from other workloads):
separate runs differ 2-4x in wall time, and even neighbouring seconds of one run differ by
tens of percent, so wall time alone cannot resolve a few percent. The benchmark therefore
splits a profiler's cost into parts that other processes' load does not disturb, measured on
one training process (benchmarks/record_workload.py --serve, OMP_NUM_THREADS=1) that logs,
for every step, its wall time and its thread's cumulative on-CPU time and run delay
(``/proc/<pid>/task/<tid>/schedstat``):

* **paused**: wall time that is neither on a CPU nor waiting for one. The loop never blocks,
  so this is the time a sampler kept it stopped (ptrace). Load from other processes is run
  delay instead, and not counted.
* **CPU per step**: the thread's own on-CPU time per training step, against the
  neighbouring intervals without a profiler (what an in-process profiler adds, and the cache
  and memory traffic a sampler costs).
* **overhead on a machine with a free core** = (1 + CPU per step) / (1 - paused) - 1; the
  sampler itself then runs on the free core: its CPU use is given as **sampler CPU** (cores;
  for aiflame it includes its own start and writing the profile).
* **wall per step** against the neighbouring "off" intervals, for completeness: on this
  machine it is dominated by the other workloads' load.

The samplers attach in turn for ``interval`` seconds each (``--pid PID -d interval``),
round-robin after an interval with no profiler: aiflame with Python stacks only, aiflame
with native stacks at 5 Hz and at 20 Hz besides (its default is 2 Hz), ``py-spy record -r
99`` (its default: Python stacks, pausing the process at each sample) and ``py-spy record -r
99 --native``. The first ``lead`` seconds of an interval are left out (attaching; a native
sampler's first sample also loads every library's symbols, reported apart as the longest
step).

``torch.profiler(with_stack=True)`` cannot attach from outside: the workload alternates it
itself (``--torch-alternate``): intervals with and without it, the thread's CPU time per
step, and its start, stop and export times. ``aiflame record``'s PyTorch window (``--gpu
auto``, the default) is that profiler for ``--gpu-window`` seconds: its cost is the in-window
slowdown plus the one-off seconds, which one launched run reports.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from aiflame.collectors.pyspy import find_pyspy

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / "record_workload.py"
ENV = dict(os.environ, OMP_NUM_THREADS="1")


def samplers(pid: int, seconds: int, tmp: str, rate: int) -> dict[str, list[str] | None]:
    rec = [sys.executable, "-m", "aiflame", "record", "--pid", str(pid), "-d", str(seconds)]
    rec += ["-r", str(rate), "-o", f"{tmp}/a.pb.gz"]
    spy = [find_pyspy(), "record", "--pid", str(pid), "-d", str(seconds), "-r", str(rate)]
    spy += ["-f", "speedscope", "-o", f"{tmp}/p.json"]
    return {
        "off": None,
        # As root record samples with eBPF: native and kernel stacks, and the Python frames
        # walked by the BPF program itself; --py-spy keeps py-spy for the Python stacks
        # (the previous default); --no-ebpf is the py-spy-only path of other users.
        "aiflame record, root default (eBPF 99 Hz, Python walked in the kernel)": rec,
        "aiflame record --py-spy (eBPF 99 Hz + py-spy Python 99 Hz)": [*rec, "--py-spy"],
        "aiflame record --no-ebpf, 99 Hz Python only": [*rec, "--no-ebpf", "--native-rate", "0"],
        "aiflame record --no-ebpf, 99 Hz Python + 5 Hz native": [
            *rec,
            "--no-ebpf",
            "--native-rate",
            "5",
        ],
        "py-spy record -r 99 (pauses the program)": spy,
        "py-spy record -r 99 --native": [*spy, "--native"],
    }


@dataclass
class Interval:
    cycle: int
    name: str
    start: float
    lo: float  # the measured part
    hi: float
    sampler_cpu_s: float = 0.0
    # filled from the step log
    wall_per_step: float = float("nan")
    cpu_per_step: float = float("nan")
    paused: float = float("nan")
    longest: float = float("nan")


def run_sampler(cmd: list[str]) -> float:
    """CPU seconds (user + sys) of the command and everything it started."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status):
        sys.exit(f"failed: {' '.join(cmd)}\n{proc.stderr.read().decode()[-2000:]}")
    return usage.ru_utime + usage.ru_stime


def attach_cycles(args: argparse.Namespace, tmp: str) -> list[Interval]:
    log = f"{tmp}/steps.json"
    target = subprocess.Popen(
        [sys.executable, str(WORKLOAD), "--serve", log], stdout=subprocess.PIPE, text=True, env=ENV
    )
    assert target.stdout is not None and target.stdout.readline().strip() == "ready"
    time.sleep(2)
    intervals = []
    cfg = samplers(target.pid, args.interval, tmp, args.rate)
    if args.only:  # "off" and the configurations whose name holds one of the words
        cfg = {n: c for n, c in cfg.items() if n == "off" or any(w in n for w in args.only)}
    plan = [(c, n) for c in range(args.cycles) for n in cfg] + [(args.cycles, "off")]
    for cycle, name in plan:
        t0 = time.monotonic()
        iv = Interval(cycle, name, t0, t0 + args.lead, t0 + args.interval - 0.5)
        if cfg[name] is None:
            time.sleep(args.interval)
        else:
            iv.sampler_cpu_s = run_sampler(cfg[name])  # type: ignore[arg-type]
        intervals.append(iv)
        print(f"cycle {cycle + 1}: {name}", file=sys.stderr, flush=True)
    args.kernel = kernel_cost(target.pid, args.interval)
    target.send_signal(signal.SIGINT)
    target.wait(timeout=120)
    rows = json.loads(Path(log).read_text())
    for iv in intervals:
        measure(iv, rows)
    return intervals


def kernel_cost(pid: int, seconds: float) -> dict[str, float]:
    """The eBPF sampler on the training process for ``seconds``, with the kernel timing its
    program (BPF_ENABLE_STATS): the program's run time per sample and per second, and the
    CPU time of the user-space side (reading new stacks' code objects) meanwhile."""
    from bench_ebpf_overhead import enable_bpf_stats, perf_prog_stats

    from aiflame.collectors.ebpf.sampler import CpuSampler, SamplerOptions

    stats_fd = enable_bpf_stats()
    if stats_fd is None:
        return {}
    sampler = CpuSampler(SamplerOptions(freq=99, pids=[pid]))
    try:
        sampler.start()
        sampler.add_target(pid)
        cpu0, t0 = time.process_time(), time.monotonic()
        while time.monotonic() - t0 < seconds:
            sampler.poll(100)
        ns, runs = perf_prog_stats(os.getpid())
        user_cpu = time.process_time() - cpu0
        raw = sampler.stop()
    finally:
        sampler.close()
        os.close(stats_fd)
    target = sum(n for k, n in raw.counts if k.pid == pid)
    return {
        "runs": runs,
        "target_samples": target,
        "python_samples": raw.stats["python_stacks"],
        "ns_per_run": ns / max(runs, 1),
        "cpu_share": ns / 1e9 / seconds,
        "user_cpu_share": user_cpu / seconds,
    }


def measure(iv: Interval, rows: list[list[float]]) -> None:
    inside = [r for r in rows if iv.lo <= r[0] <= iv.hi]
    if len(inside) < 3:
        return
    first, last = inside[0], inside[-1]
    steps = len(inside) - 1
    wall = last[0] - first[0]
    cpu = (last[2] - first[2]) / 1e9
    delay = (last[3] - first[3]) / 1e9
    iv.wall_per_step = wall / steps
    iv.cpu_per_step = cpu / steps
    iv.paused = max(0.0, wall - cpu - delay) / wall
    iv.longest = max(r[1] for r in rows if iv.start <= r[0] <= iv.hi)


def relative(intervals: list[Interval], attr: str) -> dict[str, list[float]]:
    """Each interval's ``attr`` over the mean of the "off" intervals around it, minus one."""
    off = {iv.cycle: getattr(iv, attr) for iv in intervals if iv.name == "off"}
    out: dict[str, list[float]] = {}
    for iv in intervals:
        if iv.name != "off":
            ref = statistics.fmean([off[iv.cycle], off[iv.cycle + 1]])
            out.setdefault(iv.name, []).append(getattr(iv, attr) / ref - 1)
    return out


def torch_alternate(args: argparse.Namespace, tmp: str) -> dict[str, list[float]]:
    out = f"{tmp}/torch.json"
    cmd = [sys.executable, str(WORKLOAD), "--torch-alternate", out, "--cycles", str(args.cycles)]
    subprocess.run([*cmd, "--interval", str(args.interval / 2)], check=True, env=ENV, timeout=1800)
    return json.loads(Path(out).read_text())


def window_cost(args: argparse.Namespace, tmp: str) -> dict[str, float]:
    """One launched ``aiflame record`` with its default PyTorch window."""
    cmd = [sys.executable, "-m", "aiflame", "record", "--gpu-window", str(args.window)]
    cmd += ["-o", f"{tmp}/w.pb.gz", "--", sys.executable, str(WORKLOAD), "--serve", f"{tmp}/w"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    time.sleep(args.window + 5)
    child = next(
        int(p)
        for p in os.listdir("/proc")
        if p.isdigit() and _parent(int(p)) == proc.pid and "record_workload" in _cmdline(int(p))
    )
    os.kill(child, signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    m = re.search(r"PyTorch profiler window cost: (.*)", err)
    if not m:
        return {}
    return {p.split()[0]: float(p.split()[1]) for p in m.group(1).split(", ")}


def _parent(pid: int) -> int:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return -1
    return int(text[text.rfind(")") + 2 :].split()[1])


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text(errors="replace")
    except OSError:
        return ""


def pct(x: float) -> str:
    return f"{x * 100:+.1f}%"


def med_range(xs: list[float]) -> str:
    return f"{pct(statistics.median(xs))} ({pct(min(xs))} .. {pct(max(xs))})"


def report(
    args: argparse.Namespace, intervals: list[Interval], torch_res: dict, window: dict | None
):
    off = [iv for iv in intervals if iv.name == "off"]
    cpu_ms = statistics.median(iv.cpu_per_step for iv in off) * 1000
    wall_ms = statistics.median(iv.wall_per_step for iv in off) * 1000
    print(
        f"\n{args.cycles} cycles of {args.interval} s intervals ({args.lead:g} s lead left out), "
        f"{args.rate} Hz; without a profiler a step is {cpu_ms:.1f} ms on the CPU, "
        f"{wall_ms:.1f} ms of wall time; paused {pct(statistics.median(iv.paused for iv in off))}\n"
    )
    print(
        "| configuration | overhead with a free core | paused | CPU per step | sampler CPU | "
        "wall per step (loaded machine) | longest step |"
    )
    print("|---|---|---|---|---|---|---|")
    cpu_rel = relative(intervals, "cpu_per_step")
    wall_rel = relative(intervals, "wall_per_step")
    for name in cpu_rel:
        ivs = [iv for iv in intervals if iv.name == name]
        paused = [iv.paused for iv in ivs]
        est = [(1 + c) / (1 - p) - 1 for c, p in zip(cpu_rel[name], paused, strict=True)]
        cores = statistics.median(iv.sampler_cpu_s / args.interval for iv in ivs)
        longest = statistics.median(iv.longest for iv in ivs)
        print(
            f"| {name} | {med_range(est)} | {pct(statistics.median(paused))} | "
            f"{med_range(cpu_rel[name])} | {cores:.2f} cores | {med_range(wall_rel[name])} | "
            f"{longest * 1000:.0f} ms |"
        )
    if getattr(args, "kernel", None):
        k = args.kernel
        print(
            f"\neBPF sampler on the training process for {args.interval} s (BPF_ENABLE_STATS): "
            f"{k['runs']:.0f} program runs ({k['target_samples']:.0f} samples of the process, "
            f"{k['python_samples']:.0f} with a Python stack walked), "
            f"{k['ns_per_run'] / 1000:.1f} us per run = {k['cpu_share'] * 100:.3f}% of one CPU; "
            f"user-space side (naming new stacks' code objects) {k['user_cpu_share'] * 100:.2f}%"
        )
    if torch_res:
        torch_rows(args, torch_res)
    if window:
        print(
            f"aiflame record's PyTorch window (--gpu-window {args.window:g}, launched program): "
            + ", ".join(f"{k} {v:.2f} s" for k, v in window.items())
        )
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


def torch_rows(args: argparse.Namespace, torch_res: dict) -> None:
    cpu = [on / off - 1 for on, off in zip(torch_res["on_cpu"], torch_res["off_cpu"], strict=True)]
    wall = [on / off - 1 for on, off in zip(torch_res["on"], torch_res["off"], strict=True)]
    print(
        f"| torch.profiler(with_stack=True), CPU activity, in-process | {med_range(cpu)} | - | "
        f"{med_range(cpu)} | - | {med_range(wall)} | - |"
    )
    med = {k: statistics.median(torch_res[k]) for k in ("start", "stop", "export")}
    print(
        f"\ntorch.profiler one-off costs (median over cycles): start {med['start']:.2f} s, "
        f"stop {med['stop']:.2f} s, export {med['export']:.2f} s for {args.interval / 2:g} s"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cycles", type=int, default=5)
    ap.add_argument("--interval", type=int, default=24, help="seconds per sampler interval")
    ap.add_argument("--lead", type=float, default=8.0, help="seconds left out after attaching")
    ap.add_argument("--rate", type=int, default=99)
    ap.add_argument("--window", type=float, default=5.0, help="aiflame's --gpu-window")
    ap.add_argument("--only", nargs="+", metavar="WORD", help="samplers whose name holds WORD")
    ap.add_argument("--no-torch", action="store_true", help="skip the torch.profiler parts")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        intervals = attach_cycles(args, tmp)
        torch_res = {} if args.no_torch else torch_alternate(args, tmp)
        window = None if args.no_torch else window_cost(args, tmp)
    report(args, intervals, torch_res, window)


if __name__ == "__main__":
    main()
