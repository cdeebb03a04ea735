"""Describe a profile: sample types and totals, stacks, frames, kinds, time range."""

from __future__ import annotations

import argparse
from collections import Counter
from typing import cast

from aiflame.cli.common import add_inputs, perf_load_options
from aiflame.model import FrameKind, Profile
from aiflame.render.units import format_value
from aiflame.sources import load_many

HELP = "show what a profile holds (metrics, totals, stacks, frames, time range)"


def configure(p: argparse.ArgumentParser) -> None:
    add_inputs(p)  # several files or a directory: described as they merge (as flamegraph does)


def describe(profile: Profile) -> list[str]:
    sources = profile.meta.get("sources")
    if isinstance(sources, list) and len(sources) > 1:
        out = [f"sources:     {len(sources)} inputs, merged: " + ", ".join(map(str, sources))]
    else:
        out = [
            f"source:      {profile.meta.get('source', '?')} ({profile.meta.get('format', '?')})"
        ]
    read = profile.meta.get("samples_read")
    if isinstance(read, int) and read != len(profile):  # perf script: samples collapsed
        out.append(f"samples:     {read:,} ({len(profile):,} rows once identical stacks merge)")
    else:
        out.append(f"samples:     {len(profile):,}")
    totals = profile.totals()
    default = profile.type_index(None)
    for i, t in enumerate(profile.sample_types):
        mark = "  (default)" if i == default else ""
        out.append(
            f"metric:      {t.name} [{t.unit}] total {format_value(totals[i], t.unit)}{mark}"
        )
    used = set(profile.sample_stack.tolist())
    out.append(f"stacks:      {len(used - {-1}):,} distinct ({len(profile.stacks):,} tree nodes)")
    out.append(f"frames:      {len(profile.frames):,}")
    kinds = Counter(FrameKind(k).slug for k in profile.frames.kind)
    out.append("frame kinds: " + ", ".join(f"{k} {n:,}" for k, n in kinds.most_common()))
    keys = sorted({k for ls in profile.label_sets for k, _ in ls})
    if keys:
        out.append("labels:      " + ", ".join(keys))
    if profile.timestamps is not None and len(profile):
        out.extend(_time_line(int(profile.timestamps.min()), int(profile.timestamps.max())))
    elif "time_range_ns" in profile.meta:
        lo, hi = cast("tuple[int, int]", profile.meta["time_range_ns"])
        out.extend(_time_line(int(lo), int(hi)))
    for key, value in profile.meta.items():
        if key.startswith("info:"):
            out.append(f"{key[5:] + ':':<12} {value}")
    out.extend(_truncated_line(profile))
    out.extend(_python_line(profile))
    ignored = profile.meta.get("ignored_lines")
    if ignored:
        out.append(f"ignored:     {ignored:,} lines that were not samples")
    return out


def _time_line(lo: int, hi: int) -> list[str]:
    """The time range; one instant is no range (a pprof profile's time of collection), and
    zeros are no time at all (a memory snapshot recorded without its clock)."""
    if hi == lo:
        return [f"time:        {lo} ns (one instant, no time range)"] if lo else []
    return [f"time range:  {format_value(hi - lo, 'nanoseconds')} ({lo} .. {hi} ns)"]


def _python_line(profile: Profile) -> list[str]:
    """How the eBPF sampler read Python stacks, kept as a comment in pprof files."""
    from aiflame.collectors.ebpf.cpu_profile import PYTHON_COMMENT

    if "info:python stacks" in profile.meta:
        return []
    for comment in profile.meta.get("comments", ()) or ():  # type: ignore[attr-defined]
        if str(comment).startswith(PYTHON_COMMENT):
            return [f"python:      {str(comment)[len(PYTHON_COMMENT) :].strip()}"]
    return []


def _truncated_line(profile: Profile) -> list[str]:
    """The share of user stacks cut short (eBPF samples; also read back from pprof)."""
    from aiflame.collectors.ebpf.cpu_profile import truncated_stacks

    pair = truncated_stacks(profile.meta)
    if pair is None or "info:truncated stacks" in profile.meta:
        return []
    truncated, total = pair
    share = f"{truncated / total:.1%}" if total else "n/a"
    return [f"truncated:   {share} of {total:,} user stacks cut short (no frame pointers?)"]


def run(args: argparse.Namespace) -> int:
    from aiflame.cli.output import write_stdout
    from aiflame.render.visible import visible

    profile = load_many(args.inputs, args.input_format, **perf_load_options(args))
    write_stdout("".join(visible(line) + "\n" for line in describe(profile)))
    return 0
