"""Write an interactive, self-contained HTML flame graph of one or more profiles."""

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
    write_output,
)

HELP = "write an interactive HTML flame graph"


def configure(p: argparse.ArgumentParser) -> None:
    add_inputs(p)
    add_output(p, help="the HTML file to write")
    add_metric(p)
    add_trace_options(p)
    p.add_argument("--title", help="page title (default: the input's name)")
    p.add_argument("--subtitle", help="a line under the title")
    p.add_argument(
        "--inverted", action="store_true", help="icicle view: root at the top (toggle in the page)"
    )
    add_open(p)


def run(args: argparse.Namespace) -> int:
    from aiflame.render.html import render_html

    check_open(args, args.output, is_page=True)
    profile = load_inputs(args)
    html = render_html(
        profile,
        title=args.title,
        subtitle=args.subtitle,
        metric=args.metric,
        inverted=args.inverted,
    )
    write_output(args.output, html)
    if args.output != "-":
        print(f"wrote {args.output}", file=sys.stderr)
    if args.open:
        open_page(args.output)
    return 0
