"""Load time of the Nsight Systems importer: the real export, and scaled copies of it.

    python benchmarks/nsys_load.py [--gpu-scale 5000] [--cpu-scale 100]

The scaled export (in bench-data/, git-ignored, built once) repeats the real saxpy export's
GPU activities and CUDA API calls ``--gpu-scale`` times and its CPU samples ``--cpu-scale``
times, shifted in time and with fresh correlation / callchain / sample ids, so that every
copy links like the original. Each load runs in a fresh process (best of 3); peak memory is
that process's maximum RSS. There is no peer tool that reads these exports into a flame
graph, so the figures are absolute.
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
t0 = time.perf_counter()
from aiflame.sources import load
p = load(sys.argv[1])
t1 = time.perf_counter()
print(t1 - t0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, len(p))
"""


def measure(path: Path, runs: int = 3) -> tuple[float, float, int]:
    """(best seconds, MiB peak RSS of that run, samples) loading ``path`` in a new process."""
    best = None
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, str(path)], check=True, capture_output=True, text=True
        ).stdout.split()
        secs, rss_kib, n = float(out[0]), int(out[1]), int(out[2])
        if best is None or secs < best[0]:
            best = (secs, rss_kib / 1024, n)
    assert best is not None
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--gpu-scale", type=int, default=5000)
    ap.add_argument("--cpu-scale", type=int, default=100)
    args = ap.parse_args()
    t = time.perf_counter()
    scaled = build_scaled(args.gpu_scale, args.cpu_scale)
    print(f"scaled export: {scaled} (ready in {time.perf_counter() - t:.1f} s)")
    for path in (EXPORT, scaled):
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        gpu = sum(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in GPU)
        api = conn.execute(f"SELECT count(*) FROM {RUNTIME}").fetchone()[0]
        samples = conn.execute("SELECT count(*) FROM COMPOSITE_EVENTS").fetchone()[0]
        frames = conn.execute("SELECT count(*) FROM SAMPLING_CALLCHAINS").fetchone()[0]
        conn.close()
        secs, rss, n = measure(path)
        size = path.stat().st_size / 2**20
        print(
            f"{path.name}: {size:.1f} MiB, {gpu:,} GPU activities, {api:,} API rows, "
            f"{samples:,} CPU samples ({frames:,} frames) -> load {secs:.3f} s "
            f"(incl. imports), peak RSS {rss:.0f} MiB, {n:,} samples"
        )


if __name__ == "__main__":
    main()
