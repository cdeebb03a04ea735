"""The HTML report of ``aiflame analyze -o`` and the flame graph page its findings link
into, as one pair of pages: what the command writes to files and what ``aiflame server``
serves for an uploaded trace.

A trace is parsed once: the caller gives each input's flame graph profile and GPU timeline
(``TraceData``), and the analysis report made from them.
"""

from __future__ import annotations

from aiflame.analysis.busy_timeline import busy_timeline
from aiflame.analysis.links import StackFinder, combine, fragment, section_fragments
from aiflame.analysis.schema import Report, to_builtins
from aiflame.model import Profile
from aiflame.model.trace import TraceData


def report_pages(
    profiles: list[Profile],
    traces: list[TraceData],
    report: Report,
    roots: list[str | None],
    flame_href: str,
    title: str,
) -> tuple[str, str]:
    """(report page, flame graph page). ``roots``: the root frame of each input in the
    combined flame graph (None for a single input); ``flame_href``: the flame graph page's
    address, relative to the report's."""
    from aiflame.render.analyze_html import render_report_html
    from aiflame.render.html import render_html

    flame = combine(profiles, roots)
    finder = StackFinder(flame)
    metrics = {t.name for t in flame.sample_types}
    links, sections = [], []
    for r, root in zip(report.ranks, roots, strict=True):
        links.append(
            [dict(zip(("main", "stacks"), fragment(f, finder, metrics, root), strict=True))
             for f in r.findings]
        )  # fmt: skip
        sections.append(section_fragments(to_builtins(r), finder, metrics, root))
    page = render_report_html(
        to_builtins(report),
        timelines=[busy_timeline(t) for t in traces],
        links=links,
        section_links=sections,
        flame_href=flame_href,
        title=title,
    )
    flame_page = render_html(flame, title="Flame graph: " + title.removeprefix("aiflame analyze: "))
    return page, flame_page
