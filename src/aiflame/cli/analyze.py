"""Analyze Kineto (PyTorch profiler) traces and Nsight Systems exports: per rank GPU time
breakdown (computation, communication, memcpy, exposed communication/memcpy, idle, with AMD
TraceLens' definitions), top kernels and ops, short kernels, GEMM FLOPs/bytes/TFLOP/s per
shape and findings; as a terminal report, JSON (--json) and an HTML report (-o)."""

from __future__ import annotations

import argparse
import json

from aiflame.analysis.report import analyze
from aiflame.cli.analyze_flags import add_efficiency_flags, efficiency_options
from aiflame.cli.analyze_output import add_source_notes, load_input, write_html_report
from aiflame.cli.browser import add_open, check_open, open_page
from aiflame.cli.common import add_module_options, module_options, output_format, write_output
from aiflame.errors import AiflameError
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
    add_open(p)
    add_module_options(p)  # the flame graph page of -o


def run(args: argparse.Namespace) -> int:
    from aiflame.cli.analyze_gpu import split_inputs, stall_report
    from aiflame.render.gpu_stalls_text import format_report
    from aiflame.sources.registry import expand_inputs

    check_open(args, args.output, is_page=True)
    # A directory stands for its traces (one per rank, as torch's profiler writes them).
    if args.output:  # before the (slow) loading: a wrong name fails at once
        if args.output.lower().endswith(".json"):
            raise AiflameError(f"{args.output}: -o writes the HTML report; use --json for JSON")
        output_format(args.output, "html", ("html",))
    traces, samples = split_inputs(expand_inputs(args.traces))
    stalls = stall_report(samples, args.top) if samples else None
    if not traces:  # GPU PC samples only: the stall analysis is the report
        if stalls is None:
            raise AiflameError("no GPU PC samples in " + ", ".join(samples))
        if args.output:
            raise AiflameError(
                f"{args.output}: the HTML report is of traces; the flame graph of GPU PC "
                "samples is 'aiflame flamegraph'"
            )
        if args.json:
            text = json.dumps({"gpu_stalls": stalls.to_json()}, indent=1)
            if args.json == "-":
                print(text)
                return 0
            write_output(args.json, text + "\n")
        print(format_report(stalls.to_json()), end="")
        return 0
    flame = module_options(args)
    inputs = [load_input(path, **flame) for path in traces]
    report = analyze([i.trace for i in inputs], options=efficiency_options(args))
    for i, r in zip(inputs, report["ranks"], strict=True):
        add_source_notes(i, r)
    if stalls is not None:
        report["gpu_stalls"] = stalls.to_json()
    if args.output:
        write_html_report(args.output, inputs, report)
    if args.json:
        text = json.dumps(report, indent=1)
        if args.json == "-":
            print(text)
        else:
            write_output(args.json, text + "\n")
    if args.json != "-":
        render_terminal(report, args.top)
        if stalls is not None:
            print(format_report(stalls.to_json()), end="")
    if args.open:
        open_page(args.output)
    return 0
