"""What recording costs a CPU PyTorch training loop: aiflame record vs py-spy vs torch.profiler.

    python benchmarks/bench_record_overhead.py [--cycles 6] [--interval 10]

The machine this was written on is shared (2 cores, load average 5-9 from other sessions),
so whole-run wall times of separate runs differ by 2-4x from one run to the next and cannot
resolve a few percent. The benchmark therefore compares neighbours in time, in one process:

* one training process (benchmarks/record_workload.py --serve, OMP_NUM_THREADS=1) logs every
  step's end time and duration;
* the samplers attach to it in turn for ``interval`` seconds each (``--pid PID -d
  interval``), round-robin, with an interval of no profiler at the start of every cycle:
  off, aiflame (99 Hz Python only), aiflame with its default 5 Hz native stacks, aiflame
  with 20 Hz native stacks, ``py-spy record -r 99`` (its default: Python stacks, pausing the
  process), ``py-spy record -r 99 --native``;
* each interval's figure is the mean step time of the steps that end inside it, leaving out
  its first ``lead`` seconds (attaching; a native sampler's first sample also loads the
  symbols of every library) and what follows the sampling (writing the profile); its
  overhead is that mean over the mean of the two neighbouring "off" intervals, minus one;
  the table gives the median over cycles and the spread (min..max).

``torch.profiler(with_stack=True)`` cannot attach from outside, so the workload alternates
it itself (``--torch-alternate``): intervals with and without the profiler, and its start,
stop and export times. ``aiflame record`` with its PyTorch window (the default ``--gpu
auto``) runs that same profiler for ``--gpu-window`` seconds: its cost is the in-window
slowdown plus the one-off start/stop/export seconds, which one launched run reports.
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
        "aiflame record, 99 Hz Python only (--native-rate 0)": [*rec, "--native-rate", "0"],
        "aiflame record, default (99 Hz Python + 5 Hz native)": rec,
        "aiflame record, 99 Hz Python + 20 Hz native": [*rec, "--native-rate", "20"],
        "py-spy record -r 99": spy,
        "py-spy record -r 99 --native": [*spy, "--native"],
    }


def attach_cycles(args: argparse.Namespace, tmp: str) -> tuple[dict, list]:
    log = f"{tmp}/steps.json"
    target = subprocess.Popen(
        [sys.executable, str(WORKLOAD), "--serve", log], stdout=subprocess.PIPE, text=True, env=ENV
    )
    assert target.stdout is not None and target.stdout.readline().strip() == "ready"
    time.sleep(2)
    intervals = []  # (cycle, name, start, end of the measured part)
    cfg = samplers(target.pid, args.interval, tmp, args.rate)
    for cycle in range(args.cycles):
        for name, cmd in cfg.items():
            t0 = time.monotonic()
            if cmd is None:
                time.sleep(args.interval)
            else:
                subprocess.run(cmd, check=True, capture_output=True, timeout=600)
            intervals.append((cycle, name, t0, t0 + args.lead, t0 + args.interval - 0.5))
            print(f"cycle {cycle + 1}: {name}", file=sys.stderr, flush=True)
    t0 = time.monotonic()
    time.sleep(args.interval)  # a closing "off" interval for the last cycle
    intervals.append((args.cycles, "off", t0, t0 + args.lead, t0 + args.interval - 0.5))
    target.send_signal(signal.SIGINT)
    target.wait(timeout=60)
    steps = json.loads(Path(log).read_text())
    return steps, intervals


def interval_means(steps: dict, intervals: list) -> list[tuple[int, str, float, float]]:
    """(cycle, name, mean step time after the lead, longest step of the whole interval)."""
    out = []
    pairs = list(zip(steps["end"], steps["duration"], strict=True))
    for cycle, name, start, lo, hi in intervals:
        inside = [d for e, d in pairs if lo <= e <= hi]
        longest = max((d for e, d in pairs if start <= e <= hi), default=float("nan"))
        out.append((cycle, name, statistics.fmean(inside) if inside else float("nan"), longest))
    return out


def overheads(means: list[tuple[int, str, float, float]]) -> dict[str, list[float]]:
    off = {c: m for c, n, m, _ in means if n == "off"}
    out: dict[str, list[float]] = {}
    for cycle, name, mean, _ in means:
        if name == "off":
            continue
        ref = statistics.fmean([off[cycle], off[cycle + 1]])
        out.setdefault(name, []).append(mean / ref - 1)
    return out


def torch_alternate(args: argparse.Namespace, tmp: str) -> dict[str, list[float]]:
    out = f"{tmp}/torch.json"
    cmd = [sys.executable, str(WORKLOAD), "--torch-alternate", out, "--cycles", str(args.cycles)]
    subprocess.run(
        [*cmd, "--interval", str(args.interval / 2)],
        check=True,
        env=ENV,
        timeout=1800,
    )
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cycles", type=int, default=6)
    ap.add_argument("--interval", type=int, default=10, help="seconds per sampler interval")
    ap.add_argument("--lead", type=float, default=3.0, help="seconds left out after attaching")
    ap.add_argument("--rate", type=int, default=99)
    ap.add_argument("--window", type=float, default=5.0, help="aiflame's --gpu-window")
    args = ap.parse_args()
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        steps, intervals = attach_cycles(args, tmp)
        means = interval_means(steps, intervals)
        torch_res = torch_alternate(args, tmp)
        window = window_cost(args, tmp)
    load1 = os.getloadavg()[0]
    base = statistics.median(m for _, n, m, _ in means if n == "off")
    print(
        f"\n{args.cycles} cycles of {args.interval} s intervals ({args.lead:g} s lead left out), "
        f"{args.rate} Hz; median step without profiler {base * 1000:.1f} ms; "
        f"load average {load0:.1f} -> {load1:.1f}\n"
    )
    print("| configuration | overhead (median) | spread over cycles | longest step (median) |")
    print("|---|---|---|---|")
    for name, values in overheads(means).items():
        longest = statistics.median(lg for _, n, _, lg in means if n == name)
        print(
            f"| {name} | {pct(statistics.median(values))} | {pct(min(values))} .. "
            f"{pct(max(values))} | {longest * 1000:.0f} ms |"
        )
    longest_off = statistics.median(lg for _, n, _, lg in means if n == "off")
    print(f"| off | | | {longest_off * 1000:.0f} ms |")
    ratios = [on / off - 1 for on, off in zip(torch_res["on"], torch_res["off"], strict=True)]
    print(
        f"| torch.profiler(with_stack=True), CPU activity | {pct(statistics.median(ratios))} | "
        f"{pct(min(ratios))} .. {pct(max(ratios))} |"
    )
    med = {k: statistics.median(torch_res[k]) for k in ("start", "stop", "export")}
    print(
        f"\ntorch.profiler one-off costs in the loop process (median): start {med['start']:.2f} s,"
        f" stop {med['stop']:.2f} s, export {med['export']:.2f} s of a "
        f"{args.interval / 2:g} s window"
    )
    if window:
        print(
            "aiflame record PyTorch window (--gpu-window "
            f"{args.window:g}, first window of a launched program): "
            + ", ".join(f"{k} {v:.2f} s" for k, v in window.items())
        )


if __name__ == "__main__":
    main()
