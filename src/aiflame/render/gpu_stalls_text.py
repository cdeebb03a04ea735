"""The GPU stall analysis (:mod:`aiflame.analysis.gpu_stalls`) as terminal text."""

from __future__ import annotations

from aiflame.analysis.gpu_stalls import StallReport


def format_report(report: StallReport) -> str:
    """The report as plain text (terminal)."""
    out = ["GPU stall analysis (PC samples)"]
    unit = f", 1 sample = {report.period:,.0f} {report.period_unit}" if report.period else ""
    out.append(f"  {report.total_samples:,.0f} samples{unit}")
    if report.join:
        out.append(f"  {report.join}")
    for k in report.kernels:
        out.append("")
        out.append(f"{k.kernel}  {k.samples:,.0f} samples ({k.share:.0%})")
        out.append("  stall reasons: " + ", ".join(f"{r.name} {r.share:.0%}" for r in k.reasons))
        for title, rows in (("lines", k.lines), ("instructions", k.instructions)):
            if rows:
                out.append(f"  top {title}:")
                out += [f"    {r.share:6.1%}  {r.name}  ({r.reason})" for r in rows]
    if report.findings:
        out.append("")
        out.append("Findings")
        for f in report.findings:
            out.append(f"- {f.kernel}: {f.title}")
            out += [f"    evidence: {e}" for e in f.evidence]
            out.append(f"    fix: {f.fix}")
    return "\n".join(out) + "\n"
