"""The one place the server calls ``aiflame analyze``'s engine: a trace file in, the report
(the same JSON as ``aiflame analyze --json``) and the flame graph page out.

It uses the analysis library call (``aiflame.analysis.read`` and ``analyze``, typed
``Report``), exactly as the command does, so a trace analyzed here gives the findings of
``aiflame analyze`` on the file.
"""

from __future__ import annotations

import os
from typing import Any

from aiflame.sources.inputs import Input
from aiflame.sources.registry import detect

# Timelines the analysis reads (the sources registry's trace inputs).
ANALYZABLE = ("kineto", "nsys", "trace-events")


def trace_format(path: str) -> str:
    """The importer format of a trace file (kineto, nsys, torch-memory, ...)."""
    return detect(Input(path)).FORMAT


def analyze_file(path: str, name: str = "") -> dict[str, Any]:
    """The analysis report of one trace, as ``aiflame analyze --json`` writes it; ``name``
    stands for the file (a temporary file of the server's) where the report names it."""
    from aiflame.analysis import read
    from aiflame.analysis.report import Options, analyze
    from aiflame.analysis.schema import to_builtins

    found = read(path)
    report = analyze([found.trace], options=Options())
    if name:
        _rename(report, path, name)
    out: dict[str, Any] = to_builtins(report)
    return out


def _rename(report: Any, path: str, name: str) -> None:
    """The report names its trace by ``name``, not by the server's temporary file."""
    stem = os.path.basename(path)
    for r in report.ranks:
        r.path = name
        if r.name and stem.startswith(r.name):  # named after the file, not a rank
            r.name = name


def report_pages(path: str, name: str, flame_href: str) -> tuple[str, str]:
    """The HTML report ``aiflame analyze -o`` writes for the trace, and the flame graph page
    it links into (at ``flame_href``)."""
    from aiflame.analysis import read
    from aiflame.analysis.report import Options, analyze
    from aiflame.render.analyze_pages import report_pages as pages

    found = read(path)
    report = analyze([found.trace], options=Options())
    _rename(report, path, name)
    title = f"aiflame analyze: {name}"
    return pages([found.profile()], [found.trace], report, [None], flame_href, title)


def flame_page(path: str, title: str) -> str:
    """The interactive flame graph page of a trace (analyzable or a memory snapshot)."""
    from aiflame.analysis import read
    from aiflame.render.html import render_html
    from aiflame.sources.registry import load

    fmt = trace_format(path)
    profile = read(path).profile() if fmt in ANALYZABLE else load(path)
    return render_html(profile, title=title)


def summary(report: dict[str, Any]) -> dict[str, Any]:
    """Topline numbers of a report: GPU time, busy share, FLOP/s, MFU, % of roofline."""
    ranks = report.get("ranks") or []
    total = sum((r.get("time_breakdown") or {}).get("total", 0.0) for r in ranks)
    busy = sum((r.get("time_breakdown") or {}).get("busy", 0.0) for r in ranks)
    eff = [r.get("efficiency") or {} for r in ranks]
    tflops = [e["achieved_tflops_per_s"] for e in eff if e.get("achieved_tflops_per_s")]
    mfu = [e["mfu"] for e in eff if e.get("mfu") is not None]
    weighted = [
        (op["kernel_time_us"]["sum"], op["pct_of_roofline"])
        for e in eff
        for op in e.get("ops") or []
        if op.get("pct_of_roofline") is not None and op.get("kernel_time_us")
    ]
    roof_time = sum(t for t, _ in weighted)
    device = next((e["device"]["name"] for e in eff if e.get("device")), "")
    if not device:
        device = next((d for r in ranks for d in r.get("devices") or []), "")
    return {
        "ranks": len(ranks),
        "gpu_time_us": total,
        "duration_us": max(
            ((r.get("time_breakdown") or {}).get("total", 0.0) for r in ranks), default=0.0
        ),
        "busy_share": busy / total if total else None,
        "achieved_tflops": sum(tflops) / len(tflops) if tflops else None,
        "mfu": sum(mfu) / len(mfu) if mfu else None,
        "pct_of_roofline": sum(t * p for t, p in weighted) / roof_time if roof_time else None,
        "device": str(device),
    }


def findings(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Every finding of every rank, with the rank and its GPU timeline."""
    out = []
    for r in report.get("ranks") or []:
        timeline = (r.get("time_breakdown") or {}).get("total", 0.0)
        for f in r.get("findings") or []:
            out.append({**f, "rank": str(r.get("rank") or ""), "timeline_us": timeline})
    return out


def evidence(finding: dict[str, Any]) -> dict[str, Any]:
    """What a finding stores as its evidence: its summary, figures, items and stacks."""
    keep = ("summary", "assumption", "figures", "items", "top_stacks", "flame")
    return {k: finding[k] for k in keep if k in finding}
