"""Inputs and the HTML output of ``aiflame analyze``.

A Kineto trace is parsed once: the same columns give the analysis input and, when an HTML
report is asked for, the flame graph its findings link into. An Nsight Systems export is
read by :mod:`aiflame.cli.analyze_nsys` and, for the flame graph, by the nsys importer.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiflame.analysis.busy_timeline import busy_timeline
from aiflame.analysis.trace import TraceData
from aiflame.cli.analyze_input import from_columns
from aiflame.cli.analyze_links import StackFinder, combine, fragment, section_fragments
from aiflame.cli.output import write_outputs
from aiflame.errors import AiflameError, InputError
from aiflame.model import Profile
from aiflame.sources import kineto, nsys
from aiflame.sources.inputs import Input
from aiflame.sources.nsys_db import SQLITE_MAGIC

# Notes of the analysis that assume a Kineto trace; an nsys export explains itself.
_KINETO_NOTES = ("no CPU operators in this trace", "no recorded input shapes")


@dataclass
class Loaded:
    path: str
    format: str  # "kineto" or "nsys"
    trace: TraceData
    profile: Callable[[], Profile]  # the flame graph of the same input, built on demand
    notes: list[str] = field(default_factory=list)


def load_input(path: str) -> Loaded:
    if path != "-" and not Path(path).is_file():
        raise InputError(path, "no such file")
    source = Input(path)
    if source.head(len(SQLITE_MAGIC)).startswith(SQLITE_MAGIC):
        from aiflame.cli.analyze_nsys import read_nsys

        # One Input for both reads: it keeps stdin's bytes.
        trace, notes = read_nsys(source)
        return Loaded(path, "nsys", trace, lambda: nsys.load(source), notes)
    cols, meta = kineto.read_columns(source, shapes=True)
    trace = from_columns(cols, meta, path)

    def profile() -> Profile:
        return kineto.build_profile(cols, meta, path, "short", "full")

    return Loaded(path, "kineto", trace, profile)


# What an nsys export lacks, in place of the analysis' Kineto-minded reasons.
NSYS_NO_SHAPES = (
    "an Nsight Systems export records no operator input shapes or dtypes: no FLOPs, "
    "TFLOP/s, MFU or roofline"
)
NSYS_NO_OPS = (
    "no NVTX ranges in this export, which stand for operators (annotate the code with NVTX, "
    "e.g. torch.autograd.profiler.emit_nvtx(), and record with --trace=cuda,nvtx)"
)


def add_source_notes(loaded: Loaded, rank: dict[str, Any]) -> None:
    """The input's own notes in its report; for nsys, in place of the Kineto wording."""
    notes = rank.setdefault("notes", [])
    if loaded.format == "nsys":
        notes[:] = [n for n in notes if not n.startswith(_KINETO_NOTES)]
        why = rank.setdefault("unavailable", {})
        for key, reason in list(why.items()):
            if "record_shapes" in reason or "no shapes" in reason:
                why[key] = NSYS_NO_SHAPES
            elif "GPU-only trace" in reason:
                why[key] = NSYS_NO_OPS
        if not (rank.get("efficiency") or {}).get("ops"):
            why.setdefault("efficiency", NSYS_NO_SHAPES)
    notes.extend(loaded.notes)
    rank["format"] = loaded.format


def flame_path(report_path: str) -> str:
    """``out/report.html`` -> ``out/report.flame.html``."""
    p = Path(report_path)
    stem = p.name[: -len(p.suffix)] if p.suffix.lower() in (".html", ".htm") else p.name
    return str(p.with_name(stem + ".flame.html"))


def _root_names(inputs: list[Loaded], report: dict[str, Any]) -> list[str | None]:
    """The root frame of each input in the combined flame graph (none for one input)."""
    if len(inputs) == 1:
        return [None]
    names: list[str | None] = []
    for i, r in zip(inputs, report["ranks"], strict=True):
        name = f"rank {r['rank']}" if r.get("rank") is not None else os.path.basename(i.path)
        if name in names:  # the same rank or file name twice: tell them apart by folder
            name = "/".join(Path(i.path).parts[-2:]) + (
                f" (rank {r['rank']})" if r.get("rank") else ""
            )
        while name in names:
            name += "'"
        names.append(name)
    return names


def write_html_report(out: str, inputs: list[Loaded], report: dict[str, Any]) -> None:
    from aiflame.render.analyze_html import render_report_html
    from aiflame.render.html import render_html

    if out == "-":
        raise AiflameError("-o needs a file name: the report links to a flame graph page beside it")
    roots = _root_names(inputs, report)
    flame = combine([i.profile() for i in inputs], roots)
    finder = StackFinder(flame)
    metrics = {t.name for t in flame.sample_types}
    links, sections = [], []
    for r, root in zip(report["ranks"], roots, strict=True):
        links.append(
            [dict(zip(("main", "stacks"), fragment(f, finder, metrics, root), strict=True))
             for f in r.get("findings", [])]
        )  # fmt: skip
        sections.append(section_fragments(r, finder, metrics, root))
    flame_file = flame_path(out)
    title = "aiflame analyze: " + ", ".join(os.path.basename(i.path) for i in inputs)
    page = render_report_html(
        report,
        timelines=[busy_timeline(i.trace) for i in inputs],
        links=links,
        section_links=sections,
        flame_href=os.path.basename(flame_file),
        title=title,
    )
    flame_page = render_html(flame, title="Flame graph: " + title[16:])
    write_outputs([(flame_file, flame_page), (out, page)])  # both or neither
    print(f"wrote {out} and {flame_file}", file=sys.stderr)
