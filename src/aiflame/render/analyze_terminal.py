"""The terminal report of ``aiflame analyze``: one compact block per rank, drawn by rich.

Every string of the report goes through :func:`~aiflame.render.visible.visible_data` and
rich's markup is off, so that names from the trace are shown as they are, never obeyed.

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
    label,
    percent,
    rank_title,
    short_frame,
    size,
    stack_cost,
    time_us,
)
from aiflame.render.visible import visible_data

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
    # No markup: a kernel named "[bold]x" is printed as it is, not styled.
    return Console(file=file, width=width, highlight=False, emoji=False, markup=False)


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
    for name in ("total", "count", "mean", "share"):
        t.add_column(name, justify="right", no_wrap=True)
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


def _line(title: str, text: str) -> Text:
    return Text.assemble((title + ": ", "bold"), text)


def _summaries(r: dict[str, Any]) -> list[Text]:
    """One line each for idle time, launches, synchronisation and copies, when known."""
    out = []
    idle = r.get("idle") or {}
    if idle.get("total_us"):
        s, total = idle.get("summary") or {}, idle["total_us"]
        parts = [
            f"{name} {percent(s.get(key) or 0.0, total)}"
            for name, key in (
                ("waiting on the host", "waiting_on_host_us"),
                ("on dependencies", "waiting_on_dependency_us"),
                ("other", "other_us"),
            )
        ]
        out.append(
            _line("Idle", f"{time_us(total)} in {idle.get('gaps', 0):,} gaps: " + ", ".join(parts))
        )
    la = r.get("launch") or {}
    if la.get("launches"):
        text = (
            f"{la['launches']:,} launches, median {time_us(la['launch_us']['median'])} on the CPU "
            f"vs {time_us(la['gpu_us']['median'])} on the GPU; "
            f"{100 * la.get('share_shorter_than_launch', 0):.0f}% run shorter than their launch"
        )
        q = la.get("queue_depth") or {}
        if q:
            empty = 100 * q.get("share_empty", 0)
            text += f"; queue depth mean {q.get('mean', 0):.2f}, empty {empty:.0f}% of the time"
        lb = la.get("launch_bound") or {}
        if lb.get("phases"):
            text += f"; {lb['phases']} launch-bound phases ({time_us(lb.get('time_us'))})"
        out.append(_line("Launch", text))
    sy = r.get("sync") or {}
    if sy.get("calls"):
        calls = ", ".join(
            f"{name} {c.get('count', 0):,}" for name, c in (sy.get("by_call") or {}).items()
        )
        out.append(
            _line(
                "Sync",
                f"{sy['calls']:,} calls ({calls}) block the CPU {time_us(sy.get('blocked_us'))}; "
                f"the GPU idles {time_us(sy.get('gpu_idle_after_us'))} after them",
            )
        )
    mt = r.get("memory_traffic") or {}
    if mt.get("copies"):
        kinds = "; ".join(
            f"{k.get('direction') or k.get('name')} {k.get('count', 0):,}"
            + (f", {size(k['bytes'])}" if k.get("bytes") is not None else "")
            for k in mt.get("by_kind") or []
        )
        text = f"{mt['copies']:,} ({kinds})"
        small = mt.get("small_copies") or {}
        if small.get("count"):
            text += f"; {small['count']:,} under {size(small.get('threshold_bytes', 0))}"
        loop = mt.get("in_step_loop") or {}
        if loop.get("copies"):
            text += f"; {loop['copies']:,} inside the step loop"
        out.append(_line("Copies", text))
    return out


def _efficiency_head(eff: dict[str, Any]) -> Text:
    dev = eff.get("device") or {}
    mfu, busy = eff.get("mfu"), eff.get("mfu_busy")
    m = eff.get("modelled") or {}
    text = Text.assemble(("Efficiency", "bold"))
    if dev:
        text.append(f" on {dev.get('name')} ({dev.get('source')})")
    text.append(": ")
    if mfu is not None:
        text.append(f"MFU {100 * mfu:.2f}%", style="bold")
        text.append(f" (over busy time {100 * (busy or 0):.2f}%); ")
    rate = eff.get("achieved_tflops_per_s")
    if rate is not None:
        text.append(
            f"modelled ops {rate:.1f} TFLOP/s over {time_us(m.get('kernel_time_us'))} "
            f"({100 * (m.get('share_of_busy') or 0):.0f}% of busy time)"
        )
    return text


def _params(p: dict[str, Any] | None) -> str:
    """A shape's parameters, short: GEMMs as ``[Bx]MxNxK``, others as ``key=value``."""
    if not p:
        return ""
    if all(k in p for k in ("M", "N", "K")):
        b = p.get("B", 1)
        return (f"{b}x" if b not in (1, None) else "") + f"{p['M']}x{p['N']}x{p['K']}"
    return " ".join(
        f"{k}={'x'.join(map(str, v)) if isinstance(v, list) else v}"
        for k, v in p.items()
        if not isinstance(v, bool)
    )


def _efficiency_table(rows: list[dict[str, Any]], top: int, width: int) -> Table:
    t = Table(
        title="Ops by achieved rate (modelled FLOPs and bytes)", title_justify="left",
        title_style="bold", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1),
        show_edge=False,
    )  # fmt: skip
    t.add_column("op", no_wrap=True, overflow="ellipsis", max_width=max(20, width - 66))
    t.add_column("prec", no_wrap=True, max_width=9)
    for name in ("calls", "time", "TFLOP/s", "% peak", "% roof", "bound"):
        t.add_column(name, justify="right" if name != "bound" else "left", no_wrap=True)
    pct = lambda v: "?" if v is None else f"{100 * v:.1f}"  # noqa: E731
    for row in rows[:top]:
        rate = row.get("tflops_per_s")
        t.add_row(
            Text(f"{row.get('op')} {_params(row.get('params'))}".strip()),
            Text(str(row.get("precision") or row.get("dtype") or "?")),
            f"{row.get('calls', 0):,}",
            time_us((row.get("kernel_time_us") or {}).get("sum")),
            "?" if rate is None else f"{rate:.1f}",
            pct(row.get("pct_of_peak")),
            pct(row.get("pct_of_roofline")),
            str(row.get("bound") or ""),
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
    items = list(evidence_items(f.get("evidence") or {}, skip=("share_of_gpu_time",)))
    if items:
        lines.append(Text("evidence: " + "; ".join(f"{k} {v}" for k, v in items), style="dim"))
    for s in evidence_stacks(f.get("evidence") or {})[:2]:
        if s.get("stack"):
            cost = stack_cost(s)
            extra = f" ({cost[0]} {time_us(cost[1])})" if cost else ""
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
    for line in _summaries(r):
        console.print(line)
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
    eff = r.get("efficiency") or {}
    if eff.get("ops"):
        console.print(_efficiency_head(eff))
        console.print(_efficiency_table(eff["ops"], top, console.width))
    elif r.get("gemm"):
        console.print(_gemm_table(r["gemm"], top))
    findings = r.get("findings") or []
    console.print(Text(f"Findings ({len(findings)})" if findings else "No findings", style="bold"))
    for f in findings:
        console.print(_finding(f, tb.get("total") or 0.0))
    for note in r.get("notes") or []:
        console.print(Text(f"note: {note}", style="italic"))
    for key, why in (r.get("unavailable") or {}).items():
        console.print(Text(f"not available: {label(key)}: {why}", style="italic"))
    console.print()


def job_lines(job: dict[str, Any] | None) -> list[str]:
    """The job across its ranks, in a few lines (nothing for a single trace)."""
    if not job or job.get("ranks", 0) < 2:
        return []
    if job.get("unavailable"):
        return [f"job of {job['ranks']} traces: {job['unavailable']}"]
    t, f = job["time_breakdown_sum"], job["fractions"]
    parts = ", ".join(
        f"{label(k)} {percent(f[k], 1.0)}"
        for k in ("computation", "exposed_communication", "exposed_memcpy", "idle")
    )
    c = job["computation_us"]
    what = "ranks" if job.get("same_job", True) else "traces (no rank in them: not one job)"
    lines = [
        f"job: {job['ranks']} {what}, GPU time {time_us(t['total'])} in all: {parts}",
        f"computation per {'rank' if job.get('same_job', True) else 'trace'}: "
        f"min {time_us(c['min'])}, median {time_us(c['median'])}, max {time_us(c['max'])} "
        f"(spread {percent(job['computation_spread'], 1.0)}; slowest: "
        f"{'rank ' if job.get('same_job', True) else ''}{job['slowest_rank']})",
    ]
    for s in job.get("stragglers", []):
        lines.append(
            f"straggler: rank {s['rank']} computes {percent(s['over_median'], 1.0)} longer "
            "than the median rank; the others wait for it at each collective"
        )
    for row in job.get("findings", [])[:5]:
        lines.append(
            f"finding on {len(row['ranks'])} of {job['ranks']} "
            f"{'ranks' if job.get('same_job', True) else 'traces'}: {row['title']} "
            f"({time_us(row['cost_us'])} in all)"
        )
    return lines


def _render_all(console: Console, report: dict[str, Any], top: int) -> None:
    for r in report.get("ranks", []):
        render_rank(console, r, top)
    lines = job_lines(report.get("job"))
    if lines:
        console.rule(Text("job", style="bold"), align="left")
        for line in lines:
            console.print(Text(line))


def render_terminal(report: dict[str, Any], top: int = 10, console: Console | None = None) -> None:
    console = console or make_console()
    report = visible_data(report)  # names from the trace: no escape sequence reaches the terminal
    if console.is_terminal:
        _render_all(console, report, top)
        return
    # Into a pipe or file: plain text without the tables' trailing padding.
    with console.capture() as cap:
        _render_all(console, report, top)
    text = "\n".join(line.rstrip() for line in cap.get().splitlines())
    console.file.write(text + "\n")


def render_text(report: dict[str, Any], top: int = 10, width: int = MAX_WIDTH) -> str:
    """The report as plain text (no styles), as it is printed into a pipe."""
    import io

    buf = io.StringIO()
    render_terminal(report, top, make_console(buf, width))
    return buf.getvalue()


__all__ = ["make_console", "render_terminal", "render_text"]
