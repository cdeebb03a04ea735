"""Convert profiles between formats (folded, pprof, speedscope, html, svg), and traces to a
Chrome / Perfetto trace (-f chrome: the timeline of PyTorch profiler, Nsight Systems and
Chrome traces, or of profiles with sample times, launches linked to their GPU work by
flows; .gz output is gzip-compressed)."""

from __future__ import annotations

import argparse
import os

from aiflame.cli.browser import add_open, check_open, open_page
from aiflame.cli.common import (
    add_inputs,
    add_metric,
    add_output,
    add_trace_options,
    load_inputs,
    output_format,
    perf_load_options,
    trace_load_options,
    write_output,
)
from aiflame.errors import AiflameError
from aiflame.render.registry import FORMATS, TIMELINE_FORMATS, render, render_timeline

HELP = "convert profiles to folded, pprof, speedscope, html or svg, and traces to Chrome/Perfetto"


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
    add_open(p)


def run(args: argparse.Namespace) -> int:
    fmt = output_format(args.output, "", FORMATS, args.to, flag=True)
    if not fmt:
        raise AiflameError(
            f"cannot tell the output format from '{args.output}'; give -f {'|'.join(FORMATS)}"
        )
    check_open(args, args.output, is_page=fmt in ("html", "svg"))
    if fmt in TIMELINE_FORMATS:
        return write_timeline(args, fmt)
    if fmt == "folded" and is_plain_perf_collapse(args):
        from aiflame.sources.inputs import Input
        from aiflame.sources.perf.importer import folded_chunks

        write_output(args.output, folded_chunks(Input(args.inputs[0]), **perf_load_options(args)))
        return 0
    profile = load_inputs(args)
    write_output(args.output, render(profile, fmt, args.metric, args.title))
    if args.open:
        open_page(args.output)
    return 0


def write_timeline(args: argparse.Namespace, fmt: str) -> int:
    """A trace's own timeline (or a timed profile's) as a Chrome / Perfetto trace."""
    from aiflame.sources import load_timelines

    if args.group_by:
        raise AiflameError(
            f"--group-by does not apply to -f {fmt}: the trace keeps its own processes and threads"
        )
    options = {k: v for k, v in trace_load_options(args).items() if k == "kernel_names"}
    timeline = load_timelines(
        args.inputs, args.input_format, metric=args.metric, **options, **perf_load_options(args)
    )
    if not len(timeline):
        raise AiflameError(f"{', '.join(args.inputs)}: no slices to write")
    write_output(args.output, render_timeline(timeline, fmt, args.output))
    return 0


def is_plain_perf_collapse(args: argparse.Namespace) -> bool:
    """One ``perf script`` file to folded text, nothing else asked: stackcollapse-perf.pl's
    job, done straight from the collapsed stacks (same bytes, no Profile built)."""
    from aiflame.sources.inputs import Input
    from aiflame.sources.perf.importer import sniff

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
