"""Memory flame graph of a PyTorch memory snapshot, of a PyTorch profiler trace recorded
with profile_memory=True, or of any profile with a metric in bytes.

Metrics of a snapshot: peak-bytes (live at the peak, by allocation stack; the default),
alloc-bytes and alloc-count (everything allocated during the trace), reserved-bytes (the
allocator's segments, with the unallocated share under [fragmentation: ...]). Of a trace:
peak-bytes, alloc-bytes and alloc-count, each allocation charged to the operator running
when it was made. Reading the graph: the widest leaf is the allocation site holding the
most; a wide bar with no self value is a path to such sites.
"""

from __future__ import annotations

import argparse
import sys

from aiflame.cli.browser import add_open, check_open, open_page
from aiflame.cli.common import add_output, check_metric, output_format, write_output
from aiflame.errors import AiflameError
from aiflame.model import Profile
from aiflame.render.visible import visible
from aiflame.sources.inputs import Input
from aiflame.sources.registry import detect, load
from aiflame.sources.torch_memory.frames import FRAME_MODES

HELP = (
    "GPU memory flame graph of a PyTorch memory snapshot or of a profiler trace recorded "
    "with profile_memory=True (peak, allocations, memory over time)"
)

METRICS = ("peak-bytes", "alloc-bytes", "alloc-count", "reserved-bytes")
SNAPSHOT_FORMAT = "torch-memory"
TRACE_FORMAT = "kineto"


# A page, a profile or a static SVG; a timeline (-f chrome) is `aiflame convert TRACE`.
MEMORY_OUTPUTS = ("html", "svg", "pprof", "folded", "speedscope")


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "input",
        metavar="SNAPSHOT_OR_TRACE",
        help="torch.cuda.memory._dump_snapshot() pickle (.gz too), a PyTorch profiler trace "
        "recorded with profile_memory=True, or a profile with a metric in bytes",
    )
    add_output(p, help="the HTML file to write (.svg/.folded/.pb.gz/... by extension)")
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
        default="compact",
        help="compact (default): the frames PyTorch's memory viewers keep, without CPython's"
        " and libc's C glue between Python frames, so the allocating op shows on the first"
        " screen; pytorch: exactly the frames PyTorch's viewers keep; all: every frame",
    )
    p.add_argument(
        "--no-source",
        action="store_true",
        help="do not read .py sources to name methods 'Class > method'",
    )
    p.add_argument(
        "--device",
        metavar="NAME",
        help="profiler traces: the device whose memory over time is charted (cuda:1, cpu; "
        "default: the GPU with the highest peak)",
    )
    p.add_argument("--format", dest="input_format", metavar="FMT", help="input format")
    add_open(p)


def run(args: argparse.Namespace) -> int:
    from aiflame.render.registry import render

    out_fmt = output_format(args.output, "html", MEMORY_OUTPUTS)  # before loading: fail at once
    check_open(args, args.output, is_page=out_fmt in ("html", "svg"))
    fmt = args.input_format or detect(Input(args.input)).FORMAT
    profile = load_memory(args, fmt)
    metric = args.metric or default_metric(profile, fmt)
    check_metric(profile, metric)
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
        title = args.title or _title(profile, metric)
        write_output(args.output, render(profile, out_fmt, metric, title))
    if args.output != "-":
        line = summary(profile)
        print(visible(f"{line + '; ' if line else ''}wrote {args.output}"), file=sys.stderr)
    if args.open:
        open_page(args.output)
    return 0


def load_memory(args: argparse.Namespace, fmt: str) -> Profile:
    """The input's memory profile; one clear error when it holds no memory data."""
    if args.device is not None and fmt != TRACE_FORMAT:
        raise AiflameError("--device chooses among the devices of a profiler trace")
    if fmt == SNAPSHOT_FORMAT:
        options = {"frames": args.frames, "resolve_classes": not args.no_source}
        return load(args.input, fmt, **options)
    if fmt == TRACE_FORMAT:
        from aiflame.sources.kineto import memory as kineto_memory

        profile = kineto_memory.load(Input(args.input), device=args.device)
        profile.meta.setdefault("source", args.input)
        profile.meta.setdefault("format", fmt)
        return profile
    profile = load(args.input, fmt)
    if not memory_types(profile):
        metrics = ", ".join(t.name for t in profile.sample_types)
        moved = "; gpu-bytes counts the bytes memcpys moved, not memory held" * any(
            t.name in TRANSFER_METRICS for t in profile.sample_types
        )
        raise AiflameError(
            f"{args.input}: no memory data ({fmt} input with metrics {metrics}{moved});"
            " give a PyTorch memory snapshot, a profiler trace recorded with"
            " profile_memory=True, or a profile with a metric in bytes"
        )
    return profile


# Metrics in bytes that are traffic, not memory: an Nsight Systems export's bytes copied by
# memcpys and set by memsets.
TRANSFER_METRICS = frozenset({"gpu-bytes"})


def memory_types(profile: Profile) -> list[str]:
    """Names of the profile's metrics that measure memory (in bytes, not bytes moved)."""
    return [
        t.name for t in profile.sample_types if t.unit == "bytes" and t.name not in TRANSFER_METRICS
    ]


def default_metric(profile: Profile, fmt: str) -> str | None:
    """peak-bytes where the input has it, else the profile's first metric in bytes."""
    names = [t.name for t in profile.sample_types]
    if "peak-bytes" in names:
        return "peak-bytes"
    if fmt in (SNAPSHOT_FORMAT, TRACE_FORMAT):
        return None
    return memory_types(profile)[0]


def _title(profile: Profile, metric: str | None) -> str:
    name = profile.sample_types[profile.type_index(metric)].name
    kind = str(profile.meta.get("memory_kind") or "GPU memory")
    if profile.meta.get("format") not in (SNAPSHOT_FORMAT, TRACE_FORMAT):
        kind = "Memory"
    kind = kind[:1].upper() + kind[1:]
    source = str(profile.meta.get("source", "")).rsplit("/", 1)[-1]
    return f"{kind} ({name}): {source}" if source else f"{kind} ({name})"


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
