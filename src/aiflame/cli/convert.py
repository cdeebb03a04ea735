"""Convert profiles between formats (folded, pprof, speedscope, html, svg)."""

from __future__ import annotations

import argparse
import os

from aiflame.cli.common import (
    add_inputs,
    add_metric,
    add_output,
    add_trace_options,
    load_inputs,
    output_format,
    perf_load_options,
    write_output,
)
from aiflame.errors import AiflameError
from aiflame.render.registry import FORMATS, render

HELP = "convert profiles to folded, pprof, speedscope, html or svg"


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
    fmt = output_format(args.output, "", FORMATS, args.to, flag=True)
    if not fmt:
        raise AiflameError(
            f"cannot tell the output format from '{args.output}'; give -f {'|'.join(FORMATS)}"
        )
    if fmt == "folded" and is_plain_perf_collapse(args):
        from aiflame.sources.inputs import Input
        from aiflame.sources.perf_script import folded_chunks

        write_output(args.output, folded_chunks(Input(args.inputs[0]), **perf_load_options(args)))
        return 0
    profile = load_inputs(args)
    write_output(args.output, render(profile, fmt, args.metric, args.title))
    return 0


def is_plain_perf_collapse(args: argparse.Namespace) -> bool:
    """One ``perf script`` file to folded text, nothing else asked: stackcollapse-perf.pl's
    job, done straight from the collapsed stacks (same bytes, no Profile built)."""
    from aiflame.sources.inputs import Input
    from aiflame.sources.perf_script import sniff

    if len(args.inputs) != 1 or not os.path.isfile(args.inputs[0]):
        return False  # stdin, directories, several inputs: the general path
    if args.metric or args.group_by:
        return False
    if args.input_format:
        return bool(args.input_format == "perf-script")
    # perf script text, sniffed without importing every importer (the registry checks
    # binary and JSON formats first; none of them starts like this).
    path = args.inputs[0]
    head = Input(path).head()
    return not head.startswith(_NOT_TEXT) and sniff(head, path)


# Starts of the formats the registry tries before perf script: pickle, gzip, JSON, SQLite.
_NOT_TEXT = (b"\x80", b"\x1f\x8b", b"{", b"[", b"SQLite format 3")
