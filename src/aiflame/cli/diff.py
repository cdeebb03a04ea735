"""Differential flame graph of two profiles: growth in red, shrinkage in blue."""

from __future__ import annotations

import argparse
import sys

from aiflame.cli.common import add_metric, add_output, write_output
from aiflame.sources import load

HELP = "compare two profiles as a differential flame graph"


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("base", metavar="BASE", help="the 'before' profile")
    p.add_argument("test", metavar="TEST", help="the 'after' profile")
    add_output(p, help="the HTML file to write (or .folded for 'stack base test' lines)")
    add_metric(p)
    p.add_argument(
        "-n",
        "--normalize",
        action="store_true",
        help="scale BASE to TEST's total first, to compare shapes rather than sizes",
    )
    p.add_argument("--title", help="page title")
    p.add_argument(
        "--format", dest="input_format", metavar="FMT", help="input format of both profiles"
    )


def run(args: argparse.Namespace) -> int:
    from aiflame.render.registry import format_for_path
    from aiflame.transforms.diff import diff_profiles

    base = load(args.base, args.input_format)
    test = load(args.test, args.input_format)
    diff = diff_profiles(base, test, metric=args.metric, normalize=args.normalize)
    if format_for_path(args.output) == "folded" or args.output == "-":
        from aiflame.render.folded import render_diff_folded

        write_output(args.output, render_diff_folded(diff))
    else:
        from aiflame.render.html import render_html

        write_output(args.output, render_html(diff, title=args.title or "Differential flame graph"))
    if args.output != "-":
        print(f"wrote {args.output}", file=sys.stderr)
    return 0
