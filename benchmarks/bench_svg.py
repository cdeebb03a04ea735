#!/usr/bin/env python3
"""SVG flame graph: ``aiflame flamegraph IN -o graph.svg`` vs FlameGraph's ``flamegraph.pl``.

On a large folded profile (default: bench-data/folded-1M-200k.txt, made by
/work/shared/bench/gen_folded.py), side by side, each command a fresh process:

1. build time (wall, CPU) and peak RSS, median of --repeat runs;
2. the files: size, frames drawn (both leave out frames under 0.1 px);
3. in headless Chromium, the same probe for both (see bench_html.py): first paint after
   the SVG's load event (aiflame's script also fits every label to its frame then), and
   click to zoom on the same function's frame. Medians of --loads loads.

FlameGraph is not part of aiflame: fetch it into /tmp and pass --flamegraph.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_html import CHROMEDRIVER, CHROMIUM, CLICK_SVG, PROBE, ROOT, SVG_TARGET, median, timed

# The widest frame three rows above "all" in flamegraph.pl's SVG: the zoom target of both.
TARGET_NAME = """
const groups = [...document.querySelectorAll("#frames > g")];
const rectOf = (g) => g.querySelector("rect");
const all = groups.find((g) => g.querySelector("title").textContent.startsWith("all ("));
const y = parseFloat(rectOf(all).getAttribute("y")) - 3 * 16;
let best = null, bestW = -1;
for (const g of groups) {
  const r = rectOf(g);
  if (Math.abs(parseFloat(r.getAttribute("y")) - y) > 0.5) continue;
  const w = parseFloat(r.getAttribute("width"));
  if (w > bestW) { best = g; bestW = w; }
}
const t = best.querySelector("title").textContent;
return t.slice(0, t.lastIndexOf(" ("));
"""


def build(args: argparse.Namespace, ours: Path, theirs: Path) -> dict:
    r: dict = {k: [] for k in ("ours_s", "ours_cpu", "ours_rss", "pl_s", "pl_cpu", "pl_rss")}
    for _ in range(args.repeat):
        cmd = [sys.executable, "-m", "aiflame", "flamegraph", args.input, "-o", str(ours)]
        wall, cpu, rss = timed(cmd)
        r["ours_s"].append(wall)
        r["ours_cpu"].append(cpu)
        r["ours_rss"].append(rss)
        print(f"  aiflame -o graph.svg: {wall:.2f} s wall, {cpu:.2f} s CPU", flush=True)
        wall, cpu, rss = timed(["perl", args.flamegraph, args.input], theirs)
        r["pl_s"].append(wall)
        r["pl_cpu"].append(cpu)
        r["pl_rss"].append(rss)
        print(f"  flamegraph.pl:        {wall:.2f} s wall, {cpu:.2f} s CPU", flush=True)
    return r


def frames_in(svg: Path) -> int:
    text = svg.read_text(encoding="utf-8")
    return len(re.findall(r"<g ?>\s*<title>", text)) - 1  # minus "all"


def browser(args: argparse.Namespace, ours: Path, theirs: Path) -> dict:
    import os

    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--window-size=1400,1000", "--force-device-scale-factor=1"):  # fmt: skip
        options.add_argument(arg)
    drv = webdriver.Chrome(service=Service(CHROMEDRIVER, log_output=os.devnull), options=options)
    drv.set_script_timeout(120)
    drv.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": PROBE})
    fp_wait = "const done = arguments[arguments.length - 1]; window.__fp.then(done);"
    out: dict = {"ours_fp": [], "ours_zoom": [], "pl_fp": [], "pl_zoom": []}
    try:
        drv.get(theirs.resolve().as_uri())
        out["target"] = drv.execute_script(TARGET_NAME)
        for _ in range(args.loads):
            for key, svg in (("ours", ours), ("pl", theirs)):
                drv.get(svg.resolve().as_uri())
                out[f"{key}_fp"].append(drv.execute_async_script(fp_wait))
                assert drv.execute_script(SVG_TARGET, out["target"]) > 0
                ms, zoomed = drv.execute_async_script(CLICK_SVG)
                assert zoomed > 0, f"{svg.name} did not zoom"
                out[f"{key}_zoom"].append(ms)
            last = {k: v[-1] for k, v in out.items() if isinstance(v, list)}
            print(f"  load: aiflame {last['ours_fp']:.0f} ms, zoom {last['ours_zoom']:.0f} ms;"
                  f" flamegraph.pl {last['pl_fp']:.0f} ms, zoom {last['pl_zoom']:.0f} ms",
                  flush=True)  # fmt: skip
    finally:
        drv.quit()
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--input", default=str(ROOT / "bench-data/folded-1M-200k.txt"))
    p.add_argument("--flamegraph", default="/tmp/FlameGraph/flamegraph.pl")
    p.add_argument("--out", default=str(ROOT / "bench-data/svg-bench"))
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--loads", type=int, default=5)
    args = p.parse_args()
    for need in (args.input, args.flamegraph):
        if not Path(need).exists():
            sys.exit(f"{need}: missing (see the docstring)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ours, theirs = out / "aiflame.svg", out / "flamegraph.svg"
    r = build(args, ours, theirs)
    r.update(browser(args, ours, theirs))
    m = {k: median(v) for k, v in r.items() if isinstance(v, list)}
    print(
        "\n| measure | aiflame (SVG) | flamegraph.pl (SVG) |\n|---|---|---|\n"
        f"| build, wall (median of {args.repeat}) | {m['ours_s']:.2f} s | {m['pl_s']:.2f} s |\n"
        f"| build, CPU (user + sys) | {m['ours_cpu']:.2f} s | {m['pl_cpu']:.2f} s |\n"
        f"| build, peak RSS | {m['ours_rss']:.0f} MiB | {m['pl_rss']:.0f} MiB |\n"
        f"| file | {ours.stat().st_size / 1e6:.2f} MB, {frames_in(ours):,} frames | "
        f"{theirs.stat().st_size / 1e6:.2f} MB, {frames_in(theirs):,} frames |\n"
        f"| first paint in Chromium (median of {args.loads}) | {m['ours_fp']:.0f} ms | "
        f"{m['pl_fp']:.0f} ms |\n"
        f"| click to zoom ({r['target']}) | {m['ours_zoom']:.0f} ms | {m['pl_zoom']:.0f} ms |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
