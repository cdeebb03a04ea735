"""Analyze Kineto (PyTorch profiler) traces: per rank GPU time breakdown (computation,
communication, memcpy, exposed communication/memcpy, idle, with AMD TraceLens'
definitions), top kernels and ops, short kernels, and GEMM FLOPs/bytes/TFLOP/s per shape."""

from __future__ import annotations

import argparse
import json
from collections import Counter
from typing import Any

from aiflame.analysis.report import analyze
from aiflame.cli.analyze_input import read_trace
from aiflame.cli.common import write_output

HELP = "time breakdown, top kernels/ops and GEMM efficiency of Kineto traces"


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("traces", nargs="+", metavar="TRACE", help="Kineto trace (.json or .json.gz)")
    p.add_argument("--json", metavar="OUT", help="write the report as JSON ('-': stdout)")
    p.add_argument("--top", type=int, default=10, metavar="N", help="rows per table (10)")


_BREAKDOWN = (
    "total",
    "busy",
    "idle",
    "computation",
    "communication",
    "memcpy",
    "exposed_communication",
    "exposed_memcpy",
)


def _ms(us: float) -> str:
    return f"{us / 1000:10.3f} ms"


def _name(s: str, width: int = 60) -> str:
    return s if len(s) <= width else s[: width - 3] + "..."


def render_text(report: dict[str, Any], top: int) -> str:
    out: list[str] = []
    for r in report["ranks"]:
        rank = f"rank {r['rank']}" if r["rank"] is not None else "rank ?"
        devices = Counter(map(str, r["devices"]))
        named = ", ".join(f"{n} x {d}" if n > 1 else d for d, n in devices.items())
        out.append(f"== {r['path']} ({rank}; {named or 'device ?'})")
        tb = r["time_breakdown"]
        total = tb["total"] or 1.0
        if tb["total"]:
            out.append("GPU time breakdown (TraceLens definitions):")
        for key in _BREAKDOWN if tb["total"] else ():
            out.append(f"  {key:<22} {_ms(tb[key])} {100 * tb[key] / total:6.1f}%")
        for title, rows in (("Top kernels", r["top_kernels"]), ("Top ops", r["top_ops"])):
            if rows:
                out.append(f"{title} by GPU time:        total      count       mean  share")
                for row in rows[:top]:
                    out.append(
                        f"  {_name(row['name']):<60} {_ms(row['total_us'])} {row['count']:7,d} "
                        f"{row['mean_us']:8.2f} us {100 * row['share']:5.1f}%"
                    )
        sk = r["short_kernels"]
        if sk["kernels"]:
            out.append(
                f"Short kernels (< {sk['threshold_us']:g} us): {sk['count']:,} of "
                f"{sk['kernels']:,} ({100 * sk['share_of_kernels']:.1f}%), {_ms(sk['time_us'])}"
            )
        if r["gemm"]:
            out.append("GEMM shapes:  op          B x M x N x K           dtype    calls   TFLOP/s")
            for g in r["gemm"][:top]:
                dims = f"{g['B']}x{g['M']}x{g['N']}x{g['K']}"
                rate = "?" if g["tflops_per_s"] is None else f"{g['tflops_per_s']:.1f}"
                out.append(f"  {g['op']:<14} {dims:<22} {g['dtype']:<14} {g['calls']:5d} {rate:>9}")
        for f in r["findings"]:
            out.append(f"[{f['severity']}] {f['title']} (~{_ms(f['cost_us']).strip()}): {f['fix']}")
            stacks = f["evidence"].get("top_stacks") or []
            if stacks and stacks[0]["stack"]:
                out.append("    from: " + " > ".join(stacks[0]["stack"][-4:]))
        for note in r["notes"]:
            out.append(f"note: {note}")
        out.append("")
    return "\n".join(out)


def run(args: argparse.Namespace) -> int:
    report = analyze([read_trace(path) for path in args.traces], top=max(args.top, 1))
    if args.json:
        text = json.dumps(report, indent=1)
        if args.json == "-":
            print(text)
            return 0
        write_output(args.json, text + "\n")
    print(render_text(report, args.top))
    return 0
