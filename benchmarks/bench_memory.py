"""``aiflame memory`` against PyTorch's ``python -m torch.cuda._memory_viz trace_plot``.

    python benchmarks/bench_memory.py [--scale 100] [--repeat 3] [--no-browser]

Inputs (in bench-data/memory/, git-ignored, built once by gen_big_snapshot.py): the real
snapshot of tests/data/memory/ as a plain pickle, and a snapshot ``--scale`` times larger
made by replicating its allocator trace (each copy shifted in time by the trace's span and
in address, with its own frame lists as a longer recording would have; segments and blocks
unchanged, so every copy replays like the original). Both tools run as whole commands in
fresh processes, side by side: wall-clock medians, CPU seconds (user + sys) and the peak RSS
of the process; then the size of each page and, unless ``--no-browser``, each page opened in
headless Chromium with every http(s) request blocked: the time to the load event and the JS
heap then, and for aiflame's page the time until its flame graph and memory chart are drawn
and the time one selection on the chart takes (an instant and a range: recompute what was
live, rebuild and redraw the flame graph). PyTorch's page cannot draw offline (it imports
MemoryViz.js and d3 from CDNs), so for it only loading the page (parsing the embedded
pickle) is measured.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gen_big_snapshot import BENCH, big_snapshot, real_snapshot

BUILD = f"""
import sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
from gen_big_snapshot import big_snapshot
big_snapshot(int(sys.argv[1]))
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


def measure(cmds: list[list[str]], repeat: int) -> list[tuple[float, float, float]]:
    """Per command: median wall, median CPU, max peak RSS. The commands run alternately,
    so that load from other processes falls on each of them alike."""
    runs: list[list[tuple[float, float, float]]] = [[] for _ in cmds]
    for _ in range(repeat):
        for k, cmd in enumerate(cmds):
            runs[k].append(run(cmd))
    return [
        (
            statistics.median(r[0] for r in rs),
            statistics.median(r[1] for r in rs),
            max(r[2] for r in rs),
        )
        for rs in runs
    ]


def stages(snapshot: Path) -> list[tuple[str, float]]:
    """aiflame's time per stage, in this process."""
    from aiflame.render.html import render_html
    from aiflame.sources.inputs import Input
    from aiflame.sources.torch_memory.importer import _gc_paused, build_profile, read_snapshot

    out = []
    t = time.perf_counter()
    data = read_snapshot(Input(str(snapshot)))
    out.append(("read (streaming)", time.perf_counter() - t))
    t = time.perf_counter()
    with _gc_paused():
        profile = build_profile(data, consume=True)
    out.append(("replay + stacks", time.perf_counter() - t))
    t = time.perf_counter()
    render_html(profile, metric="peak-bytes")
    out.append(("render_html", time.perf_counter() - t))
    return out


def chromium():  # type: ignore[no-untyped-def]
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--disable-background-networking", "--disable-dev-shm-usage",
                "--window-size=1400,1000"):  # fmt: skip
        options.add_argument(arg)
    drv = webdriver.Chrome(
        service=Service("/usr/bin/chromedriver", log_output=os.devnull), options=options
    )
    drv.set_script_timeout(300)
    drv.set_page_load_timeout(600)
    drv.execute_cdp_cmd("Network.enable", {})
    drv.execute_cdp_cmd("Network.setBlockedURLs", {"urls": ["http://*", "https://*"]})
    return drv


def _browser_mib(drv) -> float:  # type: ignore[no-untyped-def]
    """Memory of the page's renderer process(es) alone (USS), in MiB (the browser's other
    processes are the same for any page)."""
    import psutil

    procs = psutil.Process(drv.service.process.pid).children(recursive=True)
    renderers = [p for p in procs if "--type=renderer" in " ".join(p.cmdline())]
    return sum(p.memory_full_info().uss for p in renderers) / 2**20


def open_in_chromium(page: Path, ours: bool) -> dict[str, float]:
    """Seconds to the load event and the browser's memory (MiB) then; for aiflame's page
    also until the flame graph and the chart are drawn, and the time of a selection on the
    chart."""
    drv = chromium()
    try:
        out: dict[str, float] = {}
        t0 = time.perf_counter()
        drv.get(page.resolve().as_uri())  # returns at the load event
        out["load"] = time.perf_counter() - t0
        if ours:
            state = drv.execute_async_script(
                "const done = arguments[arguments.length - 1];"
                "aiflame.memoryReady.then((c) => done(c ? 'ok' : 'no chart'),"
                " (e) => done(String(e)));"
            )
            out["drawn"] = time.perf_counter() - t0
            if state != "ok":
                sys.exit(f"{page}: the page failed: {state}")
            out["instant"], out["range"] = drv.execute_script(
                "const c = aiflame.memory, m = c.m, t = [];"
                "for (const [a, b] of [[m >> 2, m >> 2], [m >> 3, m >> 1]]) {"
                "  const s = performance.now(); c.select(a, b); t.push(performance.now() - s);"
                "}"
                "return t;"
            )
        out["uss"] = _browser_mib(drv)
        return out
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
    inputs = [("real", real_snapshot()), (f"x{args.scale}", big_snapshot(args.scale))]
    print(f"load average at start: {os.getloadavg()[0]:.1f} ({os.cpu_count()} CPUs)")
    for name, snap in inputs:
        ours, theirs = BENCH / f"aiflame-{name}.html", BENCH / f"memory_viz-{name}.html"
        a, b = measure(
            [
                [py, "-m", "aiflame", "memory", str(snap), "-o", str(ours)],
                [py, "-m", "torch.cuda._memory_viz", "trace_plot", str(snap), "-o", str(theirs)],
            ],
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
            a_open = open_in_chromium(ours, True)
            b_open = open_in_chromium(theirs, False)
            print(
                f"  Chromium, aiflame: load {a_open['load']:.2f} s, drawn {a_open['drawn']:.2f} s,"
                f" renderer USS {a_open['uss']:.0f} MiB; a selection: instant"
                f" {a_open['instant']:.0f} ms, range {a_open['range']:.0f} ms"
            )
            print(
                f"  Chromium, _memory_viz: load {b_open['load']:.2f} s,"
                f" renderer USS {b_open['uss']:.0f} MiB (draws nothing offline)"
            )
        sys.stdout.flush()
    print(f"\nload average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
