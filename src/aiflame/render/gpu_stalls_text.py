"""The GPU stall analysis (``aiflame.analysis.gpu_stalls``, as its JSON dict) as text."""

from __future__ import annotations

from typing import Any

from aiflame.render.visible import visible


def format_report(report: dict[str, Any]) -> str:
    """The report as plain text (terminal)."""
    out = ["GPU stall analysis (PC samples)"]
    period, unit = report["period"], report["period_unit"]
    per = f", 1 sample = {period:,.0f} {unit}" if period else ""
    out.append(f"  {report['total_samples']:,.0f} samples{per}")
    if report["join"]:
        out.append("  " + report["join"])
    for k in report["kernels"]:
        out.append("")
        out.append(f"{k['kernel']}  {k['samples']:,.0f} samples ({k['share']:.0%})")
        reasons = ", ".join(f"{r['name']} {r['share']:.0%}" for r in k["reasons"])
        out.append("  stall reasons: " + reasons)
        for title in ("lines", "instructions"):
            if k[title]:
                out.append(f"  top {title}:")
                out += [f"    {r['share']:6.1%}  {r['name']}  ({r['reason']})" for r in k[title]]
    if report["findings"]:
        out += ["", "Findings"]
        for f in report["findings"]:
            out.append(f"- {f['kernel']}: {f['title']}")
            out += [f"    evidence: {e}" for e in f["evidence"]]
            out.append(f"    fix: {f['fix']}")
    # Kernel, file and instruction names come from the profile: escapes and bidi
    # characters are spelled out, line by line (the report's own newlines stay).
    return "\n".join(visible(line) for line in out) + "\n"
