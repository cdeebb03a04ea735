"""Convert profiles between formats (folded, pprof, speedscope, html)."""

from __future__ import annotations

import argparse

from aiflame.cli.common import (
    add_inputs,
    add_metric,
    add_output,
    add_trace_options,
    load_inputs,
    write_output,
)
from aiflame.errors import AiflameError
from aiflame.render.registry import FORMATS, format_for_path, render

HELP = "convert profiles to folded, pprof, speedscope or html"


def configure(p: argparse.ArgumentParser) -> None:
    add_inputs(p)
    add_output(p, help="output file ('-' for stdout)")
    p.add_argument(
        "-f",
        "--to",
        dest="to",
        choices=FORMATS,
        help="output format (default: from -o's extension)",
    )
    add_metric(p)
    add_trace_options(p)
    p.add_argument("--title", help="title of an html output")


def run(args: argparse.Namespace) -> int:
    fmt = args.to or format_for_path(args.output)
    if fmt is None:
        raise AiflameError(
            f"cannot tell the output format from '{args.output}'; give -f {'|'.join(FORMATS)}"
        )
    profile = load_inputs(args)
    write_output(args.output, render(profile, fmt, args.metric, args.title))
    return 0
