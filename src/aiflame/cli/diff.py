"""Differential flame graph of two profiles: growth in red, shrinkage in blue.

``-o x.html`` writes the interactive page; ``-o x.folded`` (or ``.collapsed``, ``.txt``,
``-``) writes ``stack base test`` lines as FlameGraph's difffolded.pl does, for
``flamegraph.pl`` or ``inferno-flamegraph``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, cast

import numpy as np

from aiflame.cli.browser import add_open, check_open, open_page
from aiflame.cli.common import (
    add_metric,
    add_module_options,
    add_output,
    trace_load_options,
    write_output,
)
from aiflame.errors import AiflameError
from aiflame.model import Profile
from aiflame.model.profile import value_problem
from aiflame.render.titles import diff_names, file_stem

HELP = "compare two profiles as a differential flame graph"

OUTPUTS = ("html", "folded")


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "base", metavar="BASE", help="the 'before' profile (a directory: its traces, merged)"
    )
    p.add_argument(
        "test", metavar="TEST", help="the 'after' profile (a directory: its traces, merged)"
    )
    add_output(p, help="the HTML file to write (or .folded for 'stack base test' lines)")
    p.add_argument(
        "-f",
        "--to",
        dest="to",
        choices=OUTPUTS,
        help="output format (default: from -o's extension)",
    )
    add_metric(p)
    p.add_argument(
        "-n",
        "--normalize",
        action="store_true",
        help="scale BASE to TEST's total first, to compare shapes rather than sizes",
    )
    p.add_argument(
        "-s",
        "--strip-hex",
        action="store_true",
        help="match frames with hex numbers (addresses such as 0x7f3a) replaced by 0x...",
    )
    p.add_argument(
        "--level",
        choices=("auto", "full", "ops"),
        default="auto",
        help="'ops' compares GPU traces at the level of Python functions and ops (kernels and "
        "runtime calls folded into the op that launched them, Python line numbers dropped, "
        "so runs on other GPUs and library versions line up); 'auto' (default) does so "
        "when the inputs have GPU frames",
    )
    p.add_argument("--title", help="page title (default: what each input is, 'A vs B')")
    p.add_argument(
        "--format", dest="input_format", metavar="FMT", help="input format of both profiles"
    )
    add_open(p)
    add_module_options(p)


def output_format(args: argparse.Namespace) -> str:
    from aiflame.cli.common import output_format as by_extension

    if args.to:
        return str(args.to)
    if args.output == "-":
        return "folded"
    fmt = by_extension(args.output, "", OUTPUTS, flag=True)
    if not fmt:
        raise AiflameError(
            f"cannot tell the output format from '{args.output}': "
            "name it .html or .folded, or give -f html|folded"
        )
    return fmt


def both_folded(args: argparse.Namespace) -> bool:
    """True when both inputs are folded files, which have a faster path (same results)."""
    from aiflame.sources.inputs import Input
    from aiflame.sources.registry import detect

    if args.metric not in (None, "samples") or "-" in (args.base, args.test):
        return False  # a metric folded files lack fails on the general path, with its message
    if any(Path(p).is_dir() for p in (args.base, args.test)):
        return False  # several files merged: the general path
    if args.input_format:
        return bool(args.input_format == "folded")
    return all(detect(Input(path)).FORMAT == "folded" for path in (args.base, args.test))


def run(args: argparse.Namespace) -> int:
    fmt = output_format(args)  # before the (slow) loading, so a typo fails at once
    check_open(args, args.output, is_page=fmt == "html")
    if fmt == "folded" and both_folded(args):
        from aiflame.render.folded import format_diff_lines
        from aiflame.sources.folded.diff import read_pair

        pair = read_pair(args.base, args.test, args.strip_hex)
        stacks, base, test = pair.columns(args.normalize)
        if not (np.any(base) or np.any(test)):
            raise AiflameError(nothing_to_compare(args))
        problem = value_problem(np.column_stack([base, test]), ["base", "test"])
        if problem:
            raise AiflameError(f"{args.base} and {args.test}: {problem}")
        write_output(args.output, format_diff_lines(stacks, base, test, args.normalize))
    elif fmt == "folded":
        from aiflame.render.folded import render_diff_folded

        write_output(args.output, render_diff_folded(diff_of(args)))
    else:
        from aiflame.render.html import render_html

        diff = diff_of(args)
        named = cast("dict[str, Any]", diff.meta["diff"])
        title = args.title or named["title"]
        subtitle = f"base: {args.base} · test: {args.test}"
        write_output(args.output, render_html(diff, title=title, subtitle=subtitle))
    if args.output != "-":
        print(f"wrote {args.output}", file=sys.stderr)
    if args.open:
        open_page(args.output)
    return 0


def diff_of(args: argparse.Namespace) -> Profile:
    """The differential profile; ``meta["diff"]`` also names the inputs (for titles)."""
    if both_folded(args):
        from aiflame.sources.folded.diff import load_diff

        diff = load_diff(args.base, args.test, args.normalize, args.strip_hex)
        names = [file_stem(args.base), file_stem(args.test)]
        if names[0] == names[1]:
            names = [args.base, args.test]
        title = f"{names[0]} vs {names[1]}"
    else:
        from aiflame.analysis.compare import diff_inputs

        base, test, diff = diff_inputs(
            args.base,
            args.test,
            metric=args.metric,
            normalize=args.normalize,
            strip_hex=args.strip_hex,
            level=args.level,
            input_format=args.input_format,
            **trace_load_options(args),
        )
        title, *names = diff_names(base, test)
    if diff.is_empty():
        raise AiflameError(nothing_to_compare(args))
    named = cast("dict[str, Any]", diff.meta["diff"])
    named.update(base_name=names[0], test_name=names[1], title=title)
    problem = diff.value_problem()  # e.g. --normalize scaling a tiny base beyond float range
    if problem:
        raise AiflameError(f"{args.base} and {args.test}: {problem}")
    return diff


def nothing_to_compare(args: argparse.Namespace) -> str:
    return f"{args.base} and {args.test}: no samples with a value in either"
