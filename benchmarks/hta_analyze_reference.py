"""HTA's temporal breakdown and idle-time breakdown of Kineto traces, as JSON.

Runs Meta's HTA (``holistictraceanalysis``; ``pip install '.[compare]'``) on each trace,
one trace per rank directory, with ``HTA_DISABLE_NS_ROUNDING=1`` so that it keeps the
trace's fractional microseconds (by default HTA rounds every event to whole microseconds,
start up and end down), and prints one JSON object per trace:

    python benchmarks/hta_analyze_reference.py TRACE... > expected.json

``{"<TRACE as given>": {"temporal": {idle_us, compute_us, non_compute_us, total_us},
"idle_by_stream": {stream: {host_wait_us, kernel_wait_us, other_us}}}}``.
tests/data/kineto/hta_expected/analyze.json holds its output for the test traces;
tests/unit/test_analyze_hta.py compares aiflame's numbers with it (and with HTA itself when
HTA is installed).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import tempfile
import warnings
from typing import Any


def hta_numbers(trace: str) -> dict[str, Any]:
    """HTA's numbers for one trace file (copied alone into a temporary directory)."""
    os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    from hta.trace_analysis import TraceAnalysis

    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(trace, tmp)
        ta = TraceAnalysis(trace_dir=tmp)
        (rank,) = ta.t.get_ranks()
        temporal = ta.get_temporal_breakdown(visualize=False).iloc[0]
        idle, _ = ta.get_idle_time_breakdown(ranks=[rank], visualize=False)
    streams: dict[str, dict[str, float]] = {}
    for row in idle.itertuples():
        entry = streams.setdefault(str(row.stream), {})
        entry[f"{row.idle_category}_us"] = float(row.idle_time)
    return {
        "temporal": {
            "idle_us": float(temporal["idle_time(us)"]),
            "compute_us": float(temporal["compute_time(us)"]),
            "non_compute_us": float(temporal["non_compute_time(us)"]),
            "total_us": float(temporal["kernel_time(us)"]),
        },
        "idle_by_stream": streams,
    }


def main(traces: list[str]) -> None:
    print(json.dumps({t: hta_numbers(t) for t in traces}, indent=1, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1:])
