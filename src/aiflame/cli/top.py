"""The functions that cost the most in a profile or trace, by self or total value of a metric
(as ``go tool pprof -top`` lists them): CPU samples, a trace's GPU time, bytes of memory.
``--kind gpu-kernel`` lists GPU kernels only; ``--json`` writes the table as JSON."""

from __future__ import annotations

import argparse

from aiflame.analysis.hotspots import Hotspots, top_functions
from aiflame.cli.common import add_inputs, add_metric, add_trace_options, load_inputs
from aiflame.errors import AiflameError
from aiflame.model import FrameKind
from aiflame.render import jsonsafe

HELP = "the costliest functions of a profile or trace (self and total of a metric)"
KINDS = tuple(k.slug for k in FrameKind if k != FrameKind.UNKNOWN)


def configure(p: argparse.ArgumentParser) -> None:
    add_inputs(p)
    add_metric(p)
    p.add_argument(
        "--by", choices=("self", "total"), default="self", help="order by (default: self)"
    )
    p.add_argument(
        "-n", "--top", type=int, default=20, metavar="N", help="rows (default 20, at most 1000)"
    )
    p.add_argument(
        "--kind",
        action="append",
        choices=KINDS,
        metavar="KIND",
        help="only frames of this kind (python, cpp, gpu-kernel, ...); repeatable",
    )
    p.add_argument("--json", action="store_true", help="write the table as JSON")
    add_trace_options(p)


def kinds_of(names: list[str] | None) -> frozenset[FrameKind] | None:
    return frozenset(FrameKind.from_slug(k) for k in names) if names else None


def format_table(h: Hotspots, width: int = 100) -> str:
    from aiflame.render.elide import table_labels
    from aiflame.render.units import format_value
    from aiflame.render.visible import visible

    lines = [
        f"{h.metric} [{h.unit}]: total {format_value(h.total, h.unit)} over "
        f"{h.samples:,} samples; {h.distinct:,} functions, by {h.by}"
    ]
    if not h.functions:
        return lines[0] + "\n"
    t = h.total or 1.0
    lines.append(f"{'self':>12} {'self%':>6} {'total':>12} {'total%':>6}  function")
    names = table_labels([visible(f.name) for f in h.functions], max(20, width - 42))
    for f, name in zip(h.functions, names, strict=True):
        lines.append(
            f"{format_value(f.self_value, h.unit):>12} {f.self_value / t:6.1%} "
            f"{format_value(f.total_value, h.unit):>12} {f.total_value / t:6.1%}  {name}"
        )
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    from aiflame.cli.output import write_stdout

    if not 1 <= args.top <= 1000:
        raise AiflameError("--top: from 1 to 1000 rows")
    profile = load_inputs(args)
    h = top_functions(profile, args.metric, args.by, args.top, kinds_of(args.kind))
    if args.json:
        write_stdout(jsonsafe.dumps(h.to_json(), indent=1) + "\n")
    else:
        write_stdout(format_table(h))
    return 0
