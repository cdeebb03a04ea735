"""What recording costs a CPU PyTorch training loop: aiflame record vs py-spy vs torch.profiler.

    python benchmarks/bench_record_overhead.py [--steps 300] [--repeat 5]

The workload (benchmarks/record_workload.py, OMP_NUM_THREADS=1) times its own training loop
after warm-up, so interpreter start and ``import torch`` are not in the figure; the whole
process wall time is reported too. Configurations run interleaved (round-robin, ``repeat``
rounds) so that load from other processes hits them alike; the figure is the median over
rounds of each run's loop time divided by the baseline's in the same round.

* baseline: no profiler
* aiflame cpu: ``aiflame record --gpu off --native-rate 0`` (Python stacks at 99 Hz)
* aiflame default CPU side: ``aiflame record --gpu off`` (plus native stacks at 5 Hz)
* aiflame native N: ``--gpu off --native-rate N``, what native stacks cost per Hz
* py-spy: ``py-spy record -r 99`` (its defaults: Python stacks, pausing the process)
* py-spy native: ``py-spy record -r 99 --native``
* torch.profiler: CPU activity, ``with_stack=True``, around the whole loop
* aiflame gpu window: ``aiflame record`` with its defaults (``--gpu auto``): the PyTorch
  profiler runs for the first 5 s after ``import torch``; its start/stop/export seconds as
  the bootstrap measured them are reported apart.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aiflame.collectors.pyspy import find_pyspy

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / "record_workload.py"


def configs(tmp: str, rate: int) -> dict[str, list[str]]:
    py = sys.executable
    aiflame = [py, "-m", "aiflame", "record", "-r", str(rate), "-o", f"{tmp}/a.pb.gz"]
    pyspy = [find_pyspy(), "record", "-r", str(rate), "-f", "speedscope", "-o", f"{tmp}/p.json"]
    work = [py, str(WORKLOAD)]
    return {
        "baseline": work,
        "aiflame cpu (99 Hz Python)": [*aiflame, "--gpu", "off", "--native-rate", "0", "--", *work],
        "aiflame default CPU side (+5 Hz native)": [*aiflame, "--gpu", "off", "--", *work],
        "aiflame native 20 Hz": [*aiflame, "--gpu", "off", "--native-rate", "20", "--", *work],
        "py-spy record": [*pyspy, "--", *work],
        "py-spy record --native": [*pyspy, "--native", "--", *work],
        "torch.profiler(with_stack=True)": [*work, "--torch-profiler", f"{tmp}/t.json"],
        "aiflame with gpu window (5 s)": [*aiflame, "--", *work],
    }


def run(cmd: list[str], steps: int) -> dict[str, float]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    t0 = time.perf_counter()
    proc = subprocess.run(
        [*cmd, "--steps", str(steps)], capture_output=True, text=True, env=env, timeout=1800
    )
    wall = time.perf_counter() - t0
    if proc.returncode:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    line = next(ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith("{"))
    out = json.loads(line)
    out["wall_s"] = wall
    cost = re.search(r"PyTorch profiler window cost: (.*)", proc.stderr)
    if cost:
        for part in cost.group(1).split(", "):
            name, value, _ = part.split()
            out[f"window_{name}_s"] = float(value)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rate", type=int, default=99)
    ap.add_argument("--only", nargs="*", help="configuration names to run (plus baseline)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = configs(tmp, args.rate)
        if args.only:
            cfg = {k: v for k, v in cfg.items() if k == "baseline" or k in args.only}
        rounds: list[dict[str, dict[str, float]]] = []
        for r in range(args.repeat):
            rounds.append({})
            for name, cmd in cfg.items():
                rounds[-1][name] = res = run(cmd, args.steps)
                print(f"round {r + 1} {name}: {json.dumps(res)}", file=sys.stderr, flush=True)
    report(rounds, args)


def report(rounds: list[dict[str, dict[str, float]]], args: argparse.Namespace) -> None:
    load = os.getloadavg()[0]
    print(f"\n{args.repeat} rounds, {args.steps} steps, {args.rate} Hz, load average {load:.1f}")
    print(
        "| configuration | loop (median) | loop vs baseline | step median vs baseline | "
        "step p10 vs baseline | process wall vs baseline |"
    )
    print("|---|---|---|---|---|---|")

    def ratio(name: str, key: str) -> float:
        return statistics.median(r[name][key] / r["baseline"][key] for r in rounds)

    for name in rounds[0]:
        loop = statistics.median(r[name]["loop_s"] for r in rounds)
        print(
            f"| {name} | {loop:.2f} s | {ratio(name, 'loop_s'):.3f} | "
            f"{ratio(name, 'step_median_s'):.3f} | {ratio(name, 'step_p10_s'):.3f} | "
            f"{ratio(name, 'wall_s'):.3f} |"
        )
    window = [r[n] for r in rounds for n in r if "window_start_s" in r[n]]
    if window:
        parts = [
            f"{k[7:-2]} {statistics.median(w[k] for w in window):.2f} s"
            for k in ("window_start_s", "window_stop_s", "window_export_s")
            if k in window[0]
        ]
        print(f"\nPyTorch profiler window (median of {len(window)}): " + ", ".join(parts))
    exports = [r["torch.profiler(with_stack=True)"].get("export_s") for r in rounds]
    if exports and exports[0] is not None:
        print(f"torch.profiler trace export (median): {statistics.median(exports):.2f} s")


if __name__ == "__main__":
    main()
