"""Load time of the Nsight Systems importer: the real export, and scaled copies of it.

    python benchmarks/nsys_load.py [--scales 500x10,5000x100] [--runs 3]

A scaled export GxC (in bench-data/, git-ignored, built once) repeats the real saxpy
export's GPU activities and CUDA API calls G times and its CPU samples C times, shifted in
time and with fresh correlation / callchain / sample ids, so that every copy links like the
original. Each load runs in a fresh process (best of --runs); peak memory is that process's
maximum RSS. CPU time is given besides wall time because the benchmark machine is shared.
There is no peer tool that reads these exports into a flame graph, so the figures are
absolute.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXPORT = ROOT / "tests" / "data" / "nsys" / "saxpy-mpi-cuda_nsys_perlmutter0.sqlite"
BENCH = ROOT / "bench-data"

GPU = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]


def _replicate(conn: sqlite3.Connection, table: str, times: int, shifts: dict[str, str]) -> None:
    """Insert ``times - 1`` shifted copies of ``table``'s rows (copy k: col + k * step)."""
    cols = _columns(conn, table)
    conn.execute("CREATE TEMP TABLE IF NOT EXISTS k (k INTEGER PRIMARY KEY)")
    conn.execute("DELETE FROM k")
    conn.executemany("INSERT INTO k VALUES (?)", ((i,) for i in range(1, times)))
    exprs = [f'"{c}" + k.k * ({shifts[c]})' if c in shifts else f'"{c}"' for c in cols]
    quoted = ", ".join(f'"{c}"' for c in cols)
    conn.execute(
        f'INSERT INTO "{table}" ({quoted}) SELECT {", ".join(exprs)} FROM "{table}", k '
        f'WHERE k.k > 0 AND "{table}".rowid <= (SELECT max(rowid) FROM "{table}")'
    )


def build_scaled(gpu_scale: int, cpu_scale: int) -> Path:
    out = BENCH / f"nsys-saxpy-gpu{gpu_scale}-cpu{cpu_scale}.sqlite"
    if out.exists():
        return out
    BENCH.mkdir(exist_ok=True)
    tmp = out.with_suffix(".partial")
    shutil.copyfile(EXPORT, tmp)
    conn = sqlite3.connect(tmp)
    span = conn.execute('SELECT max("end") FROM CUPTI_ACTIVITY_KIND_RUNTIME').fetchone()[0] + 1
    corr = conn.execute(f"SELECT max(correlationId) FROM {RUNTIME}").fetchone()[0] + 1
    chain = conn.execute("SELECT max(id) FROM CUDA_CALLCHAINS").fetchone()[0] + 1
    sample = conn.execute("SELECT max(id) FROM COMPOSITE_EVENTS").fetchone()[0] + 1
    time_shift = {"start": str(span), "end": str(span)}
    for table in GPU:
        _replicate(conn, table, gpu_scale, {**time_shift, "correlationId": str(corr)})
    _replicate(
        conn,
        RUNTIME,
        gpu_scale,
        {**time_shift, "correlationId": str(corr), "callchainId": str(chain)},
    )
    _replicate(conn, "CUDA_CALLCHAINS", gpu_scale, {"id": str(chain)})
    _replicate(conn, "NVTX_EVENTS", max(gpu_scale, cpu_scale), time_shift)
    _replicate(conn, "COMPOSITE_EVENTS", cpu_scale, {"id": str(sample), "start": str(span)})
    _replicate(conn, "SAMPLING_CALLCHAINS", cpu_scale, {"id": str(sample)})
    conn.commit()
    conn.close()
    tmp.rename(out)
    return out


_CHILD = """
import resource, sys, time
from aiflame.sources import load
t0, c0 = time.perf_counter(), time.process_time()
p = load(sys.argv[1])
t1, c1 = time.perf_counter(), time.process_time()
print(t1 - t0, c1 - c0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, len(p))
"""


def measure(path: Path, runs: int) -> tuple[float, float, float, int]:
    """(best wall s, its CPU s, MiB peak RSS, samples) loading ``path`` in a new process
    (the imports of aiflame and numpy are not counted)."""
    best = None
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, str(path)], check=True, capture_output=True, text=True
        ).stdout.split()
        wall, cpu, rss_kib, n = float(out[0]), float(out[1]), int(out[2]), int(out[3])
        if best is None or wall < best[0]:
            best = (wall, cpu, rss_kib / 1024, n)
    assert best is not None
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--scales", default="500x10,5000x100", help="GxC,GxC,...")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    paths = [EXPORT]
    for scale in args.scales.split(","):
        g, c = (int(x) for x in scale.split("x"))
        t = time.perf_counter()
        paths.append(build_scaled(g, c))
        print(f"scaled export {paths[-1].name} ready in {time.perf_counter() - t:.1f} s")
    for path in paths:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        gpu = sum(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in GPU)
        api = conn.execute(f"SELECT count(*) FROM {RUNTIME}").fetchone()[0]
        samples = conn.execute("SELECT count(*) FROM COMPOSITE_EVENTS").fetchone()[0]
        frames = conn.execute("SELECT count(*) FROM SAMPLING_CALLCHAINS").fetchone()[0]
        conn.close()
        wall, cpu, rss, n = measure(path, args.runs)
        size = path.stat().st_size / 2**20
        print(
            f"{path.name}: {size:.1f} MiB, {gpu:,} GPU activities, {api:,} API rows, "
            f"{samples:,} CPU samples ({frames:,} frames) -> load {wall:.3f} s wall, "
            f"{cpu:.3f} s CPU, peak RSS {rss:.0f} MiB, {n:,} samples"
        )


if __name__ == "__main__":
    main()
