"""Write the flame graph of one or more profiles: an interactive, self-contained HTML page
(-o x.html), or a static SVG like FlameGraph's flamegraph.pl (-o x.svg: clickable to zoom,
searchable, for pasting into tickets and wikis)."""

from __future__ import annotations

import argparse
import sys

from aiflame.cli.browser import add_open, check_open, open_page
from aiflame.cli.common import (
    add_inputs,
    add_metric,
    add_output,
    add_trace_options,
    load_inputs,
    output_format,
    write_output,
)

HELP = "write a flame graph: interactive HTML page, or static SVG"
OUTPUTS = ("html", "svg")


def configure(p: argparse.ArgumentParser) -> None:
    add_inputs(p)
    add_output(p, help="the file to write: .html (interactive page) or .svg (static image)")
    p.add_argument(
        "-f",
        "--to",
        dest="to",
        choices=OUTPUTS,
        help="output format (default: from -o's extension; html without one)",
    )
    add_metric(p)
    add_trace_options(p)
    p.add_argument("--title", help="page title (default: the input's name)")
    p.add_argument("--subtitle", help="a line under the title")
    p.add_argument(
        "--inverted", action="store_true", help="icicle view: root at the top (toggle in the page)"
    )
    add_open(p)


def run(args: argparse.Namespace) -> int:
    # before the (slow) loading: a wrong name fails at once
    fmt = output_format(args.output, "html", OUTPUTS, args.to, flag=True)
    check_open(args, args.output, is_page=True)  # an SVG opens in a browser too
    profile = load_inputs(args)
    if fmt == "svg":
        from aiflame.render.svg import render_svg

        page = render_svg(
            profile,
            title=args.title,
            subtitle=args.subtitle,
            metric=args.metric,
            inverted=args.inverted,
        )
    else:
        from aiflame.render.html import render_html

        page = render_html(
            profile,
            title=args.title,
            subtitle=args.subtitle,
            metric=args.metric,
            inverted=args.inverted,
        )
    write_output(args.output, page)
    if args.output != "-":
        print(f"wrote {args.output}", file=sys.stderr)
    if args.open:
        open_page(args.output)
    return 0
