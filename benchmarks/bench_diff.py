"""``aiflame diff`` against FlameGraph's ``difffolded.pl | flamegraph.pl`` on the same inputs.

    python benchmarks/bench_diff.py --flamegraph /tmp/FlameGraph [--repeat 3]

Inputs: bench-data/folded-1M-200k.txt and folded-1M-200k-b.txt (made by
/work/shared/bench/gen_folded.py, the second with ``--variant 1``). Every command runs in a
fresh process, side by side with the peer; times are wall-clock medians, memory the peak RSS
of the process tree, CPU the user + sys seconds of the tree (steadier than wall time on a
shared machine). Then one in-process run splits aiflame's time into its stages, and the
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


def run(cmd: str) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds (user + sys) and peak RSS (MiB) of a shell command and
    everything it starts."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(["bash", "-o", "pipefail", "-c", cmd])
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        sys.exit(f"failed ({proc.returncode}): {cmd}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def measure(cmd: str, repeat: int) -> tuple[float, float, float]:
    """Medians of wall and CPU time, the largest peak RSS."""
    runs = [run(cmd) for _ in range(repeat)]
    wall = statistics.median(r[0] for r in runs)
    return wall, statistics.median(r[1] for r in runs), max(r[2] for r in runs)


def stages() -> list[tuple[str, float, float]]:
    """aiflame's time per stage, in this process: the folded path the command takes for
    these inputs, then the general path (any input format) for comparison."""
    from aiflame.render.folded import format_diff_lines, render_diff_folded
    from aiflame.render.html import render_html
    from aiflame.sources import load
    from aiflame.sources.folded.diff import load_diff, read_pair
    from aiflame.transforms.diff import diff_profiles

    out = []

    def timed(name, fn, *args):  # type: ignore[no-untyped-def]
        t, c = time.perf_counter(), time.process_time()
        result = fn(*args)
        out.append((name, time.perf_counter() - t, time.process_time() - c))
        return result

    pair = timed("folded: read both files, union", read_pair, str(BASE), str(TEST))
    timed("folded: format lines", lambda: format_diff_lines(*pair.columns(False)))
    diff = timed("folded: load_diff (one tree)", load_diff, str(BASE), str(TEST))
    timed("render_html", render_html, diff)
    del diff
    base = timed("general: load base", load, str(BASE))
    test = timed("general: load test", load, str(TEST))
    diff = timed("general: diff_profiles", diff_profiles, base, test)
    timed("general: render_diff_folded", render_diff_folded, diff)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--flamegraph", required=True, help="a FlameGraph checkout (difffolded.pl)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--stages-only", action="store_true", help="only the in-process breakdown")
    args = ap.parse_args()
    if args.stages_only:
        print_stages()
        return
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
    print("| output | tool | wall | CPU | peak RSS |")
    print("|---|---|---|---|---|")
    ratios = []
    for name, ours_cmd, peer_cmd in rows:
        ours = measure(ours_cmd, args.repeat)
        theirs = measure(peer_cmd, args.repeat)
        for tool, (wall, cpu, rss) in (("aiflame", ours), ("peer", theirs)):
            print(f"| {name} | {tool} | {wall:.1f} s | {cpu:.1f} s | {rss:.0f} MiB |", flush=True)
        ratios.append(f"{name}: {theirs[0] / ours[0]:.2f}x wall, {theirs[1] / ours[1]:.2f}x CPU")
    print("\npeer time / aiflame time: " + "; ".join(ratios))

    mine = (OUT / "aiflame.folded").read_text(encoding="utf-8").splitlines()
    peers = sorted((OUT / "peer.folded").read_text(encoding="utf-8").splitlines())
    same = mine == peers
    print(f"\nfolded outputs: {len(mine):,} lines (aiflame), {len(peers):,} (difffolded.pl), "
          f"identical after sorting: {'yes' if same else 'NO'}")  # fmt: skip
    sizes = {p.name: p.stat().st_size / 1e6 for p in sorted(OUT.iterdir())}
    print("output sizes: " + ", ".join(f"{k} {v:.1f} MB" for k, v in sizes.items()))
    print_stages()


def print_stages() -> None:
    print("\naiflame stages (one in-process run): wall, CPU")
    for name, wall, cpu in stages():
        print(f"  {name:<34} {wall:6.2f} s {cpu:6.2f} s")


if __name__ == "__main__":
    main()
