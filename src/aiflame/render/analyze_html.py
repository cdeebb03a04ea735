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

from aiflame.render.html import _asset, _inline_script, script_json
from aiflame.render.visible import visible_data
from aiflame.version import __version__

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
        return f"{_shape_name(d)} {d.get('dtype', '')}".strip()
    for k in ("name", "op", "kernel"):
        if isinstance(d.get(k), str):
            return d[k]
    return "?"


def _shape_name(row: dict[str, Any]) -> str:
    """``aten::addmm 141x512x512`` for a GEMM row, else the op and its parameters."""
    params = row.get("params")
    p: dict[str, Any] = params if isinstance(params, dict) else dict(row)
    if all(k in p for k in ("M", "N", "K")):
        b = p.get("B", 1)
        dims = (f"{b}x" if b not in (1, None) else "") + f"{p['M']}x{p['N']}x{p['K']}"
        return f"{row.get('op', '?')} {dims}"
    extra = " ".join(
        f"{k}={'x'.join(map(str, v)) if isinstance(v, list) else v}"
        for k, v in p.items()
        if not isinstance(v, bool | dict)
    )
    return f"{row.get('op', '?')} {extra}".strip()


def _efficiency_points(rank: dict[str, Any]) -> dict[str, Any] | None:
    """Points and roofs from the analysis' efficiency section (per precision peaks)."""
    eff = rank.get("efficiency") or {}
    rows = [r for r in eff.get("ops") or [] if _first(r, _INTENSITY) and _first(r, _RATE)]
    if not rows:
        return None
    dev = eff.get("device") or {}
    tflops = dev.get("tflops")
    peaks: dict[str, Any] = tflops if isinstance(tflops, dict) else {}
    points, roofs = [], {}
    for r in rows:
        prec = str(r.get("precision") or r.get("dtype") or "")
        peak = _first(r, ("peak_tflops",)) or _first(peaks, (prec,))
        if peak:
            roofs[prec] = peak
        points.append({
            "name": _shape_name(r), "ai": _first(r, _INTENSITY), "tflops": _first(r, _RATE),
            "time_us": (r.get("kernel_time_us") or {}).get("sum"), "precision": prec,
            "peak": peak, "pct_of_roofline": r.get("pct_of_roofline"), "bound": r.get("bound"),
        })  # fmt: skip
    bw = _first(dev, ("tb_per_s",)) if dev else None
    return {
        "points": points,
        "roofs": [
            {"label": k, "tflops": v} for k, v in sorted(roofs.items(), key=lambda kv: kv[1])
        ],
        "peak_tflops": max(roofs.values()) if roofs else None,
        "peak_tb_per_s": bw,
        "device": f"{dev.get('name')} ({dev.get('source')})" if dev.get("name") else None,
        "source": "efficiency",
    }


def roofline_data(rank: dict[str, Any]) -> dict[str, Any]:
    """The points (ops with an arithmetic intensity and an achieved rate) and roofs of a rank.

    From the efficiency section (modelled GEMM, convolution and attention shapes with the
    device's peak per precision) when the analysis has one; otherwise from whatever rows
    carry both numbers (the GEMM table) and peaks wherever a key names them. ``missing``
    says what cannot be drawn and why.
    """
    found = _efficiency_points(rank)
    if found is None:
        found = _generic_points(rank)
    why = rank.get("unavailable") or {}
    missing = []
    if not found["points"]:
        missing.append(
            why.get("efficiency")
            or "no operator with both FLOPs and bytes: the roofline needs recorded input shapes "
            "(PyTorch profiler record_shapes=True) of GEMM, convolution or attention ops"
        )
    if found["peak_tflops"] is None or found["peak_tb_per_s"] is None:
        missing.append(
            why.get("roofline")
            or why.get("mfu")
            or "the device's peak compute and memory bandwidth are not in the analysis (no "
            "deviceProperties or an unknown GPU): points are drawn without roofs"
        )
    found["missing"] = missing
    return found


def _generic_points(rank: dict[str, Any]) -> dict[str, Any]:
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
    return {
        "points": points,
        "roofs": [{"label": "peak", "tflops": peak_compute}] if peak_compute else [],
        "peak_tflops": peak_compute,
        "peak_tb_per_s": peak_bw,
        "device": None,
        "source": "rows",
    }


def render_report_html(
    report: dict[str, Any],
    *,
    timelines: list[dict[str, Any]] | None = None,
    links: list[list[dict[str, Any]]] | None = None,
    section_links: list[dict[str, list[str | None]]] | None = None,
    flame_href: str | None = None,
    title: str = "aiflame analyze",
) -> str:
    """The page of ``report`` (the analysis JSON).

    ``timelines[r]``: device -> :func:`~aiflame.analysis.busy_timeline.device_timeline` of
    rank ``r``; ``links[r][f]``: ``{"main": fragment, "stacks": [fragment per evidence
    stack]}``, the flame graph URL fragments of finding ``f`` of rank ``r`` (None: no link);
    ``section_links[r]``: the fragments of the stacks in the rank's sections, by their path
    in the report (``"idle/top_stacks/host_wait"``);
    ``flame_href``: the flame graph page, relative to this one.
    """
    ranks = report.get("ranks", [])
    data: dict[str, Any] = {
        "report": visible_data(report),  # names shown as they are: bidi controls spelled out
        "timelines": timelines or [{} for _ in ranks],
        "links": links or [[{}] * len(r.get("findings", [])) for r in ranks],
        "section_links": section_links or [{} for _ in ranks],
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
