"""Analyze Kineto (PyTorch profiler) traces and Nsight Systems exports: per rank GPU time
breakdown (computation, communication, memcpy, exposed communication/memcpy, idle, with AMD
TraceLens' definitions), top kernels and ops, short kernels, GEMM FLOPs/bytes/TFLOP/s per
shape and findings; as a terminal report, JSON (--json) and an HTML report (-o)."""

from __future__ import annotations

import argparse

from aiflame.analysis.report import analyze
from aiflame.cli.analyze_flags import add_efficiency_flags, efficiency_options
from aiflame.cli.analyze_output import add_source_notes, load_input, write_html_report
from aiflame.cli.common import write_output
from aiflame.render import jsonsafe
from aiflame.render.analyze_terminal import render_terminal

HELP = "time breakdown, top kernels/ops, efficiency and findings of Kineto traces or nsys exports"


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "traces",
        nargs="+",
        metavar="TRACE",
        help="Kineto trace (.json or .json.gz), a directory of them (one per rank), or an "
        "Nsight Systems SQLite export (.sqlite)",
    )
    p.add_argument("--json", metavar="OUT", help="write the report as JSON ('-': stdout)")
    p.add_argument(
        "-o",
        "--output",
        metavar="HTML",
        help="write the HTML report (and its flame graph page, NAME.flame.html, beside it)",
    )
    p.add_argument("--top", type=int, default=10, metavar="N", help="rows per table (10)")
    add_efficiency_flags(p)


def run(args: argparse.Namespace) -> int:
    from aiflame.sources.registry import expand_inputs

    # A directory stands for its traces (one per rank, as torch's profiler writes them).
    inputs = [load_input(path) for path in expand_inputs(args.traces)]
    report = analyze([i.trace for i in inputs], options=efficiency_options(args))
    for i, r in zip(inputs, report["ranks"], strict=True):
        add_source_notes(i, r)
    if args.output:
        write_html_report(args.output, inputs, report)
    if args.json:
        text = jsonsafe.dumps(report, indent=1)  # NaN as null: the file stays JSON
        if args.json == "-":
            print(text)
            return 0
        write_output(args.json, text + "\n")
    render_terminal(report, args.top)
    return 0
