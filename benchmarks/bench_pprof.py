"""pprof and speedscope conversion of a large folded profile, with ``go tool pprof`` beside it.

    python benchmarks/bench_pprof.py [--repeat 3] [--input bench-data/folded-1M-200k.txt]

Input: bench-data/folded-1M-200k.txt (/work/shared/bench/gen_folded.py: 1M samples over
200k stacks, 3.07M tree nodes). Every command runs as a fresh ``aiflame convert`` process:
folded -> pprof, pprof -> folded (checked equal to folded -> folded), folded -> speedscope,
speedscope -> folded, and pprof -> pprof beside the peer ``go tool pprof -proto`` on the same
file (when ``go`` is installed). Figures: wall-clock median, CPU seconds (user + sys) and
peak RSS of the process. Then one in-process run splits the round trip into its stages.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench-data"
OUT = BENCH / "pprof-bench"


def run(cmd: list[str], stdout: Path | None = None) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds and peak RSS (MiB) of one command."""
    out = open(stdout, "wb") if stdout else subprocess.DEVNULL  # noqa: SIM115
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=out)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if stdout:
        out.close()
    if os.waitstatus_to_exitcode(status):
        sys.exit(f"failed: {' '.join(cmd)}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def measure(cmd: list[str], repeat: int, stdout: Path | None = None) -> tuple[float, float, float]:
    runs = [run(cmd, stdout) for _ in range(repeat)]
    return (
        statistics.median(r[0] for r in runs),
        statistics.median(r[1] for r in runs),
        max(r[2] for r in runs),
    )


def stages(source: Path) -> list[tuple[str, float]]:
    """CPU seconds of each stage of folded -> pprof -> folded, in this process."""
    from aiflame.render.folded import render_folded
    from aiflame.render.pprof import render_pprof
    from aiflame.sources import load

    out = []

    def timed(name, fn):  # type: ignore[no-untyped-def]
        t = time.process_time()
        result = fn()
        out.append((name, time.process_time() - t))
        return result

    profile = timed("load folded", lambda: load(str(source)))
    data = timed("render pprof", lambda: render_pprof(profile))
    path = OUT / "stages.pb.gz"
    path.write_bytes(data)
    again = timed("load pprof", lambda: load(str(path)))
    timed("render folded", lambda: render_folded(again))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--input", type=Path, default=BENCH / "folded-1M-200k.txt")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    aiflame = [sys.executable, "-m", "aiflame", "convert"]
    src = args.input
    pb, ss = OUT / "x.pb.gz", OUT / "x.speedscope.json"
    rows = []

    def row(label: str, cmd: list[str], stdout: Path | None = None) -> tuple[float, float, float]:
        figures = measure(cmd, args.repeat, stdout)
        rows.append((label, *figures))
        print(
            f"{label:42s} wall {figures[0]:6.2f} s  cpu {figures[1]:6.2f} s  {figures[2]:6.0f} MiB"
        )
        return figures

    row(
        "folded -> folded (baseline)",
        [*aiflame, str(src), "-f", "folded", "-o", str(OUT / "direct.folded")],
    )
    row("folded -> pprof", [*aiflame, str(src), "-o", str(pb)])
    row("pprof -> folded", [*aiflame, str(pb), "-f", "folded", "-o", str(OUT / "rt.folded")])
    same = filecmp.cmp(OUT / "direct.folded", OUT / "rt.folded", shallow=False)
    print(f"pprof round trip identical to folded -> folded: {same}")
    row("folded -> speedscope", [*aiflame, str(src), "-o", str(ss)])
    row("speedscope -> folded", [*aiflame, str(ss), "-f", "folded", "-o", str(OUT / "ss.folded")])
    same_ss = filecmp.cmp(OUT / "direct.folded", OUT / "ss.folded", shallow=False)
    print(f"speedscope round trip identical to folded -> folded: {same_ss}")
    ours = row("pprof -> pprof (aiflame)", [*aiflame, str(pb), "-o", str(OUT / "y.pb.gz")])
    go = shutil.which("go")
    if go:
        peer = row(
            "pprof -> pprof (go tool pprof -proto)",
            [go, "tool", "pprof", "-proto", str(pb)],
            OUT / "go.pb.gz",
        )
        print(
            f"aiflame / go tool pprof: wall {ours[0] / peer[0]:.2f}x, cpu {ours[1] / peer[1]:.2f}x"
        )
    mib = {p.name: p.stat().st_size / 2**20 for p in (src, pb, ss)}
    print("sizes (MiB): " + ", ".join(f"{k} {v:.1f}" for k, v in mib.items()))
    for name, seconds in stages(src):
        print(f"  stage {name:16s} cpu {seconds:6.2f} s")


if __name__ == "__main__":
    main()
