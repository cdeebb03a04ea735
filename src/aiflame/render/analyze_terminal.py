"""The terminal report of ``aiflame analyze``: one compact block per rank, drawn by rich.

Every string of the report goes through :func:`~aiflame.render.visible.visible_data` and
rich's markup is off, so that names from the trace are shown as they are, never obeyed.

Colour and styles only on a terminal (rich leaves them out when the output is piped or
``NO_COLOR`` is set); never wider than ``MAX_WIDTH`` columns.
"""

from __future__ import annotations

import sys
from typing import TextIO

from rich import box
from rich.console import Console, Group
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from aiflame.analysis.schema import (
    Efficiency,
    Finding,
    GemmRow,
    Job,
    RankReport,
    Report,
    Row,
    ShapeRate,
)
from aiflame.analysis.words import shape_params
from aiflame.render.analyze_format import (
    PARTS,
    figure_text,
    label,
    percent,
    rank_title,
    short_frame,
    size,
    time_us,
)
from aiflame.render.elide import table_labels
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


def _breakdown(r: RankReport, ascii_only: bool) -> Table | None:
    tb = r.time_breakdown
    total = tb.total
    if not total:
        return None
    t = Table(box=None, show_header=False, pad_edge=False, padding=(0, 1))
    t.add_column(min_width=22)
    t.add_column(justify="right", min_width=11)
    t.add_column(justify="right", min_width=6)
    t.add_column(width=BAR_WIDTH, no_wrap=True)
    for key, name in PARTS:
        value = float(getattr(tb, key))
        style = _PART_STYLE[key]
        t.add_row(
            Text(name, style=style),
            time_us(value),
            percent(value, total),
            _bar(value / total, BAR_WIDTH, style, ascii_only),
        )
    return t


def _rows_table(
    title: str,
    rows: list[Row],
    top: int,
    width: int,
    unattributed_us: float = 0.0,
    total_us: float = 0.0,
    unattributed_why: str = "",
) -> Table:
    t = Table(
        title=title, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD,
        pad_edge=False, padding=(0, 1), show_edge=False,
    )  # fmt: skip
    name_width = max(20, width - 46)
    t.add_column("name", no_wrap=True, overflow="ellipsis", max_width=name_width)
    for name in ("total", "count", "mean", "share"):
        t.add_column(name, justify="right", no_wrap=True)
    shown = rows[:top]
    labels = table_labels([row.name for row in shown], name_width)
    for row, name in zip(shown, labels, strict=True):
        t.add_row(
            Text(name),
            time_us(row.total_us),
            f"{row.count:,}",
            time_us(row.mean_us),
            f"{100 * row.share:.1f}%",
        )
    if unattributed_us and total_us:
        t.add_row(
            Text(f"[no op: {unattributed_why or 'launches outside ops'}]", style="italic"),
            time_us(unattributed_us), "", "", f"{100 * unattributed_us / total_us:.1f}%",
        )  # fmt: skip
    return t


def _gemm_table(rows: list[GemmRow], top: int) -> Table:
    t = Table(
        title="GEMM shapes", title_justify="left", title_style="bold", box=box.SIMPLE_HEAD,
        pad_edge=False, padding=(0, 1), show_edge=False,
    )  # fmt: skip
    for name in ("op", "B x M x N x K", "dtype", "calls", "time", "TFLOP/s", "TB/s"):
        t.add_column(name, justify="left" if name in ("op", "B x M x N x K", "dtype") else "right")
    for g in rows[:top]:
        rate, tbs = g.tflops_per_s, g.tb_per_s
        t.add_row(
            Text(g.op),
            f"{g.B}x{g.M}x{g.N}x{g.K}",
            Text(str(g.dtype)),
            f"{g.calls:,}",
            time_us(g.kernel_time_us.sum),
            "?" if rate is None else f"{rate:.1f}",
            "?" if tbs is None else f"{tbs:.2f}",
        )
    return t


def _line(title: str, text: str) -> Text:
    return Text.assemble((title + ": ", "bold"), text)


def _summaries(r: RankReport) -> list[Text]:
    """One line each for idle time and its causes, launches, synchronisation, copies and
    op categories, when known."""
    out = []
    idle = r.idle
    if idle is not None and idle.total_us:
        total = idle.total_us
        causes = ", ".join(f"{c.label} {percent(c.time_us, total)}" for c in idle.causes[:4])
        out.append(_line("Idle", f"{time_us(total)} in {idle.gaps:,} gaps, explained by " + causes))
    la = r.launch
    if la is not None and la.launches:
        text = (
            f"{la.launches:,} launches, median {time_us(la.launch_us.median)} on the CPU "
            f"vs {time_us(la.gpu_us.median)} on the GPU; "
            f"{100 * la.share_shorter_than_launch:.0f}% run shorter than their launch"
        )
        q = la.queue_depth
        if q is not None:
            text += f"; queue depth mean {q.mean:.2f}, empty {100 * q.share_empty:.0f}% of the time"
        if la.launch_bound.phases:
            text += (
                f"; {la.launch_bound.phases} launch-bound phases "
                f"({time_us(la.launch_bound.time_us)})"
            )
        out.append(_line("Launch", text))
    sy = r.sync
    if sy is not None and sy.calls:
        calls = ", ".join(f"{name} {c.count:,}" for name, c in sy.by_call.items())
        out.append(
            _line(
                "Sync",
                f"{sy.calls:,} calls ({calls}) block the CPU {time_us(sy.blocked_us)}; they "
                f"cost the GPU {time_us(sy.gpu_idle_caused_us)} of idle",
            )
        )
    mt = r.memory_traffic
    if mt is not None and mt.copies:
        kinds = "; ".join(
            f"{k.direction or k.name} {k.count:,}"
            + (f", {size(k.bytes)}" if k.bytes is not None else "")
            for k in mt.by_kind
        )
        text = f"{mt.copies:,} ({kinds})"
        if mt.small_copies.count:
            text += f"; {mt.small_copies.count:,} under {size(mt.small_copies.threshold_bytes)}"
        if mt.in_step_loop is not None and mt.in_step_loop.copies:
            text += f"; {mt.in_step_loop.copies:,} inside the step loop"
        out.append(_line("Copies", text))
    if r.op_categories:
        parts = ", ".join(f"{c.category} {100 * c.share:.0f}%" for c in r.op_categories[:6])
        out.append(_line("GPU time by category", parts))
    g = r.graph_replays
    if g is not None:
        text = (
            f"{g.activities:,} activities of {g.launches:,} graph launches, "
            f"{time_us(g.gpu_time_us)} ({100 * g.share_of_gpu_time:.0f}% of GPU time)"
        )
        if g.capture:
            text += f"; {time_us(g.attributed_us)} hung under the captured ops"
        else:
            text += "; no op is known for them (give --capture-trace)"
        out.append(_line("Graph replays", text))
    return out


def _efficiency_head(eff: Efficiency) -> Text:
    dev = eff.device
    mfu, busy = eff.mfu, eff.mfu_busy
    m = eff.modelled
    text = Text.assemble(("Efficiency", "bold"))
    if dev is not None:
        text.append(f" on {dev.name} ({dev.source})")
    text.append(": ")
    if mfu is not None:
        text.append(f"MFU {100 * mfu:.2f}%", style="bold")
        text.append(f" (over busy time {100 * (busy or 0):.2f}%); ")
    rate = eff.achieved_tflops_per_s
    if rate is not None:
        text.append(
            f"modelled ops {rate:.1f} TFLOP/s over {time_us(m.kernel_time_us)} "
            f"({100 * (m.share_of_busy or 0):.0f}% of busy time)"
        )
    return text


def _efficiency_table(rows: list[ShapeRate], top: int, width: int) -> Table:
    t = Table(
        title="Ops by achieved rate (modelled FLOPs and bytes)", title_justify="left",
        title_style="bold", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1),
        show_edge=False,
    )  # fmt: skip
    op_width = max(20, width - 66)
    t.add_column("op", no_wrap=True, overflow="ellipsis", max_width=op_width)
    t.add_column("prec", no_wrap=True, max_width=9)
    for name in ("calls", "time", "TFLOP/s", "% peak", "% roof", "bound"):
        t.add_column(name, justify="right" if name != "bound" else "left", no_wrap=True)
    pct = lambda v: "?" if v is None else f"{100 * v:.1f}"  # noqa: E731
    shown = rows[:top]
    ops = [f"{row.op} {shape_params(row.params)}".strip() for row in shown]
    for row, op in zip(shown, table_labels(ops, op_width), strict=True):
        rate = row.tflops_per_s
        t.add_row(
            Text(op),
            Text(str(row.precision or row.dtype or "?")),
            f"{row.calls:,}",
            time_us(row.kernel_time_us.sum),
            "?" if rate is None else f"{rate:.1f}",
            pct(row.pct_of_peak),
            pct(row.pct_of_roofline),
            str(row.bound or ""),
        )
    return t


def _stack_line(stack: list[str]) -> str:
    shown = [short_frame(f) for f in stack[-STACK_FRAMES:]]
    return ("… > " if len(stack) > len(shown) else "") + " > ".join(shown)


FIGURES = 4  # labelled figures shown per finding
ITEMS = 3  # named things (collectives, shapes, calls) shown per finding


def _finding(f: Finding) -> Group:
    head = Text()
    head.append(f"[{f.severity}]", style=_SEVERITY_STYLE.get(f.severity, "bold"))
    head.append(" ")
    head.append(f.title, style="bold")
    head.append(f"  ~{time_us(f.cost_us)}, {100 * f.share_of_gpu_time:.1f}% of GPU time",
                style="bold")  # fmt: skip
    lines: list[Text] = [Text(f.summary)]
    figures = " · ".join(f"{x.label} {figure_text(x)}" for x in f.figures[:FIGURES])
    if figures:
        lines.append(Text(figures, style="dim"))
    for item in f.items[:ITEMS]:
        cost = f" {time_us(item.cost_us)}" if item.cost_us is not None else ""
        detail = f" ({item.detail})" if item.detail else ""
        lines.append(Text(f"- {item.name}{cost}{detail}"))
    for s in f.top_stacks[:2]:
        lines.append(Text(f"from: {_stack_line(s.stack)} ({time_us(s.cost_us)})"))
    lines.append(Text.assemble(("fix: ", "green"), f.fix))
    lines.append(Text(f"estimate: {f.assumption}", style="dim"))
    # Wrapped lines stay indented under the finding's head.
    return Group(head, Padding(Group(*lines), (0, 0, 0, 2)))


def render_rank(console: Console, r: RankReport, top: int) -> None:
    ascii_only = not console.encoding.lower().startswith("utf")
    console.rule(Text(f"{rank_title(r)}", style="bold"), align="left")
    console.print(Text(r.path, style="dim"), overflow="ellipsis", no_wrap=True)
    tb = r.time_breakdown
    breakdown = _breakdown(r, ascii_only)
    if breakdown is not None:
        console.print(
            Text.assemble(
                ("GPU time breakdown: ", "bold"),
                (time_us(tb.total), "bold"),
                f" total; busy {time_us(tb.busy)} ({percent(tb.busy, tb.total)}); "
                f"communication {time_us(tb.communication)}, "
                f"memcpy {time_us(tb.memcpy)} in all",
            )
        )
        console.print(breakdown)
        out = r.launch_not_in_trace
        if out is not None:
            console.print(
                Text(
                    f"{out.activities:,} activities ({time_us(out.gpu_time_us)}, "
                    f"{100 * out.share_of_busy:.1f}% of busy time) were launched before the "
                    "profiler's window: counted here, left out by TraceLens",
                    style="italic",
                )
            )
    for line in _summaries(r):
        console.print(line)
    if r.top_kernels:
        console.print(_rows_table("Top kernels by GPU time", r.top_kernels, top, console.width))
    if r.top_ops:
        console.print(
            _rows_table(
                "Top ops (share of all GPU time)", r.top_ops, top, console.width,
                r.top_ops_unattributed_us, sum(x.time_us for x in r.op_categories),
                r.top_ops_unattributed_why or "",
            )
        )  # fmt: skip
    sk = r.short_kernels
    if sk.kernels:
        console.print(
            f"Short kernels (< {sk.threshold_us:g} us): {sk.count:,} of "
            f"{sk.kernels:,} ({100 * sk.share_of_kernels:.1f}%), {time_us(sk.time_us)}"
        )
    eff = r.efficiency
    if eff is not None and eff.ops:
        console.print(_efficiency_head(eff))
        console.print(_efficiency_table(eff.ops, top, console.width))
    elif r.gemm:
        console.print(_gemm_table(r.gemm, top))
    findings = r.findings
    console.print(Text(f"Findings ({len(findings)})" if findings else "No findings", style="bold"))
    for f in findings:
        console.print(_finding(f))
    for note in r.notes:
        console.print(Text(f"note: {note}", style="italic"))
    for key, why in r.unavailable.items():
        console.print(Text(f"not available: {label(key)}: {why}", style="italic"))
    console.print()


def job_lines(job: Job | None) -> list[str]:
    """The job across its ranks, in a few lines (nothing for a single trace)."""
    if job is None or job.ranks < 2:
        return []
    if job.unavailable:
        return [f"job of {job.ranks} traces: {job.unavailable}"]
    t, f, c = job.time_breakdown_sum or {}, job.fractions or {}, job.computation_us
    parts = ", ".join(
        f"{label(k)} {percent(f[k], 1.0)}"
        for k in ("computation", "exposed_communication", "exposed_memcpy", "idle")
    )
    what = "ranks" if job.same_job else "traces (no rank in them: not one job)"
    lines = [f"job: {job.ranks} {what}, GPU time {time_us(t['total'])} in all: {parts}"]
    if c is not None:
        lines.append(
            f"computation per {'rank' if job.same_job else 'trace'}: "
            f"min {time_us(c.min)}, median {time_us(c.median)}, max {time_us(c.max)} "
            f"(spread {percent(job.computation_spread or 0.0, 1.0)}; slowest: "
            f"{job.slowest_rank})"
        )
    for s in job.stragglers:
        lines.append(
            f"straggler: {s.rank} computes {percent(s.over_median, 1.0)} longer "
            "than the median rank; the others wait for it at each collective"
        )
    for row in job.findings[:5]:
        lines.append(
            f"finding on {len(row.ranks)} of {job.ranks} "
            f"{'ranks' if job.same_job else 'traces'}: {row.title} "
            f"({time_us(row.cost_us)} in all)"
        )
    return lines


_SHORT_PART = {
    "computation": "compute",
    "exposed_communication": "exp. comm",
    "exposed_memcpy": "exp. copy",
    "idle": "idle",
}


def _ranks_table(ranks: list[RankReport], width: int) -> Table:
    """One row per rank: its breakdown and its costliest finding."""
    t = Table(
        title="Ranks", title_justify="left", title_style="bold", box=box.SIMPLE_HEAD,
        pad_edge=False, padding=(0, 1), show_edge=False,
    )  # fmt: skip
    t.add_column("rank", no_wrap=True, overflow="ellipsis", max_width=24)
    for key, _name in PARTS:
        t.add_column(_SHORT_PART[key], justify="right", no_wrap=True)
    t.add_column("top finding", no_wrap=True, overflow="ellipsis", max_width=max(20, width - 50))
    for r in ranks:
        tb = r.time_breakdown
        shares = [
            percent(float(getattr(tb, key)), tb.total) if tb.total else "-" for key, _ in PARTS
        ]
        top = r.findings[0].title if r.findings else "none"
        t.add_row(Text(r.name), *shares, Text(top))
    return t


def chosen_ranks(report: Report, wanted: list[str]) -> list[RankReport]:
    """The ranks ``--rank`` names: a rank number, a rank's name or file name, or ``all``."""
    if "all" in wanted:
        return list(report.ranks)
    keys = set(wanted)
    return [
        r for r in report.ranks if {r.rank or "", r.name, r.path, r.path.rsplit("/", 1)[-1]} & keys
    ]


def _render_all(
    console: Console, report: Report, top: int, detail: list[str] | None = None
) -> None:
    if len(report.ranks) == 1:
        render_rank(console, report.ranks[0], top)
        return
    # Several ranks: the job first, a row per rank, each rank's report on request.
    lines = job_lines(report.job)
    if lines:
        console.rule(Text("job", style="bold"), align="left")
        for line in lines:
            console.print(Text(line))
    console.print(_ranks_table(report.ranks, console.width))
    shown = chosen_ranks(report, detail or [])
    for r in shown:
        render_rank(console, r, top)
    if len(shown) < len(report.ranks):
        console.print(
            Text(
                "each rank's report: --rank N (a rank, repeatable) or --rank all; "
                "--json and -o hold every rank's",
                style="italic",
            )
        )


def render_terminal(
    report: Report,
    top: int = 10,
    console: Console | None = None,
    detail: list[str] | None = None,
) -> None:
    """The report; of several ranks, the job and a row per rank first, the full report of
    the ranks in ``detail`` (numbers, names or ``all``) after."""
    console = console or make_console()
    report = visible_data(report)  # names from the trace: no escape sequence reaches the terminal
    if console.is_terminal:
        _render_all(console, report, top, detail)
        return
    # Into a pipe or file: plain text without the tables' trailing padding.
    with console.capture() as cap:
        _render_all(console, report, top, detail)
    text = "\n".join(line.rstrip() for line in cap.get().splitlines())
    console.file.write(text + "\n")


def render_text(
    report: Report, top: int = 10, width: int = MAX_WIDTH, detail: list[str] | None = None
) -> str:
    """The report as plain text (no styles), as it is printed into a pipe."""
    import io

    buf = io.StringIO()
    render_terminal(report, top, make_console(buf, width), detail)
    return buf.getvalue()


__all__ = ["make_console", "render_terminal", "render_text"]
