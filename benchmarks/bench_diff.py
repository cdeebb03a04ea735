"""``aiflame diff`` against FlameGraph's ``difffolded.pl | flamegraph.pl`` on the same inputs.

    python benchmarks/bench_diff.py --flamegraph /tmp/FlameGraph [--repeat 3]

Inputs: bench-data/folded-1M-200k.txt and folded-1M-200k-b.txt (made by
/work/shared/bench/gen_folded.py, the second with ``--variant 1``). Every command runs in a
fresh process, side by side with the peer; times are wall-clock medians, memory the peak RSS
of the process tree. Then one in-process run splits aiflame's time into its stages, and the
two folded outputs are compared line for line (difffolded.pl prints in hash order, so its
lines are sorted first).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench-data"
BASE = BENCH / "folded-1M-200k.txt"
TEST = BENCH / "folded-1M-200k-b.txt"
OUT = BENCH / "diff-bench"


def run(cmd: str) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of a shell command and everything it starts."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(["bash", "-o", "pipefail", "-c", cmd])
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        sys.exit(f"failed ({proc.returncode}): {cmd}")
    return wall, usage.ru_maxrss / 1024


def measure(cmd: str, repeat: int) -> tuple[float, float]:
    runs = [run(cmd) for _ in range(repeat)]
    return statistics.median(r[0] for r in runs), max(r[1] for r in runs)


def stages() -> list[tuple[str, float]]:
    """aiflame's time per stage, in this process."""
    from aiflame.render.folded import render_diff_folded
    from aiflame.render.html import render_html
    from aiflame.sources import load
    from aiflame.transforms.diff import diff_profiles

    out = []
    t = time.perf_counter()
    base = load(str(BASE))
    out.append(("load base", time.perf_counter() - t))
    t = time.perf_counter()
    test = load(str(TEST))
    out.append(("load test", time.perf_counter() - t))
    t = time.perf_counter()
    diff = diff_profiles(base, test)
    out.append(("diff_profiles", time.perf_counter() - t))
    t = time.perf_counter()
    render_diff_folded(diff)
    out.append(("render_diff_folded", time.perf_counter() - t))
    t = time.perf_counter()
    render_html(diff)
    out.append(("render_html", time.perf_counter() - t))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--flamegraph", required=True, help="a FlameGraph checkout (difffolded.pl)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    fg = Path(args.flamegraph)
    for f in (BASE, TEST, fg / "difffolded.pl", fg / "flamegraph.pl"):
        if not f.exists():
            sys.exit(f"missing {f}")
    OUT.mkdir(parents=True, exist_ok=True)
    aiflame = f"{sys.executable} -m aiflame diff {BASE} {TEST}"
    peer = f"perl {fg / 'difffolded.pl'} {BASE} {TEST}"
    rows = [
        (
            "to folded",
            f"{aiflame} -o {OUT / 'aiflame.folded'} 2>/dev/null",
            f"{peer} > {OUT / 'peer.folded'}",
        ),
        (
            "to html / svg",
            f"{aiflame} -o {OUT / 'aiflame.html'} 2>/dev/null",
            f"{peer} | perl {fg / 'flamegraph.pl'} > {OUT / 'peer.svg'}",
        ),
        (
            "to html / svg, normalized",
            f"{aiflame} -n -o {OUT / 'aiflame-n.html'} 2>/dev/null",
            f"perl {fg / 'difffolded.pl'} -n {BASE} {TEST} | perl {fg / 'flamegraph.pl'}"
            f" > {OUT / 'peer-n.svg'}",
        ),
    ]
    print(f"inputs: {BASE.name} ({BASE.stat().st_size / 1e6:.0f} MB), "
          f"{TEST.name} ({TEST.stat().st_size / 1e6:.0f} MB); {os.cpu_count()} CPUs; "
          f"median of {args.repeat}")  # fmt: skip
    print("| output | aiflame | peak RSS | difffolded.pl (+ flamegraph.pl) | peak RSS | ratio |")
    print("|---|---|---|---|---|---|")
    for name, ours_cmd, peer_cmd in rows:
        ours, ours_rss = measure(ours_cmd, args.repeat)
        theirs, peer_rss = measure(peer_cmd, args.repeat)
        print(f"| {name} | {ours:.1f} s | {ours_rss:.0f} MiB | {theirs:.1f} s | "
              f"{peer_rss:.0f} MiB | {theirs / ours:.2f}x |", flush=True)  # fmt: skip

    mine = (OUT / "aiflame.folded").read_text(encoding="utf-8").splitlines()
    peers = sorted((OUT / "peer.folded").read_text(encoding="utf-8").splitlines())
    same = mine == peers
    print(f"\nfolded outputs: {len(mine):,} lines (aiflame), {len(peers):,} (difffolded.pl), "
          f"identical after sorting: {'yes' if same else 'NO'}")  # fmt: skip
    sizes = {p.name: p.stat().st_size / 1e6 for p in sorted(OUT.iterdir())}
    print("output sizes: " + ", ".join(f"{k} {v:.1f} MB" for k, v in sizes.items()))
    print("\naiflame stages (one in-process run):")
    for name, secs in stages():
        print(f"  {name:<20} {secs:6.2f} s")


if __name__ == "__main__":
    main()
