"""PyTorch profiler traces: ``aiflame flamegraph`` against Meta HTA's ``TraceAnalysis``.

    python benchmarks/bench_kineto.py [--repeat 3] [--scale 16] [--hta-python PY]

1. The largest trace of the shared data (tracelens/large, an inference trace of 240k
   events, 3.9 MB gzip / 62 MB JSON): aiflame loads it and writes the GPU-time flame graph
   (HTML); HTA (``holistictraceanalysis`` from PyPI, in its own virtualenv because of its
   pandas/plotly dependencies: ``python -m venv /tmp/hta-venv && /tmp/hta-venv/bin/pip
   install holistictraceanalysis``) loads the same file into ``TraceAnalysis``. Both run as
   whole commands in fresh processes, side by side, alternating: medians of the wall time
   and the peak memory of the whole process tree (HTA parses in a worker process), polled
   from /proc every 10 ms.
2. A trace of about 1 GB (``--scale`` copies of the large trace's events, each shifted
   in time by the trace's span with its own correlation, flow and Python ids, written as
   plain JSON to bench-data/kineto/, git-ignored, built once): aiflame's time and peak
   memory on it, and per event, to show memory stays a small fraction of the input
   (the events are streamed, never held as JSON objects). For scale, the peak memory of
   ``json.load`` on the 62 MB trace alone is measured too.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LARGE = (
    ROOT.parent / "shared" / "data" / "kineto" / "tracelens" / "large"
    / "xdit_sd_3.5_profile_trace_rank_0.json.gz"
)  # fmt: skip
BENCH = ROOT / "bench-data" / "kineto"


def tree_rss_kib(pid: int) -> int:
    """Summed RSS of ``pid`` and its descendants (KiB), from /proc."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as f:
                text = f.read()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        p = int(entry)
        children.setdefault(int(fields.get("PPid", "0").strip() or 0), []).append(p)
        rss[p] = int(fields.get("VmRSS", "0 kB").split()[0])
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        todo.extend(children.get(p, []))
    return total


def run(cmd: list[str]) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds (user + sys, with reaped worker processes) and peak RSS
    of the process tree (MiB, polled every 10 ms)."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        peak = 0
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            peak = max(peak, tree_rss_kib(proc.pid))
            time.sleep(0.01)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode:
            err.seek(0)
            sys.exit(f"failed: {' '.join(cmd)}\n{err.read().decode(errors='replace')[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, peak / 1024


def measure(commands: dict[str, list[str]], repeat: int) -> dict[str, tuple[float, float, float]]:
    """Median wall and CPU seconds and max peak tree RSS per command, runs interleaved."""
    runs: dict[str, list[tuple[float, float, float]]] = {k: [] for k in commands}
    for _ in range(repeat):
        for name, cmd in commands.items():
            runs[name].append(run(cmd))
    return {
        k: (
            statistics.median(r[0] for r in v),
            statistics.median(r[1] for r in v),
            max(r[2] for r in v),
        )
        for k, v in runs.items()
    }


def scaled_trace(scale: int) -> Path:
    """The large trace's events ``scale`` times over, as plain JSON (built once)."""
    out = BENCH / f"xdit_x{scale}.json"
    if out.exists():
        return out
    BENCH.mkdir(parents=True, exist_ok=True)
    with gzip.open(LARGE) as f:
        data = json.load(f)
    events = data.pop("traceEvents")
    xs = [e for e in events if e.get("ph") == "X" and isinstance(e.get("ts"), (int, float))]
    span = max(e["ts"] + e.get("dur", 0) for e in xs) - min(e["ts"] for e in xs) + 1
    ids = [e["args"].get("correlation", 0) for e in events if isinstance(e.get("args"), dict)]
    id_step = max(i for i in ids if isinstance(i, int)) + 1
    py_step = 1 + max(
        (e["args"].get("Python id") or 0 for e in events if isinstance(e.get("args"), dict)),
        default=0,
    )
    tmp = out.with_suffix(".partial")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("{\n")
        for key, value in data.items():
            f.write(f"  {json.dumps(key)}: {json.dumps(value)},\n")
        f.write('  "traceEvents": [\n')
        first = True
        for k in range(scale):
            for e in events:
                if e.get("ph") == "M" and k:
                    continue
                c = dict(e)
                if isinstance(c.get("ts"), (int, float)):
                    c["ts"] = round(c["ts"] + k * span, 3)
                if "id" in c and isinstance(c["id"], int):
                    c["id"] += k * id_step
                args = c.get("args")
                if isinstance(args, dict):
                    args = c["args"] = dict(args)
                    if isinstance(args.get("correlation"), int):
                        args["correlation"] += k * id_step
                    for key in ("Python id", "Python parent id"):
                        if isinstance(args.get(key), int):
                            args[key] += k * py_step
                f.write(("  " if first else ",\n  ") + json.dumps(c))
                first = False
        f.write("\n  ]\n}\n")
    tmp.rename(out)
    return out


def stages(trace: Path) -> list[tuple[str, float]]:
    """aiflame's time per stage, in this process."""
    from aiflame.render.html import render_html
    from aiflame.sources.inputs import Input
    from aiflame.sources.kineto import importer as kineto

    out = []
    t = time.perf_counter()
    cols, meta = kineto.read_columns(Input(str(trace)))
    out.append(("stream + decode + columns", time.perf_counter() - t))
    t = time.perf_counter()
    profile = kineto.build_profile(cols, meta, str(trace), "short", "full")
    out.append(("nest + correlate + stacks", time.perf_counter() - t))
    t = time.perf_counter()
    render_html(profile)
    out.append(("render_html", time.perf_counter() - t))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--scale", type=int, default=16, help="copies of the large trace (16: ~1 GB)")
    ap.add_argument("--hta-python", default="/tmp/hta-venv/bin/python")
    ap.add_argument("--trace", type=Path, default=LARGE)
    args = ap.parse_args()
    aiflame = [sys.executable, "-m", "aiflame"]
    with tempfile.TemporaryDirectory() as tmp:
        html = os.path.join(tmp, "out.html")
        hta_dir = os.path.join(tmp, "hta")
        os.mkdir(hta_dir)
        os.symlink(args.trace, os.path.join(hta_dir, args.trace.name))
        hta = (
            "import logging; logging.disable(logging.WARNING)\n"
            "from hta.trace_analysis import TraceAnalysis\n"
            f"TraceAnalysis(trace_dir={hta_dir!r})\n"
        )
        raw = os.path.join(tmp, "raw.json")
        with gzip.open(args.trace) as f, open(raw, "wb") as g:
            g.write(f.read())
        results = measure(
            {
                "aiflame flamegraph": [*aiflame, "flamegraph", str(args.trace), "-o", html],
                "HTA TraceAnalysis": [args.hta_python, "-c", hta],
            },
            args.repeat,
        )
        ((jl_wall, jl_cpu, jl_peak),) = measure(
            {"json.load": [sys.executable, "-c", f"import json; json.load(open({raw!r}))"]}, 1
        ).values()
        size = os.path.getsize(raw)
    print(f"## {args.trace.name}: {size / 2**20:.1f} MiB of JSON\n")
    print("| command | wall (median) | CPU (median) | peak memory (process tree) |")
    print("|---|---:|---:|---:|")
    for name, (wall, cpu, peak) in results.items():
        print(f"| {name} | {wall:.2f} s | {cpu:.2f} s | {peak:.0f} MiB |")
    print(f"| (python json.load alone) | {jl_wall:.2f} s | {jl_cpu:.2f} s | {jl_peak:.0f} MiB |")
    a, h = results["aiflame flamegraph"], results["HTA TraceAnalysis"]
    print(
        f"\nHTA / aiflame: {h[0] / a[0]:.1f}x the wall time, {h[1] / a[1]:.1f}x the CPU time, "
        f"{h[2] / a[2]:.1f}x the peak memory\n"
    )
    print("aiflame stages (in process):")
    for name, seconds in stages(args.trace):
        print(f"  {name:28s} {seconds:6.2f} s")

    big = scaled_trace(args.scale)
    with tempfile.TemporaryDirectory() as tmp:
        html = os.path.join(tmp, "big.html")
        ((wall, cpu, peak),) = measure(
            {"big": [*aiflame, "flamegraph", str(big), "-o", html]}, 1
        ).values()
    gb = os.path.getsize(big) / 2**30
    n_events = 239_093 * args.scale
    print(f"\n## {big.name}: {gb:.2f} GiB of JSON, ~{n_events / 1e6:.1f} M events\n")
    print(f"aiflame flamegraph: {wall:.1f} s wall, {cpu:.1f} s CPU, peak {peak:.0f} MiB "
          f"({peak / (gb * 1024) * 100:.0f}% of the input, "
          f"{peak * 2**20 / n_events:.0f} bytes per event)")  # fmt: skip


if __name__ == "__main__":
    main()
