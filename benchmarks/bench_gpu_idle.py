"""What the gpu-idle metric and the analysis of idle causes cost, against the version before.

    python benchmarks/bench_gpu_idle.py --base OLD_SRC [--repeat 3] [TRACE...]

``OLD_SRC``: the ``src`` directory of the version to compare with (``git archive REV src |
tar -x -C DIR``). For each trace (default: the large trace of the shared data and the
8-rank DLRM rank of the test data), whole commands in fresh processes, run alternately:
``aiflame flamegraph TRACE -o PAGE`` (the flame graph, now with ``gpu-idle``: the gaps of
the GPU timeline charged to the CPU slices, the same charges as ``analyze``) and ``aiflame
analyze TRACE --json OUT`` (now reading the ``[memory]`` events too, for the frees of host
memory). Wall and CPU seconds are medians, memory the peak RSS (``bench_kineto.run``).
No other tool draws GPU idle time by CPU stack; the peer for the analysis is HTA
(``bench_analyze.py``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from bench_kineto import LARGE, ROOT, measure

DLRM = ROOT / "tests" / "data" / "kineto" / "hta" / "trace_diff" / "control" / "control.json.gz"


def command(src: str, *args: str) -> list[str]:
    code = "import sys; from aiflame.cli.main import main; sys.exit(main(sys.argv[1:]))"
    return ["env", f"PYTHONPATH={src}", sys.executable, "-c", code, *args]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("traces", nargs="*", default=[str(LARGE), str(DLRM)])
    ap.add_argument("--base", required=True, help="src directory of the version before")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    new = str(ROOT / "src")
    with tempfile.TemporaryDirectory() as tmp:
        for trace in args.traces:
            name = Path(trace).name
            cmds = {}
            for label, src in (("this", new), ("before", os.path.abspath(args.base))):
                page = os.path.join(tmp, f"{label}.html")
                out = os.path.join(tmp, f"{label}.json")
                cmds[f"flamegraph {label}"] = command(src, "flamegraph", trace, "-o", page)
                cmds[f"analyze {label}"] = command(src, "analyze", trace, "--json", out)
            results = measure(cmds, args.repeat)
            print(f"\n{name}")
            print(f"{'command':<22} {'wall s':>8} {'CPU s':>8} {'peak MiB':>9}")
            for k, (wall, cpu, rss) in results.items():
                print(f"{k:<22} {wall:8.2f} {cpu:8.2f} {rss:9.0f}")
            for what in ("flamegraph", "analyze"):
                a, b = results[f"{what} this"][1], results[f"{what} before"][1]
                print(f"{what}: this / before CPU = {a / b:.2f}")


if __name__ == "__main__":
    main()
