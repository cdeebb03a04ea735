"""Analyze GPU timeline traces (PyTorch profiler/Kineto, Nsight Systems exports, Chrome
traces): per rank the GPU time breakdown (computation, communication, memcpy, exposed
communication/memcpy, idle, with AMD TraceLens' definitions), what the CPU did while the
GPU was idle, top kernels, ops and op categories, GEMM FLOPs/bytes/TFLOP/s per shape and
findings ranked by the GPU time a fix can win; as a terminal report, JSON (--json) and an
HTML report (-o)."""

from __future__ import annotations

import argparse

from aiflame.analysis import read
from aiflame.analysis.report import analyze
from aiflame.analysis.schema import Report, to_json
from aiflame.cli.analyze_flags import add_efficiency_flags, efficiency_options
from aiflame.cli.analyze_output import write_html_report
from aiflame.cli.browser import add_open, check_open, open_page
from aiflame.cli.common import add_module_options, module_options, output_format, write_output
from aiflame.errors import AiflameError
from aiflame.render import jsonsafe
from aiflame.render.analyze_terminal import render_terminal

HELP = "GPU time breakdown, idle causes, kernels/ops and findings of GPU traces"


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "traces",
        nargs="+",
        metavar="TRACE",
        help="PyTorch profiler trace (.json or .json.gz), a directory of them (one per rank), "
        "an Nsight Systems SQLite export (.sqlite) or a Chrome trace; GPU PC samples "
        "(HPCToolkit, Nsight Compute, rocprofv3, CUPTI dumps, iaprof) for the stall analysis",
    )
    p.add_argument("--json", metavar="OUT", help="write the report as JSON ('-': stdout)")
    p.add_argument(
        "-o",
        "--output",
        metavar="HTML",
        help="write the HTML report (and its flame graph page, NAME.flame.html, beside it)",
    )
    p.add_argument(
        "--capture-trace",
        metavar="FILE",
        help="the trace of the CUDA/HIP graph capture (vLLM, SGLang write one): replayed "
        "kernels are attributed to the ops and Python frames that captured them",
    )
    p.add_argument("--top", type=int, default=10, metavar="N", help="rows per table (10)")
    p.add_argument(
        "--rank",
        action="append",
        metavar="N",
        help="of several traces, also print this rank's full report (a rank number or file "
        "name; repeatable; 'all' for every rank): by default the job and a row per rank",
    )
    add_efficiency_flags(p)
    add_open(p)
    add_module_options(p)  # the flame graph page of -o


def run(args: argparse.Namespace) -> int:
    from aiflame.analysis.gpu_inputs import split_inputs, stall_report
    from aiflame.render.gpu_stalls_text import format_report
    from aiflame.sources.registry import expand_inputs, load_trace_input

    check_open(args, args.output, is_page=True)
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
            text = jsonsafe.dumps({"gpu_stalls": stalls.to_json()}, indent=1)
            if args.json == "-":
                print(text)
                return 0
            write_output(args.json, text + "\n")
        print(format_report(stalls.to_json()), end="")
        return 0
    options = efficiency_options(args)
    flame = module_options(args)
    capture = load_trace_input(args.capture_trace, kernel_args=True) if args.capture_trace else None
    # A directory stands for its traces (one per rank, as torch's profiler writes them).
    inputs = [read(path, capture, **flame) for path in traces]
    report = analyze(
        [i.trace for i in inputs], options=options, captures=[args.capture_trace] * len(inputs)
    )
    if stalls is not None:
        report.gpu_stalls = stalls.to_json()
    if args.output:
        write_html_report(args.output, inputs, report)
    if args.json:
        text = to_json(report)
        if args.json == "-":
            print(text)
        else:
            write_output(args.json, text + "\n")
    if args.rank and "all" not in args.rank and len(report.ranks) > 1:
        _check_ranks(report, args.rank)
    if args.json != "-":
        render_terminal(report, args.top, detail=args.rank)
        if stalls is not None:
            print(format_report(stalls.to_json()), end="")
    if args.open:
        open_page(args.output)
    return 0


def _check_ranks(report: Report, wanted: list[str]) -> None:
    from aiflame.render.analyze_terminal import chosen_ranks

    for w in wanted:
        if not chosen_ranks(report, [w]):
            names = ", ".join(r.rank or r.name for r in report.ranks)
            raise AiflameError(f"--rank {w}: no such rank among the traces ({names})")
