"""The HTML output of ``aiflame analyze``: the report page and the flame graph beside it.

A trace is parsed once: the source's :class:`~aiflame.sources.trace_input.TraceInput` gives the
analysis input and, when an HTML report is asked for, the flame graph its findings link
into.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from aiflame.analysis.schema import Report
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
    from aiflame.render.analyze_pages import report_pages

    if out == "-":
        raise AiflameError("-o needs a file name: the report links to a flame graph page beside it")
    flame_file = flame_path(out)
    title = "aiflame analyze: " + ", ".join(os.path.basename(r.path) for r in report.ranks)
    page, flame_page = report_pages(
        [i.profile() for i in inputs],
        [i.trace for i in inputs],
        report,
        _root_names(inputs, report),
        os.path.basename(flame_file),
        title,
    )
    write_outputs([(flame_file, flame_page), (out, page)])  # both or neither
    print(f"wrote {out} and {flame_file}", file=sys.stderr)
