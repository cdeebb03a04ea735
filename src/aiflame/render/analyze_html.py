"""The HTML report of ``aiflame analyze``: one self-contained file, charts drawn offline.

The page (``assets/report.html``) embeds the analysis JSON, a downsampled busy timeline per
GPU and, per finding, a link into the flame graph page written beside it; ``report.js``
draws everything as DOM and inline SVG (no library, no network). Names from the trace only
ever reach the page as JSON data in a script element and then as ``textContent``.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Iterator
from typing import Any

from aiflame import __version__
from aiflame.render.html import _asset, _inline_script, script_json

_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")

# Where peak numbers may sit in a rank's report, by the names they may have.
_PEAK_COMPUTE = ("peak_tflops", "peak_tflops_per_s", "peak_compute_tflops_per_s")
_PEAK_BANDWIDTH = ("peak_tb_per_s", "peak_bandwidth_tb_per_s", "peak_memory_tb_per_s")
_INTENSITY = ("flops_per_byte", "arithmetic_intensity")
_RATE = ("tflops_per_s", "achieved_tflops_per_s")


def _walk(value: Any) -> Iterator[dict[str, Any]]:
    """Every dict inside ``value``, depth first."""
    if isinstance(value, dict):
        yield value
        for v in value.values():
            yield from _walk(v)
    elif isinstance(value, list):
        for v in value:
            yield from _walk(v)


def _first(d: dict[str, Any], keys: tuple[str, ...]) -> float | None:
    for k in keys:
        v = d.get(k)
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v > 0:
            return float(v)
    return None


def _point_name(d: dict[str, Any]) -> str:
    if all(k in d for k in ("op", "M", "N", "K")):
        return f"{d['op']} {d.get('B', 1)}x{d['M']}x{d['N']}x{d['K']} {d.get('dtype', '')}".strip()
    for k in ("name", "op", "kernel"):
        if isinstance(d.get(k), str):
            return d[k]
    return "?"


def roofline_data(rank: dict[str, Any]) -> dict[str, Any]:
    """The points (ops with an arithmetic intensity and an achieved rate) and roofs of a rank.

    Reads whatever the report has: the GEMM rows and any other rows carrying both numbers,
    and peak compute / bandwidth wherever a key names them. ``missing`` says what cannot
    be drawn and why.
    """
    points: list[dict[str, Any]] = []
    seen: set[tuple[str, float, float]] = set()
    peak_compute = peak_bw = None
    for d in _walk({k: v for k, v in rank.items() if k not in ("findings", "notes")}):
        peak_compute = peak_compute or _first(d, _PEAK_COMPUTE)
        peak_bw = peak_bw or _first(d, _PEAK_BANDWIDTH)
        ai, rate = _first(d, _INTENSITY), _first(d, _RATE)
        if ai is None or rate is None:
            continue
        name = _point_name(d)
        key = (name, round(ai, 6), round(rate, 6))
        if key in seen:
            continue
        seen.add(key)
        time = d.get("kernel_time_us")
        time_sum = time.get("sum") if isinstance(time, dict) else d.get("time_us")
        points.append({"name": name, "ai": ai, "tflops": rate, "time_us": time_sum})
    missing = []
    if not points:
        missing.append(
            "no operator with both FLOPs and bytes: the roofline needs recorded input shapes "
            "(PyTorch profiler record_shapes=True) of GEMM, convolution or attention ops"
        )
    if peak_compute is None or peak_bw is None:
        missing.append(
            "the device's peak compute and memory bandwidth are not in the analysis (no "
            "deviceProperties or an unknown GPU): points are drawn without roofs"
        )
    return {
        "points": points,
        "peak_tflops": peak_compute,
        "peak_tb_per_s": peak_bw,
        "missing": missing,
    }


def render_report_html(
    report: dict[str, Any],
    *,
    timelines: list[dict[str, Any]] | None = None,
    links: list[list[dict[str, Any]]] | None = None,
    flame_href: str | None = None,
    title: str = "aiflame analyze",
) -> str:
    """The page of ``report`` (the analysis JSON).

    ``timelines[r]``: device -> :func:`~aiflame.analysis.busy_timeline.device_timeline` of
    rank ``r``; ``links[r][f]``: ``{"main": fragment, "stacks": [fragment per evidence
    stack]}``, the flame graph URL fragments of finding ``f`` of rank ``r`` (None: no link);
    ``flame_href``: the flame graph page, relative to this one.
    """
    ranks = report.get("ranks", [])
    data = {
        "report": report,
        "timelines": timelines or [{} for _ in ranks],
        "links": links or [[{}] * len(r.get("findings", [])) for r in ranks],
        "roofline": [roofline_data(r) for r in ranks],
        "flame": flame_href,
        "title": title,
    }
    generator = f"aiflame {__version__}"
    values = {
        "title": html.escape(title),
        "generator": html.escape(generator),
        "css": _asset("report.css"),
        "data": script_json(data),
        "scripts": _inline_script(_asset("report.js")),
    }
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], _asset("report.html"))
