"""10 million GPU PC samples: import + render against the floor of reading them.

    python benchmarks/bench_gpu_samples.py [--rows 10000000] [--repeat 2]

The input is rocprofv3's real stochastic PC-sampling CSV (MI300, 97 samples, one row per
sample) repeated to ``--rows`` rows, each copy with new timestamp offsets (the copy's index
times the recording's span), written once to bench-data/gpu/ (git-ignored). Measured in
fresh processes, alternating, medians of wall time and the peak RSS of the process:

* aiflame: ``aiflame flamegraph BIG.csv -o out.html`` (detect, import, aggregate, render);
* the floor, twice: the same rows read into numpy arrays, one per column (integers as
  int64/uint64, strings as interned codes), with Python's csv module streaming into
  arrays, and with pandas ``read_csv`` (its C parser; numpy columns) - the least a reader
  must do to hold the samples (``ncu --import`` cannot run here, hence this floor). The
  ratio that counts is against the faster of the two.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "tests" / "data" / "gpu_instructions" / "rocprofiler_sdk"
REAL = REAL / "pc_sampling_stochastic_debug.csv"
BENCH = ROOT / "bench-data" / "gpu"

FLOOR = r"""
import csv, sys
from array import array
import numpy as np
csv.field_size_limit(1 << 20)
INTS = ("Sample_Timestamp", "Dispatch_Id", "Correlation_Id", "Wave_Count",
        "Wave_Issued_Instruction")
with open(sys.argv[1], newline="") as f:
    r = csv.reader(f)
    header = next(r)
    cols = [array("Q" if n == "Exec_Mask" else "q") for n in header]
    tables = [None if n in INTS or n == "Exec_Mask" else {} for n in header]
    for row in r:
        for col, table, v in zip(cols, tables, row):
            col.append(int(v) if table is None else table.setdefault(v, len(table)))
arrays = [np.frombuffer(c, dtype=np.uint64 if c.typecode == "Q" else np.int64) for c in cols]
print(len(arrays[0]))
"""

PANDAS = r"""
import sys
import pandas as pd
df = pd.read_csv(sys.argv[1])
arrays = [df[c].to_numpy() for c in df.columns]
print(len(arrays[0]))
"""


def big_csv(rows: int) -> Path:
    out = BENCH / f"pc_sampling_stochastic_{rows}.csv"
    if out.exists():
        return out
    BENCH.mkdir(parents=True, exist_ok=True)
    with open(REAL, newline="") as f:
        reader = csv.reader(f)
        header = next(reader)
        real = list(reader)
    ts = header.index("Sample_Timestamp")
    stamps = [int(r[ts]) for r in real]
    span = max(stamps) - min(stamps) + 1
    tmp = out.with_suffix(".partial")
    with open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        done = copy = 0
        while done < rows:
            shift = copy * span
            for r in real[: rows - done]:
                r2 = list(r)
                r2[ts] = str(int(r[ts]) + shift)
                w.writerow(r2)
            done += min(len(real), rows - done)
            copy += 1
    os.replace(tmp, out)
    return out


def run(cmd: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one command, polled from /proc every 20 ms."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        peak = 0
        while proc.poll() is None:
            try:
                with open(f"/proc/{proc.pid}/status") as f:
                    for line in f:
                        if line.startswith("VmHWM:"):
                            peak = max(peak, int(line.split()[1]))
            except OSError:
                pass
            time.sleep(0.02)
        wall = time.perf_counter() - t0
        if proc.returncode:
            err.seek(0)
            sys.exit(f"failed: {' '.join(cmd)}\n{err.read().decode(errors='replace')[-2000:]}")
    return wall, peak / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    path = big_csv(args.rows)
    out = BENCH / "pc_sampling.html"
    env_py = [sys.executable]
    commands = {
        "aiflame flamegraph": [*env_py, "-m", "aiflame", "flamegraph", str(path), "-o", str(out)],
        "floor: csv -> numpy": [*env_py, "-c", FLOOR, str(path)],
    }
    try:
        import pandas  # noqa: F401

        commands["floor: pandas -> numpy"] = [*env_py, "-c", PANDAS, str(path)]
    except ImportError:
        pass
    runs: dict[str, list[tuple[float, float]]] = {k: [] for k in commands}
    for _ in range(args.repeat):
        for name, cmd in commands.items():
            runs[name].append(run(cmd))
    size = path.stat().st_size / 2**20
    print(f"{args.rows:,} PC samples, {size:,.0f} MiB of CSV; medians of {args.repeat} runs")
    floors = [k for k in runs if k != "aiflame flamegraph"]
    floor = min(statistics.median(w for w, _ in runs[k]) for k in floors)
    floor_mem = min(max(m for _, m in runs[k]) for k in floors)
    for name, r in runs.items():
        wall = statistics.median(w for w, _ in r)
        mem = max(m for _, m in r)
        print(
            f"  {name:22s} {wall:7.1f} s  {mem:8,.0f} MiB peak  "
            f"({wall / floor:.2f}x the fastest floor, {mem / floor_mem:.2f}x its memory)"
        )


if __name__ == "__main__":
    main()
