"""The one-screen summary ``aiflame record`` prints: the stacks with the most self time."""

from __future__ import annotations

from dataclasses import dataclass

from aiflame.model import Frame, FrameKind, Profile
from aiflame.render.elide import table_labels
from aiflame.render.units import format_value


@dataclass
class Hotspot:
    stack: int
    value: float
    share: float  # of the metric's total
    frames: list[Frame]  # root first


def top_stacks(profile: Profile, metric: str | None = None, n: int = 10) -> list[Hotspot]:
    """The ``n`` stacks with the largest self value of ``metric``."""
    col = profile.type_index(metric)
    values = [(v, s) for s, v in profile.iter_stack_values(col) if s >= 0 and v > 0]
    total = sum(v for v, _ in values)
    values.sort(key=lambda vs: (-vs[0], vs[1]))
    return [Hotspot(s, v, v / total, profile.stack_frames(s)) for v, s in values[:n]]


def frame_label(frame: Frame) -> str:
    if frame.kind == FrameKind.PYTHON and frame.file and not frame.name.endswith(")"):
        return f"{frame.name} ({frame.file.rsplit('/', 1)[-1]}:{frame.line})"
    return frame.name


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(1, width - 1)] + "…"


HEAD_WIDTH = 19  # "12.3%  123.456 ms  "


def format_hotspot(h: Hotspot, unit: str, width: int, leaf: str | None = None) -> str:
    """``  12.3%  leaf  <- caller <- caller's caller`` cut to ``width`` columns; ``leaf``:
    the leaf's label, if not its name."""
    names = [frame_label(f) for f in reversed(h.frames)]
    if leaf is not None and names:
        names[0] = leaf
    # Leaf first; names from the same Python file line are often repeated wrappers.
    value = format_value(h.value, unit)
    head = f"{h.share * 100:5.1f}% {value:>10}  "
    return _shorten(head + "  <- ".join(names[:4]), width)


def leaf_labels(hot: list[Hotspot], width: int) -> list[str]:
    """The leaves' names, long ones (kernels) elided in the middle so that different leaves
    read differently, with room left for a caller or two."""
    leaves = [frame_label(h.frames[-1]) if h.frames else "" for h in hot]
    return table_labels(leaves, max(20, (width - HEAD_WIDTH) * 2 // 3))


def summary_lines(profile: Profile, width: int = 100, n: int = 10) -> list[str]:
    """Top stacks by self value of the default metric, and of GPU time when there is any."""
    out = []
    metrics = [profile.sample_types[profile.type_index(None)].name]
    totals = profile.totals()
    for extra in ("cpu-samples", "python-samples", "gpu-time"):  # py-spy beside eBPF
        names = [t.name for t in profile.sample_types]
        if extra in names and totals[names.index(extra)] > 0 and extra not in metrics:
            metrics.append(extra)
    for metric in metrics:
        col = profile.type_index(metric)
        unit = profile.sample_types[col].unit
        hot = top_stacks(profile, metric, n if metric == metrics[0] else n // 2)
        if not hot:
            continue
        out.append(f"top stacks by self {metric} (total {format_value(totals[col], unit)}):")
        labels = leaf_labels(hot, width)
        out.extend(
            format_hotspot(h, unit, width, leaf) for h, leaf in zip(hot, labels, strict=True)
        )
    return out
