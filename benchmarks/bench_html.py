#!/usr/bin/env python3
"""HTML flame graph vs FlameGraph's flamegraph.pl SVG, side by side on the same input.

Measures, on a large folded profile (default: bench-data/folded-1M-200k.txt, made by
/work/shared/bench/gen_folded.py):

1. build time, end to end: ``aiflame flamegraph IN -o page.html`` (parse + write) and
   ``flamegraph.pl IN > graph.svg``, as subprocesses, median of --repeat runs;
2. the page: its size, and that it holds every node of the call tree;
3. in headless Chromium, for both files with the same method:
   first paint = from navigation start to the first frame painted after the graph is
   complete (the SVG's load event; the page's first canvas draw), taken as the time of a
   setTimeout(0) queued from a requestAnimationFrame callback after that point;
   click-to-zoom = from dispatching a click on the same function's frame to the first frame
   painted after the handler (same rAF + setTimeout(0) probe). Medians of --loads loads.

FlameGraph is not part of aiflame: fetch it into /tmp (e.g. a clone of
github.com/brendangregg/FlameGraph) and pass --flamegraph /tmp/FlameGraph/flamegraph.pl.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"

# Installed before any page script runs. `__fp` resolves with the first-paint time.
PROBE = """
window.__afterPaint = () => new Promise((resolve) =>
  requestAnimationFrame(() => setTimeout(() => resolve(performance.now()), 0)));
window.__fp = new Promise((resolve) => {
  addEventListener("load", () => {
    const ready = (window.aiflame && window.aiflame.ready) || Promise.resolve();
    ready.then(() => window.__afterPaint().then(resolve));
  });
});
"""

# The widest frame at depth 3 (root = 0) in the aiflame page, and where it is.
PAGE_TARGET = """
const app = aiflame.app, t = app.tree, tot = t.totals(app.metric);
let best = -1;
for (let i = 0; i < t.n; i++) if (t.depth[i] === 3 && (best < 0 || tot[i] > tot[best])) best = i;
const r = aiflame.test.rect(best);
return {node: best, name: t.nameOf(best), x: r.x + r.w / 2, y: r.y + r.h / 2};
"""

# The same function's frame in the SVG: the widest <g> of that name three rows above "all".
SVG_TARGET = """
const name = arguments[0];
const groups = [...document.querySelectorAll("#frames > g")];
const rectOf = (g) => g.querySelector("rect");
const all = groups.find((g) => g.querySelector("title").textContent.startsWith("all ("));
const y = parseFloat(rectOf(all).getAttribute("y")) - 3 * 16;
let best = null, bestW = -1;
for (const g of groups) {
  const r = rectOf(g);
  if (Math.abs(parseFloat(r.getAttribute("y")) - y) > 0.5) continue;
  if (!g.querySelector("title").textContent.startsWith(name + " (")) continue;
  const w = parseFloat(r.getAttribute("width"));
  if (w > bestW) { best = g; bestW = w; }
}
window.__target = best ? rectOf(best) : null;
return bestW;
"""

CLICK_PAGE = """
const done = arguments[arguments.length - 1];
const [x, y] = [arguments[0], arguments[1]];
const canvas = aiflame.app.view.canvas;
const t0 = performance.now();
canvas.dispatchEvent(new MouseEvent("click", {bubbles: true, clientX: x, clientY: y}));
window.__afterPaint().then((t1) => done([t1 - t0, aiflame.app.view.zoom]));
"""

CLICK_SVG = """
const done = arguments[arguments.length - 1];
const target = window.__target;
const t0 = performance.now();
target.dispatchEvent(new MouseEvent("click", {bubbles: true}));
window.__afterPaint().then((t1) => done([t1 - t0, document.querySelectorAll(".parent").length]));
"""


def timed(cmd: list[str], stdout_path: Path | None = None) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds (user + sys) and peak RSS (MiB) of one command."""
    out = open(stdout_path, "wb") if stdout_path else subprocess.DEVNULL  # noqa: SIM115
    start = time.perf_counter()
    try:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        if stdout_path:
            out.close()  # type: ignore[union-attr]
    wall = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"failed ({status}): {' '.join(cmd)}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def build(args: argparse.Namespace, out: Path) -> dict:
    page, svg = out / "aiflame.html", out / "flamegraph.svg"
    r: dict = {
        k: []
        for k in (
            "aiflame_s",
            "aiflame_cpu_s",
            "aiflame_rss_mib",
            "flamegraph_pl_s",
            "flamegraph_pl_cpu_s",
            "flamegraph_pl_rss_mib",
        )
    }
    for _ in range(args.repeat):
        cmd = [sys.executable, "-m", "aiflame", "flamegraph", args.input, "-o", str(page)]
        wall, cpu, rss = timed(cmd)
        r["aiflame_s"].append(wall)
        r["aiflame_cpu_s"].append(cpu)
        r["aiflame_rss_mib"].append(rss)
        print(f"  aiflame flamegraph: {wall:.2f} s wall, {cpu:.2f} s CPU", flush=True)
        if not args.skip_peer:
            wall, cpu, rss = timed(["perl", args.flamegraph, args.input], svg)
            r["flamegraph_pl_s"].append(wall)
            r["flamegraph_pl_cpu_s"].append(cpu)
            r["flamegraph_pl_rss_mib"].append(rss)
            print(f"  flamegraph.pl:      {wall:.2f} s wall, {cpu:.2f} s CPU", flush=True)
    return r


def check_page(args: argparse.Namespace, page: Path) -> dict:
    """The page's size, and its node count against the call tree of the input."""
    from aiflame.model import CallTree
    from aiflame.render.html import extract_data
    from aiflame.sources.folded import importer as folded
    from aiflame.sources.inputs import Input

    header, _ = extract_data(page.read_text(encoding="utf-8"))
    tree = CallTree.from_profile(folded.load(Input(args.input)))
    nodes = int((tree.total_value != 0).any(axis=1).sum())
    return {
        "page_bytes": page.stat().st_size,
        "page_nodes": header["nodes"] - 1,  # minus the synthetic root "all"
        "tree_nodes": nodes,
        "total": header["types"][0]["total"],
    }


def browser(args: argparse.Namespace, page: Path, svg: Path) -> dict:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--window-size=1400,1000",
        "--force-device-scale-factor=1",
    ):
        options.add_argument(arg)
    drv = webdriver.Chrome(service=Service(CHROMEDRIVER, log_output=os.devnull), options=options)
    drv.set_script_timeout(120)
    drv.set_page_load_timeout(300)
    drv.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": PROBE})
    fp_wait = "const done = arguments[arguments.length - 1]; window.__fp.then(done);"
    result: dict = {
        "page_first_paint_ms": [],
        "page_zoom_ms": [],
        "svg_first_paint_ms": [],
        "svg_zoom_ms": [],
    }
    try:
        for _ in range(args.loads):
            drv.get(page.resolve().as_uri())
            result["page_first_paint_ms"].append(drv.execute_async_script(fp_wait))
            target = drv.execute_script(PAGE_TARGET)
            ms, zoom = drv.execute_async_script(CLICK_PAGE, target["x"], target["y"])
            assert zoom == target["node"], "the click did not zoom"
            result["page_zoom_ms"].append(ms)
            result["target"] = target["name"]
            if svg.exists():
                drv.get(svg.resolve().as_uri())
                result["svg_first_paint_ms"].append(drv.execute_async_script(fp_wait))
                width = drv.execute_script(SVG_TARGET, target["name"])
                assert width > 0, f"no frame {target['name']!r} in the SVG"
                ms, zoomed = drv.execute_async_script(CLICK_SVG)
                assert zoomed > 0, "the SVG did not zoom"
                result["svg_zoom_ms"].append(ms)
            print(
                f"  load: page {result['page_first_paint_ms'][-1]:.0f} ms, zoom "
                f"{result['page_zoom_ms'][-1]:.1f} ms; svg "
                f"{(result['svg_first_paint_ms'] or [float('nan')])[-1]:.0f} ms, zoom "
                f"{(result['svg_zoom_ms'] or [float('nan')])[-1]:.1f} ms",
                flush=True,
            )
    finally:
        drv.quit()
    return result


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def report(r: dict) -> str:
    ours, theirs = median(r["aiflame_s"]), median(r["flamegraph_pl_s"])
    fp, sfp = median(r["page_first_paint_ms"]), median(r["svg_first_paint_ms"])
    z, sz = median(r["page_zoom_ms"]), median(r["svg_zoom_ms"])
    cpu, tcpu = median(r["aiflame_cpu_s"]), median(r["flamegraph_pl_cpu_s"])
    rss, trss = median(r["aiflame_rss_mib"]), median(r["flamegraph_pl_rss_mib"])
    lines = [
        "| measure | aiflame (HTML) | flamegraph.pl (SVG) | ratio |",
        "|---|---|---|---|",
        f"| build, end to end, wall (median of {len(r['aiflame_s'])}) | {ours:.2f} s | "
        f"{theirs:.2f} s | {theirs / ours:.1f}x faster |",
        f"| build, CPU (user + sys) | {cpu:.2f} s | {tcpu:.2f} s | {tcpu / cpu:.1f}x less |",
        f"| build, peak RSS | {rss:.0f} MiB | {trss:.0f} MiB | |",
        f"| file size | {r['page_bytes'] / 1e6:.2f} MB, {r['page_nodes']:,} nodes "
        f"(all {r['tree_nodes']:,}) | {r.get('svg_bytes', 0) / 1e6:.2f} MB, "
        f"{r.get('svg_frames', 0):,} frames | |",
        f"| first paint in Chromium (median of {len(r['page_first_paint_ms'])}) | "
        f"{fp:.0f} ms | {sfp:.0f} ms | {sfp / fp:.1f}x sooner |",
        f"| click to zoom ({r.get('target', '?')}) | {z:.1f} ms | {sz:.1f} ms | "
        f"{sz / z:.0f}x faster |",
    ]
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--input", default=str(ROOT / "bench-data/folded-1M-200k.txt"))
    p.add_argument("--flamegraph", default="/tmp/FlameGraph/flamegraph.pl")
    p.add_argument("--out", default=str(ROOT / "bench-data/html-bench"))
    p.add_argument("--repeat", type=int, default=3, help="build runs of each tool")
    p.add_argument("--loads", type=int, default=5, help="page loads of each file")
    p.add_argument("--skip-peer", action="store_true", help="reuse an existing SVG")
    args = p.parse_args()
    if not Path(args.input).exists():
        sys.exit(f"{args.input}: missing (see /work/shared/bench/README.md)")
    if not args.skip_peer and not Path(args.flamegraph).exists():
        sys.exit(f"{args.flamegraph}: missing; fetch FlameGraph into /tmp first")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"input: {args.input}", flush=True)
    r = build(args, out)
    page, svg = out / "aiflame.html", out / "flamegraph.svg"
    r.update(check_page(args, page))
    if svg.exists():
        text = svg.read_text(encoding="utf-8", errors="replace")
        r["svg_bytes"] = svg.stat().st_size
        r["svg_frames"] = text.count("<g >") - 0
    assert r["page_nodes"] == r["tree_nodes"], "the page lost nodes"
    r.update(browser(args, page, svg))
    (out / "results.json").write_text(json.dumps(r, indent=1))
    print(report(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
