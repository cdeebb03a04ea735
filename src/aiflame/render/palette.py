"""Frame colours by kind, as the HTML page draws them (``assets/format.js``: ``PALETTE``
and ``kindColor``), for renderers that draw outside the page (SVG). A test checks that
both tables agree."""

from __future__ import annotations

import math

from aiflame.model import FrameKind
from aiflame.model.gpu import stall_class

# kind slug -> (base r, g, b), (range r, g, b): colour = base + v * range, v in [0, 1)
PALETTE: dict[str, tuple[tuple[int, int, int], tuple[int, int, int]]] = {
    "gpu-instruction": ((60, 185, 60), (60, 60, 50)),
    "gpu-source": ((70, 200, 200), (50, 45, 45)),
    "gpu-kernel": ((120, 205, 130), (50, 45, 40)),
    "native": ((215, 70, 60), (40, 70, 60)),
    "cpp": ((205, 190, 55), (45, 50, 40)),
    "kernel": ((230, 130, 30), (25, 60, 30)),
    "python": ((95, 150, 230), (50, 50, 25)),
    "jit": ((200, 120, 215), (40, 50, 35)),
    "runtime": ((150, 115, 220), (40, 40, 30)),
    "label": ((150, 170, 200), (25, 25, 25)),
    "delimiter": ((165, 165, 165), (0, 0, 0)),
    "unknown": ((205, 185, 155), (30, 30, 30)),
    "gpu-stall": ((175, 175, 175), (30, 30, 30)),
}
# GPU stall reasons by their normalized class (model/gpu.py), as the page's ``STALL_CLASSES``
STALL_CLASSES: dict[str, tuple[tuple[int, int, int], tuple[int, int, int]]] = {
    "memory latency": ((225, 75, 70), (25, 30, 25)),
    "short dependency": ((240, 150, 55), (15, 40, 30)),
    "synchronization": ((165, 105, 215), (30, 30, 25)),
    "front end": ((85, 135, 225), (30, 35, 20)),
    "scheduler/pipe": ((215, 190, 45), (25, 30, 40)),
    "issued": ((160, 205, 160), (20, 20, 20)),
    "other": ((165, 165, 165), (25, 25, 25)),
}
SEARCH_COLOR = "rgb(230,0,230)"


def name_hash(name: str) -> float:
    """FNV-1a of the name's UTF-16 code units (JavaScript's charCodeAt), in [0, 1)."""
    h = 0x811C9DC5
    data = name.encode("utf-16-le", "surrogatepass")
    for i in range(0, len(data), 2):
        h ^= data[i] | (data[i + 1] << 8)
        h = (h * 0x01000193) & 0xFFFFFFFF
    return h / 4294967296


def kind_color(kind: FrameKind | int, name: str) -> str:
    """``rgb(r,g,b)`` of a frame, the same as the page's ``kindColor`` (and, for a stall
    reason, its ``stallColor``: the colour of the reason's class)."""
    slug = FrameKind(kind).slug if kind in FrameKind._value2member_map_ else "unknown"
    if slug == "gpu-stall":
        base, spread = STALL_CLASSES.get(stall_class(name), STALL_CLASSES["other"])
    else:
        base, spread = PALETTE.get(slug, PALETTE["unknown"])
    v = name_hash(name)
    # JavaScript's Math.round (half up), not Python's round (half to even)
    r, g, b = (math.floor(base[i] + v * spread[i] + 0.5) for i in range(3))
    return f"rgb({r},{g},{b})"
