"""aiflame's ``perf script`` collapser against FlameGraph's ``stackcollapse-perf.pl``.

    python benchmarks/bench_perf_collapse.py [--flamegraph /tmp/FlameGraph] [--repeat 3]
        [--input bench-data/perf-100M.txt]

The input is made by /work/shared/bench/gen_perf_script.py (``--size 100M``, seed 1). Every
command runs in a fresh process, side by side with the peer (``perl stackcollapse-perf.pl``
from a FlameGraph checkout: --flamegraph or $AIFLAME_FLAMEGRAPH). Times are medians of
wall-clock and of CPU (user + sys of the process tree: steadier on a shared machine), memory
the largest peak RSS of one process of the tree. Every output is compared byte for byte with
the Perl script's. Then the input is streamed three times over through a pipe to show that
memory does not grow with the input, and one in-process run splits ``aiflame convert``'s
time into its stages.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INPUT = ROOT / "bench-data" / "perf-100M.txt"

# The collapser alone, as a library call: stream -> sorted folded lines.
COLLAPSE = """
import sys
from aiflame.sources.perf.collapse import collapse_stream, write_folded
from aiflame.sources.perf.parallel import collapse_file
from aiflame.sources.perf.rules import PerfOptions
src, jobs = sys.argv[1], int(sys.argv[2])
if src == "-":
    c = collapse_stream(sys.stdin.buffer, PerfOptions())
else:
    c = collapse_file(src, PerfOptions(), jobs)
write_folded(c.sorted_stacks(), sys.stdout.buffer)
"""


def run(cmd: str) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds (user + sys) and peak RSS (MiB) of a shell command and
    everything it starts."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(["bash", "-o", "pipefail", "-c", cmd])
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    if code:
        sys.exit(f"failed ({code}): {cmd}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def measure(cmd: str, repeat: int) -> tuple[float, float, float]:
    runs = [run(cmd) for _ in range(repeat)]
    return (
        statistics.median(r[0] for r in runs),
        statistics.median(r[1] for r in runs),
        max(r[2] for r in runs),
    )


def stages(path: Path) -> list[tuple[str, float]]:
    """CPU seconds of each stage of ``aiflame convert -f folded`` in this process."""
    from aiflame.render.folded import render_folded
    from aiflame.sources.folded.importer import build_profile
    from aiflame.sources.inputs import Input
    from aiflame.sources.perf import importer as perf_script
    from aiflame.sources.perf.rules import PerfOptions

    clock = time.process_time
    out = []
    t = clock()
    c = perf_script.collapse_input(Input(str(path)), PerfOptions(), jobs=1)
    out.append(("collapse (1 process)", clock() - t))
    t = clock()
    counts = {pname + rest: float(v) for pname, by in c.counts.items() for rest, v in by.items()}
    profile = build_profile(counts).build()
    out.append(("build the profile (tree, frame kinds)", clock() - t))
    t = clock()
    render_folded(profile)
    out.append(("render folded text", clock() - t))
    t = clock()
    perf_script.load(Input(str(path)), perf_jobs=1)
    out.append(("whole load() (collapse + profile + labels)", clock() - t))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--input", type=Path, default=INPUT)
    ap.add_argument("--flamegraph", default=os.environ.get("AIFLAME_FLAMEGRAPH", "/tmp/FlameGraph"))
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    script = Path(args.flamegraph) / "stackcollapse-perf.pl"
    if not script.exists():
        sys.exit(f"no {script}: give --flamegraph DIR (a FlameGraph checkout)")
    src = args.input
    size = src.stat().st_size
    mb = size / 1e6
    q = shlex.quote
    py = q(sys.executable)
    out_dir = Path(tempfile.mkdtemp(prefix="bench-perf-"))
    outs = {name: out_dir / f"{name}.txt" for name in ("perl", "lib1", "libN", "cli", "cliN")}
    env = f"PYTHONPATH={q(str(ROOT / 'src'))} "
    commands = [
        ("stackcollapse-perf.pl", "perl", f"perl {q(str(script))} {q(str(src))} 2>/dev/null"),
        ("aiflame collapser, 1 process", "lib1", f"{env}{py} -c {q(COLLAPSE)} {q(str(src))} 1"),
        (
            f"aiflame collapser, {os.cpu_count()} processes",
            "libN",
            f"{env}{py} -c {q(COLLAPSE)} {q(str(src))} {os.cpu_count()}",
        ),
        (
            "aiflame convert -f folded (CLI)",
            "cli",
            f"{env}{py} -m aiflame convert {q(str(src))} -f folded -o {q(str(outs['cli']))}",
        ),
        (
            f"aiflame convert -f folded --jobs {os.cpu_count()} (CLI)",
            "cliN",
            f"{env}{py} -m aiflame convert {q(str(src))} -f folded --jobs {os.cpu_count()} "
            f"-o {q(str(outs['cliN']))}",
        ),
    ]
    print(f"input: {src} ({mb:.1f} MB), repeat {args.repeat}, cpus {os.cpu_count()}")
    print(f"load average before: {os.getloadavg()[0]:.1f}")
    results = {}
    for label, key, cmd in commands:
        full = cmd if key.startswith("cli") else f"{cmd} > {q(str(outs[key]))}"
        results[key] = measure(full, args.repeat)
        wall, cpu, rss = results[key]
        print(f"  {label:36} wall {wall:6.2f} s  CPU {cpu:6.2f} s  peak RSS {rss:6.0f} MiB")
    expected = outs["perl"].read_bytes()
    for key in ("lib1", "libN", "cli", "cliN"):
        same = outs[key].read_bytes() == expected
        print(f"  output of {key}: {'identical to' if same else 'DIFFERENT FROM'} the Perl one")
    print()
    print("| run | wall | CPU | MB/s wall | MB/s CPU | vs Perl wall | vs Perl CPU | peak RSS |")
    print("|---|---|---|---|---|---|---|---|")
    pw, pc, _ = results["perl"]
    for label, key, _ in commands:
        wall, cpu, rss = results[key]
        print(
            f"| {label} | {wall:.2f} s | {cpu:.2f} s | {mb / wall:.1f} | {mb / cpu:.1f} "
            f"| {pw / wall:.2f}x | {pc / cpu:.2f}x | {rss:.0f} MiB |"
        )
    print()
    for times in (1, 3):
        cat = " ".join([q(str(src))] * times)
        cmd = f"cat {cat} | {env}{py} -c {q(COLLAPSE)} - 1 > /dev/null"
        wall, cpu, rss = run(cmd)
        print(
            f"streamed from a pipe, {times}x the input ({mb * times:.0f} MB): "
            f"CPU {cpu:.2f} s, peak RSS {rss:.0f} MiB"
        )
    print()
    print("aiflame convert stages, in one process (CPU seconds):")
    for name, secs in stages(src):
        print(f"  {name:44} {secs:6.2f}")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
