"""Side by side: aiflame analyze vs HTA, temporal breakdown and idle-time classification.

    python benchmarks/compare_hta_analyze.py EXPECTED.json BASE_DIR

EXPECTED.json is the output of ``hta_analyze_reference.py`` (keys: trace paths relative to
BASE_DIR). Prints a Markdown table per trace: HTA's number, aiflame's number computed with
HTA's definitions (``analysis/hta_compat.py``, after HTA's last-step filter), and
aiflame's own device-level idle classification (``analysis/idle.py``). docs/analyze.md
holds its output for the test traces.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from aiflame.analysis import hta_compat, idle
from aiflame.sources.registry import load_trace


def rows(path: Path, ref: dict) -> list[tuple[str, float, float]]:
    t = load_trace(str(path))
    ours = t.select_gpu(hta_compat.step_filter(t))
    out = []
    temporal = hta_compat.temporal_breakdown(ours) or {}
    for k, v in ref["temporal"].items():
        out.append((f"temporal {k}", v, temporal.get(k, float("nan"))))
    streams = {r["stream"]: r for r in hta_compat.idle_by_stream(ours)}
    for s, cats in sorted(ref["idle_by_stream"].items()):
        for k, v in sorted(cats.items()):
            out.append((f"stream {s} {k}", v, streams.get(s, {}).get(k, float("nan"))))
    return out


def main(expected: str, base: str) -> None:
    ref = json.loads(Path(expected).read_text())
    for name, numbers in ref.items():
        path = Path(base) / name
        print(f"\n`{name}`\n")
        print("| quantity | HTA (us) | aiflame, HTA definitions (us) | difference |")
        print("|---|---:|---:|---:|")
        for label, theirs, mine in rows(path, numbers):
            diff = mine - theirs
            print(f"| {label} | {theirs:,.3f} | {mine:,.3f} | {diff:+.3f} |")
        c = idle.classify(load_trace(str(path)))
        cats = ", ".join(f"{k} {v['time_us']:,.1f}" for k, v in c["categories"].items())
        print(f"\naiflame device-level idle ({c['total_us']:,.1f} us): {cats}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
