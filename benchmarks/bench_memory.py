"""``aiflame memory`` against PyTorch's ``python -m torch.cuda._memory_viz trace_plot``.

    python benchmarks/bench_memory.py [--scale 100] [--repeat 3] [--no-browser]

Inputs (in bench-data/memory/, git-ignored, built once): the real snapshot of
tests/data/memory/ as a plain pickle, and a snapshot ``--scale`` times larger made by
replicating its allocator trace (each copy shifted in time by the trace's span, with its own
frame lists as a longer recording would have; segments and blocks unchanged, so every copy
replays like the original). Both tools run as whole commands in fresh processes, side by
side: wall-clock medians, CPU seconds (user + sys) and the peak RSS of the process; then
the size of each page and, unless ``--no-browser``, the time headless Chromium takes to open
aiflame's page until its flame graph is drawn (``aiflame.ready``). PyTorch's page cannot be
opened offline (it imports MemoryViz.js and d3 from CDNs), so only its size is reported.
"""

from __future__ import annotations

import argparse
import gzip
import os
import pickle
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOT = ROOT / "tests" / "data" / "memory" / "medium_128_inference_memory_snapshot.pickle.gz"
BENCH = ROOT / "bench-data" / "memory"


def real_snapshot() -> Path:
    out = BENCH / "medium_128.pickle"
    if not out.exists():
        BENCH.mkdir(parents=True, exist_ok=True)
        out.write_bytes(gzip.decompress(SNAPSHOT.read_bytes()))
    return out


def scaled_snapshot(scale: int) -> Path:
    out = BENCH / f"medium_128_x{scale}.pickle"
    if out.exists():
        return out
    from aiflame.sources.torch_memory import PlainDataUnpickler

    with open(real_snapshot(), "rb") as f:
        data = PlainDataUnpickler(f).load()
    trace = data["device_traces"][0]
    span = trace[-1]["time_us"] - trace[0]["time_us"] + 1
    events = []
    for k in range(scale):
        lists: dict[int, list] = {}  # events that shared a frame list share its copy
        for e in trace:
            c = dict(e, time_us=e["time_us"] + k * span)
            key = id(e["frames"])
            if key not in lists:
                lists[key] = list(e["frames"])
            c["frames"] = lists[key]
            events.append(c)
    data["device_traces"][0] = events
    tmp = out.with_suffix(".partial")
    with open(tmp, "wb") as f:
        pickle.dump(data, f, protocol=4)
    tmp.rename(out)
    return out


BUILD = f"""
import sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
from bench_memory import scaled_snapshot
scaled_snapshot(int(sys.argv[1]))
"""


def run(cmd: list[str]) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds and peak RSS (MiB) of one command."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if os.waitstatus_to_exitcode(status):
        sys.exit(f"failed: {' '.join(cmd)}\n{err}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def measure(cmd: list[str], repeat: int) -> tuple[float, float, float]:
    runs = [run(cmd) for _ in range(repeat)]
    return (
        statistics.median(r[0] for r in runs),
        statistics.median(r[1] for r in runs),
        max(r[2] for r in runs),
    )


def stages(snapshot: Path) -> list[tuple[str, float]]:
    """aiflame's time per stage, in this process."""
    from aiflame.render.html import render_html
    from aiflame.sources.inputs import Input
    from aiflame.sources.torch_memory import _gc_paused, build_profile, read_snapshot

    out = []
    t = time.perf_counter()
    data = read_snapshot(Input(str(snapshot)))
    out.append(("unpickle (restricted)", time.perf_counter() - t))
    t = time.perf_counter()
    with _gc_paused():
        profile = build_profile(data)
    out.append(("replay + stacks", time.perf_counter() - t))
    t = time.perf_counter()
    render_html(profile, metric="peak-bytes")
    out.append(("render_html", time.perf_counter() - t))
    return out


def open_in_chromium(page: Path) -> float:
    """Seconds from navigation until the page says its flame graph is drawn."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--disable-background-networking", "--disable-dev-shm-usage"):  # fmt: skip
        options.add_argument(arg)
    drv = webdriver.Chrome(
        service=Service("/usr/bin/chromedriver", log_output=os.devnull), options=options
    )
    try:
        drv.set_script_timeout(120)
        t0 = time.perf_counter()
        drv.get(page.resolve().as_uri())
        state = drv.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "aiflame.ready.then(() => done('ok'), (e) => done(String(e)));"
        )
        elapsed = time.perf_counter() - t0
        if state != "ok":
            sys.exit(f"{page}: the page failed: {state}")
        return elapsed
    finally:
        drv.quit()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--scale", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-browser", action="store_true")
    ap.add_argument("--stages", metavar="SNAPSHOT", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.stages:  # in a child process: its memory never inflates the measured commands'
        for stage, seconds in stages(Path(args.stages)):
            print(f"  aiflame stage {stage:24} {seconds:6.2f} s")
        return
    py = sys.executable
    # Built in a child too: a fork inherits this process's size into the children's max RSS.
    subprocess.run([py, "-c", BUILD, str(args.scale)], check=True)
    inputs = [("real", real_snapshot()), (f"x{args.scale}", scaled_snapshot(args.scale))]
    print(f"load average at start: {os.getloadavg()[0]:.1f} ({os.cpu_count()} CPUs)")
    for name, snap in inputs:
        ours, theirs = BENCH / f"aiflame-{name}.html", BENCH / f"memory_viz-{name}.html"
        a = measure([py, "-m", "aiflame", "memory", str(snap), "-o", str(ours)], args.repeat)
        b = measure(
            [py, "-m", "torch.cuda._memory_viz", "trace_plot", str(snap), "-o", str(theirs)],
            args.repeat,
        )
        size = snap.stat().st_size / 2**20
        print(f"\n{name}: {snap.name} ({size:.1f} MiB)")
        print(f"  {'':12} {'wall s':>8} {'cpu s':>8} {'peak RSS MiB':>13} {'page MiB':>9}")
        for tool, (wall, cpu, rss), page in (("aiflame", a, ours), ("_memory_viz", b, theirs)):
            mib = page.stat().st_size / 2**20
            print(f"  {tool:12} {wall:8.2f} {cpu:8.2f} {rss:13.0f} {mib:9.2f}")
        print(f"  aiflame is {b[0] / a[0]:.1f}x faster (wall), {b[1] / a[1]:.1f}x (cpu)")
        sys.stdout.flush()
        subprocess.run([py, __file__, "--stages", str(snap)], check=True)
        if not args.no_browser:
            print(f"  Chromium: aiflame's page drawn in {open_in_chromium(ours):.2f} s")
    print(f"\nload average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
