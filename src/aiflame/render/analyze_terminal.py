"""The terminal report of ``aiflame analyze``: one compact block per rank, drawn by rich.

Colour and styles only on a terminal (rich leaves them out when the output is piped or
``NO_COLOR`` is set); never wider than ``MAX_WIDTH`` columns.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from rich import box
from rich.console import Console, Group
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from aiflame.render.analyze_format import (
    PARTS,
    evidence_items,
    evidence_stacks,
    percent,
    rank_title,
    short_frame,
    time_us,
)

MAX_WIDTH = 100
BAR_WIDTH = 36
STACK_FRAMES = 4  # innermost frames shown per stack
_SEVERITY_STYLE = {"high": "bold red", "medium": "bold yellow", "low": "bold blue"}
_PART_STYLE = {
    "computation": "green",
    "exposed_communication": "magenta",
    "exposed_memcpy": "cyan",
    "idle": "bright_black",
}


def make_console(file: TextIO | None = None, width: int | None = None) -> Console:
    """A console on ``file`` (stdout): its terminal width up to MAX_WIDTH, else MAX_WIDTH."""
    file = file or sys.stdout
    probe = Console(file=file)
    if width is None:
        width = min(probe.width, MAX_WIDTH) if probe.is_terminal else MAX_WIDTH
    return Console(file=file, width=width, highlight=False, emoji=False)


def _bar(fraction: float, width: int, style: str, ascii_only: bool) -> Text:
    """A horizontal bar of ``fraction`` (0..1) of ``width`` cells, in eighths."""
    eighths = round(max(0.0, min(1.0, fraction)) * width * 8)
    if ascii_only:
        return Text("#" * round(eighths / 8), style=style)
    full, rest = divmod(eighths, 8)
    return Text("█" * full + ("▏▎▍▌▋▊▉"[rest - 1] if rest else ""), style=style)


def _breakdown(r: dict[str, Any], ascii_only: bool) -> Table | None:
    tb = r.get("time_breakdown") or {}
    total = tb.get("total") or 0.0
    if not total:
        return None
    t = Table(box=None, show_header=False, pad_edge=False, padding=(0, 1))
    t.add_column(min_width=22)
    t.add_column(justify="right", min_width=11)
    t.add_column(justify="right", min_width=6)
    t.add_column(width=BAR_WIDTH, no_wrap=True)
    for key, name in PARTS:
        value = tb.get(key, 0.0)
        style = _PART_STYLE[key]
        t.add_row(
            Text(name, style=style),
            time_us(value),
            percent(value, total),
            _bar(value / total, BAR_WIDTH, style, ascii_only),
        )
    return t


def _rows_table(title: str, rows: list[dict[str, Any]], top: int, width: int) -> Table:
    t = Table(
        title=title, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD,
        pad_edge=False, padding=(0, 1), show_edge=False,
    )  # fmt: skip
    name_width = max(20, width - 46)
    t.add_column("name", no_wrap=True, overflow="ellipsis", max_width=name_width)
    t.add_column("total", justify="right")
    t.add_column("count", justify="right")
    t.add_column("mean", justify="right")
    t.add_column("share", justify="right")
    for row in rows[:top]:
        t.add_row(
            Text(row["name"]),
            time_us(row["total_us"]),
            f"{row['count']:,}",
            time_us(row["mean_us"]),
            f"{100 * row['share']:.1f}%",
        )
    return t


def _gemm_table(rows: list[dict[str, Any]], top: int) -> Table:
    t = Table(
        title="GEMM shapes", title_justify="left", title_style="bold", box=box.SIMPLE_HEAD,
        pad_edge=False, padding=(0, 1), show_edge=False,
    )  # fmt: skip
    for name in ("op", "B x M x N x K", "dtype", "calls", "time", "TFLOP/s", "TB/s"):
        t.add_column(name, justify="left" if name in ("op", "B x M x N x K", "dtype") else "right")
    for g in rows[:top]:
        rate, tbs = g.get("tflops_per_s"), g.get("tb_per_s")
        t.add_row(
            Text(g["op"]),
            f"{g['B']}x{g['M']}x{g['N']}x{g['K']}",
            Text(str(g["dtype"])),
            f"{g['calls']:,}",
            time_us((g.get("kernel_time_us") or {}).get("sum")),
            "?" if rate is None else f"{rate:.1f}",
            "?" if tbs is None else f"{tbs:.2f}",
        )
    return t


def _stack_line(stack: list[str]) -> str:
    shown = [short_frame(f) for f in stack[-STACK_FRAMES:]]
    return ("… > " if len(stack) > len(shown) else "") + " > ".join(shown)


def _finding(f: dict[str, Any], total: float) -> Group:
    sev = str(f.get("severity", "low"))
    head = Text()
    head.append(f"[{sev}]", style=_SEVERITY_STYLE.get(sev, "bold"))
    head.append(" ")
    head.append(str(f.get("title", f.get("rule", "?"))), style="bold")
    cost = f.get("cost_us")
    if cost is not None:
        share = f", {percent(cost, total)} of GPU time" if total else ""
        head.append(f"  ~{time_us(cost)}{share}", style="bold")
    lines: list[Text] = []
    items = list(evidence_items(f.get("evidence") or {}))
    if items:
        lines.append(Text("evidence: " + "; ".join(f"{k} {v}" for k, v in items), style="dim"))
    for s in evidence_stacks(f.get("evidence") or {})[:2]:
        if s.get("stack"):
            extra = f" ({time_us(s['cost_us'])})" if s.get("cost_us") is not None else ""
            lines.append(Text(f"from: {_stack_line(s['stack'])}{extra}"))
    if f.get("fix"):
        lines.append(Text.assemble(("fix: ", "green"), str(f["fix"])))
    # Wrapped lines stay indented under the finding's head.
    return Group(head, Padding(Group(*lines), (0, 0, 0, 2)))


def render_rank(console: Console, r: dict[str, Any], top: int) -> None:
    ascii_only = not console.encoding.lower().startswith("utf")
    console.rule(Text(f"{rank_title(r)}", style="bold"), align="left")
    console.print(Text(str(r.get("path", "")), style="dim"), overflow="ellipsis", no_wrap=True)
    tb = r.get("time_breakdown") or {}
    breakdown = _breakdown(r, ascii_only)
    if breakdown is not None:
        console.print(
            Text.assemble(
                ("GPU time breakdown: ", "bold"),
                (time_us(tb["total"]), "bold"),
                f" total; busy {time_us(tb['busy'])} ({percent(tb['busy'], tb['total'])}); "
                f"communication {time_us(tb['communication'])}, "
                f"memcpy {time_us(tb['memcpy'])} in all",
            )
        )
        console.print(breakdown)
    for title, key in (("Top kernels by GPU time", "top_kernels"), ("Top ops", "top_ops")):
        rows = r.get(key) or []
        if rows:
            console.print(_rows_table(title, rows, top, console.width))
    sk = r.get("short_kernels") or {}
    if sk.get("kernels"):
        console.print(
            f"Short kernels (< {sk['threshold_us']:g} us): {sk['count']:,} of "
            f"{sk['kernels']:,} ({100 * sk['share_of_kernels']:.1f}%), {time_us(sk['time_us'])}"
        )
    if r.get("gemm"):
        console.print(_gemm_table(r["gemm"], top))
    findings = r.get("findings") or []
    console.print(Text(f"Findings ({len(findings)})" if findings else "No findings", style="bold"))
    for f in findings:
        console.print(_finding(f, tb.get("total") or 0.0))
    for note in r.get("notes") or []:
        console.print(Text(f"note: {note}", style="italic"))
    console.print()


def render_terminal(report: dict[str, Any], top: int = 10, console: Console | None = None) -> None:
    console = console or make_console()
    if console.is_terminal:
        for r in report.get("ranks", []):
            render_rank(console, r, top)
        return
    # Into a pipe or file: plain text without the tables' trailing padding.
    with console.capture() as cap:
        for r in report.get("ranks", []):
            render_rank(console, r, top)
    text = "\n".join(line.rstrip() for line in cap.get().splitlines())
    console.file.write(text + "\n")


def render_text(report: dict[str, Any], top: int = 10, width: int = MAX_WIDTH) -> str:
    """The report as plain text (no styles), as it is printed into a pipe."""
    import io

    buf = io.StringIO()
    render_terminal(report, top, make_console(buf, width))
    return buf.getvalue()


__all__ = ["make_console", "render_terminal", "render_text"]
