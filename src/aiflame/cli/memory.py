"""GPU memory flame graph of a PyTorch memory snapshot (or of any profile with memory metrics).

Metrics of a snapshot: peak-bytes (live at the peak, by allocation stack; the default),
alloc-bytes and alloc-count (everything allocated during the trace), reserved-bytes (the
allocator's segments, with the unallocated share under [fragmentation: ...]).
Reading the graph: the widest leaf is the allocation site holding the most; a wide bar
with no self value is a path to such sites.
"""

from __future__ import annotations

import argparse
import sys

from aiflame.cli.common import add_output, check_metric, write_output
from aiflame.model import Profile
from aiflame.render.visible import visible
from aiflame.sources.inputs import Input
from aiflame.sources.registry import detect, load
from aiflame.sources.torch_memory_frames import FRAME_MODES

HELP = "GPU memory flame graph of a PyTorch memory snapshot (peak, allocations, reserved)"

METRICS = ("peak-bytes", "alloc-bytes", "alloc-count", "reserved-bytes")
SNAPSHOT_FORMAT = "torch-memory"


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "input",
        metavar="SNAPSHOT_OR_PROFILE",
        help="torch.cuda.memory._dump_snapshot() pickle (.gz too), or a profile file",
    )
    add_output(p, help="the HTML file to write (.folded/.pb.gz/... by extension)")
    p.add_argument(
        "-m",
        "--metric",
        metavar="NAME",
        help=f"{' | '.join(METRICS)} (default: peak-bytes for snapshots)",
    )
    p.add_argument("--title", help="page title")
    p.add_argument(
        "--frames",
        choices=FRAME_MODES,
        default="pytorch",
        help="pytorch: the frames PyTorch's memory viewers keep (default); compact: also"
        " without CPython's and libc's C glue between Python frames; all: every frame",
    )
    p.add_argument(
        "--no-source",
        action="store_true",
        help="do not read .py sources to name methods 'Class > method'",
    )
    p.add_argument("--format", dest="input_format", metavar="FMT", help="input format")


def run(args: argparse.Namespace) -> int:
    from aiflame.render.registry import format_for_path, render

    fmt = args.input_format or detect(Input(args.input)).FORMAT
    options = {}
    if fmt == SNAPSHOT_FORMAT:
        options = {"frames": args.frames, "resolve_classes": not args.no_source}
    profile = load(args.input, fmt, **options)
    metric = args.metric
    if metric is None and fmt == SNAPSHOT_FORMAT:
        metric = "peak-bytes"
    check_metric(profile, metric)
    out_fmt = "html" if args.output == "-" else (format_for_path(args.output) or "html")
    if out_fmt == "html":
        from aiflame.render.html import render_html

        page = render_html(
            profile,
            title=args.title or _title(profile, metric),
            subtitle=summary(profile),
            metric=metric,
        )
        write_output(args.output, page)
    else:
        write_output(args.output, render(profile, out_fmt, metric, args.title))
    if args.output != "-":
        line = summary(profile)
        print(visible(f"{line + '; ' if line else ''}wrote {args.output}"), file=sys.stderr)
    return 0


def _title(profile: Profile, metric: str | None) -> str:
    name = profile.sample_types[profile.type_index(metric)].name
    source = str(profile.meta.get("source", "")).rsplit("/", 1)[-1]
    return f"GPU memory ({name}): {source}" if source else f"GPU memory ({name})"


def summary(profile: Profile) -> str:
    """One line: peak, allocated, reserved (from the snapshot's meta; empty otherwise)."""
    parts = []
    for key, label in (
        ("info:peak bytes", "peak"),
        ("info:allocated", "allocated"),
        ("info:reserved", "reserved"),
    ):
        value = profile.meta.get(key)
        if value:
            parts.append(f"{label} {value}")
    return "; ".join(parts)
