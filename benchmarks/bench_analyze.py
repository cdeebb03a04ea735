"""``aiflame analyze`` against Meta HTA on the large trace, side by side.

    python benchmarks/bench_analyze.py [--repeat 3] [--hta-python PY]

aiflame: the whole command, ``aiflame analyze TRACE --json OUT`` (read, correlate, every
analysis and rule, the terminal report and the JSON). HTA (``holistictraceanalysis`` 0.5.0,
``pip install '.[compare]'`` or a virtualenv given with ``--hta-python``): load the same file
with ``TraceAnalysis`` and compute its temporal breakdown, idle-time breakdown and GPU kernel
breakdown (``get_temporal_breakdown``, ``get_idle_time_breakdown``,
``get_gpu_kernel_breakdown``, no plots). Both are whole commands in fresh processes, run
alternately; wall and CPU seconds are medians, memory the peak RSS of the process tree
(``bench_kineto.run``). Then HTA's numbers are printed beside aiflame's (HTA-compatible ones).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from bench_kineto import LARGE, measure

HTA_SCRIPT = """
import json, logging, sys, warnings
logging.disable(logging.WARNING)
warnings.filterwarnings("ignore")
from hta.trace_analysis import TraceAnalysis
ta = TraceAnalysis(trace_dir=sys.argv[1])
temporal = ta.get_temporal_breakdown(visualize=False)
idle, _ = ta.get_idle_time_breakdown(ranks=ta.t.get_ranks(), visualize=False)
kernels = ta.get_gpu_kernel_breakdown(visualize=False)
with open(sys.argv[2], "w") as f:
    json.dump({"temporal": temporal.to_dict("records"), "idle": idle.to_dict("records"),
               "kernel_types": kernels[0].to_dict("records")}, f, default=float)
"""


def stages(trace: str) -> dict[str, float]:
    """aiflame in this process: CPU seconds to read the trace and to analyze it."""
    from aiflame.analysis.report import analyze
    from aiflame.sources.registry import load_trace

    t0 = time.process_time()
    t = load_trace(trace)
    t1 = time.process_time()
    analyze([t])
    return {"read": t1 - t0, "analyze": time.process_time() - t1}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--hta-python", default=sys.executable)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "trace"
        d.mkdir()
        (d / LARGE.name).symlink_to(LARGE)
        script = Path(tmp) / "hta_run.py"
        script.write_text(HTA_SCRIPT)
        hta_out, ours_out = Path(tmp) / "hta.json", Path(tmp) / "aiflame.json"
        commands = {
            "aiflame analyze": [
                sys.executable, "-m", "aiflame", "analyze", str(LARGE), "--json", str(ours_out),
            ],
            "HTA temporal + idle + kernel breakdown": [
                args.hta_python, str(script), str(d), str(hta_out),
            ],
        }  # fmt: skip
        res = measure(commands, args.repeat)
        (a_wall, a_cpu, a_mem), (h_wall, h_cpu, h_mem) = res.values()
        print(f"trace: {LARGE.name} ({LARGE.stat().st_size / 2**20:.1f} MiB gzip)")
        print("| command | wall | CPU | peak memory |\n|---|---:|---:|---:|")
        for name, (wall, cpu, mem) in res.items():
            print(f"| {name} | {wall:.2f} s | {cpu:.2f} s | {mem:.0f} MiB |")
        print(
            f"\nHTA / aiflame: {h_wall / a_wall:.1f}x wall, {h_cpu / a_cpu:.1f}x CPU, "
            f"{h_mem / a_mem:.1f}x peak memory"
        )
        s = stages(str(LARGE))
        print(f"aiflame in-process CPU: read {s['read']:.2f} s, analyze {s['analyze']:.2f} s")
        hta = json.loads(hta_out.read_text())
        rank = json.loads(ours_out.read_text())["ranks"][0]
        print("\nHTA (default: events rounded to whole us) vs aiflame, HTA definitions:")
        print(" temporal HTA    ", hta["temporal"][0])
        print(" temporal aiflame", rank["hta_temporal_breakdown"])
        print(" idle HTA        ", hta["idle"])
        print(" idle aiflame    ", rank["idle_by_stream_hta"])
        print(" aiflame idle categories", {
            k: v["time_us"] for k, v in rank["idle"]["categories"].items()
        })  # fmt: skip


if __name__ == "__main__":
    main()
