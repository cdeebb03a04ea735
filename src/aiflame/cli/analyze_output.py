"""The HTML output of ``aiflame analyze``: the report page and the flame graph beside it.

A trace is parsed once: the source's :class:`~aiflame.sources.trace_input.TraceInput` gives the
analysis input and, when an HTML report is asked for, the flame graph its findings link
into.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from aiflame.analysis.busy_timeline import busy_timeline
from aiflame.analysis.schema import Report, to_builtins
from aiflame.cli.analyze_links import StackFinder, combine, fragment, section_fragments
from aiflame.cli.output import write_outputs
from aiflame.errors import AiflameError
from aiflame.sources.trace_input import TraceInput


def flame_path(report_path: str) -> str:
    """``out/report.html`` -> ``out/report.flame.html``."""
    p = Path(report_path)
    stem = p.name[: -len(p.suffix)] if p.suffix.lower() in (".html", ".htm") else p.name
    return str(p.with_name(stem + ".flame.html"))


def _root_names(inputs: list[TraceInput], report: Report) -> list[str | None]:
    """The root frame of each input in the combined flame graph (none for one input)."""
    if len(inputs) == 1:
        return [None]
    names: list[str | None] = []
    for r in report.ranks:
        name = r.name
        if name in names:  # the same rank or file name twice: tell them apart by folder
            name = "/".join(Path(r.path).parts[-2:]) + (f" (rank {r.rank})" if r.rank else "")
        while name in names:
            name += "'"
        names.append(name)
    return names


def write_html_report(out: str, inputs: list[TraceInput], report: Report) -> None:
    from aiflame.render.analyze_html import render_report_html
    from aiflame.render.html import render_html

    if out == "-":
        raise AiflameError("-o needs a file name: the report links to a flame graph page beside it")
    roots = _root_names(inputs, report)
    flame = combine([i.profile() for i in inputs], roots)
    finder = StackFinder(flame)
    metrics = {t.name for t in flame.sample_types}
    links, sections = [], []
    for r, root in zip(report.ranks, roots, strict=True):
        links.append(
            [dict(zip(("main", "stacks"), fragment(f, finder, metrics, root), strict=True))
             for f in r.findings]
        )  # fmt: skip
        sections.append(section_fragments(to_builtins(r), finder, metrics, root))
    flame_file = flame_path(out)
    title = "aiflame analyze: " + ", ".join(os.path.basename(r.path) for r in report.ranks)
    page = render_report_html(
        to_builtins(report),
        timelines=[busy_timeline(i.trace) for i in inputs],
        links=links,
        section_links=sections,
        flame_href=os.path.basename(flame_file),
        title=title,
    )
    flame_page = render_html(flame, title="Flame graph: " + title[16:])
    write_outputs([(flame_file, flame_page), (out, page)])  # both or neither
    print(f"wrote {out} and {flame_file}", file=sys.stderr)
