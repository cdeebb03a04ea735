"""A static SVG flame graph, as FlameGraph's flamegraph.pl draws one: the image people paste
into tickets and wikis, which still zooms on click and searches when opened in a browser.

Layout and behaviour follow flamegraph.pl's: 1200 px wide, 16 px per frame, Verdana 12 px,
an ``all`` root, siblings in name order (numbers compared as numbers), frames narrower than
``min_width`` pixels left out (so a profile of any size stays a few MB and legible), a title
and subtitle, a details line that names the frame under the pointer, *Reset Zoom* and
*Search* (also Ctrl-F, Esc) with the matched share. Colours are those of the HTML page, by
frame kind (``render/palette.py``). Labels that do not fit are elided in the middle, so the
distinguishing end of a name stays; FlameGraph's kind marks (``_[k]``, ``_[j]``) are not
shown. Every name is XML-escaped; characters XML cannot hold are replaced. The script is
``assets/flamegraph_svg.js``, embedded.
"""

from __future__ import annotations

import os
import re
from functools import cache
from importlib import resources

import numpy as np

from aiflame.model import CallTree, FrameKind, Profile
from aiflame.render.palette import SEARCH_COLOR, kind_color
from aiflame.render.units import format_value

WIDTH = 1200
FRAME_HEIGHT = 16
FONT_SIZE = 12
FONT_WIDTH = 0.59  # average glyph width relative to the font size (Verdana), as flamegraph.pl
XPAD = 10
MIN_WIDTH = 0.1  # pixels
_LEVEL_COST = 100  # nodes a numpy step per level is worth (deeper: placed node by node)
_TOP = FONT_SIZE * 3  # title, buttons
_BOTTOM = FONT_SIZE * 2 + 10  # details line
_SUBTITLE = FONT_SIZE * 2
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
_DIGITS = re.compile(r"(\d+)")
ELLIPSIS = "\u2026"


@cache
def _script() -> str:
    text = resources.files("aiflame.render").joinpath("assets", "flamegraph_svg.js")
    source = text.read_text("utf-8")
    if "]]>" in source:
        raise ValueError("the SVG script contains ']]>'")
    return source


def escape(text: str) -> str:
    """``text`` safe in XML character data and attribute values."""
    text = _NOT_XML.sub("\ufffd", text)
    return (
        text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    )


_ANNOTATION = re.compile(r"_\[[kwij]\]$")  # FlameGraph's kind marks: the colour says it
# Python's "func (file.py:12)" or "<module> (pkg/x.py)": the location gives way first
_LOCATION = re.compile(r"^(.*\S) \(([^()]*(?::\d+|\.py))\)$")
_TRAILING_NUMBER = re.compile(r"\d+$")


def elide(name: str, chars: int) -> str:
    """``name`` in at most ``chars`` characters, as the HTML page labels its boxes: empty
    when fewer than 3 fit (as flamegraph.pl, which draws no text there); a Python frame's
    ``(file.py:12)`` is cut from its start, then dropped; a C++ signature loses its return
    ``void`` and its parameters (``void at::kern<T>(int, float*)`` -> ``at::kern<T>``);
    what remains is cut in the middle (``nn…Layer_0``), a trailing number kept whole."""
    if chars < 3:
        return ""
    if len(name) <= chars:
        return name
    m = _LOCATION.match(name)
    if m:
        func, loc = m.group(1), m.group(2)
        room = chars - len(func) - 3  # " (" and ")"
        if room >= 8:
            return f"{func} ({ELLIPSIS}{loc[len(loc) - room + 1 :]})"
        return _elide_middle(func, chars)
    func, params = _split_signature(name)
    if params and len(func) + len(params) <= chars:
        return func + params
    template = _template_parts(func)
    if template:
        return _fit_template(*template, chars)
    return _elide_middle(func, chars)


def _template_parts(name: str) -> tuple[str, str] | None:
    """``ns::kern<args>`` -> (``ns::kern``, ``args``); None for other names."""
    if not name.endswith(">"):
        return None
    depth = 0
    for i in range(len(name) - 1, 0, -1):
        c = name[i]
        if c == ">":
            depth += 1
        elif c == "<":
            depth -= 1
            if depth == 0:
                head = name[:i]
                return (head, name[i + 1 : -1]) if _IDENTIFIER_END.search(head) else None
    return None


_IDENTIFIER_END = re.compile(r"[A-Za-z0-9_]$")
_LAMBDA_EDG = re.compile(r"\[lambda\([^()]*\) \(instance (\d+)\)\]")  # nvcc's
_LAMBDA_ITANIUM = re.compile(r"\{lambda\([^()]*\)#(\d+)\}")
_QUALIFIERS = re.compile(r"(?:[A-Za-z_][A-Za-z0-9_]*::)+(?=[A-Za-z_~])")


def _is_one_argument(key: str) -> bool:
    """``PdV_kernel::λ2``, not ``4, FillFunctor<float>`` nor ``…, MulFunctor<float>``."""
    if ELLIPSIS in key or not re.search(r"[A-Za-z_]{3}", key):
        return False
    depth = 0
    for c in key:
        if c in "<([{":
            depth += 1
        elif c in ">)]}":
            depth -= 1
        elif c == "," and depth == 0:
            return False
    return True


def _fit_template(head: str, args: str, room: int) -> str:
    """A templated kernel's label keeps what tells it apart from its siblings: the
    function's own name (namespaces go first) and its arguments, lambdas written ``λN`` and
    names unqualified but for where a lambda is defined, each cut in the middle when both do
    not fit (``par_r…ernel<update_h…nel::λ13>``, not ``clove…1)]>``)."""
    key = _LAMBDA_EDG.sub(r"λ\1", args)
    key = _LAMBDA_ITANIUM.sub(r"λ\1", key)
    key = _QUALIFIERS.sub("", key.replace("(anonymous namespace)::", ""))
    short_head = head.rsplit("::", 1)[-1]
    for h in (head, short_head):
        if len(h) + len(key) + 2 <= room:
            return f"{h}<{key}>"
    avail = room - 2
    if avail < 12:  # room for one of the two: the argument where it alone tells kernels apart
        return _elide_middle(key if _is_one_argument(key) else short_head, room)
    key_room = min(len(key), avail - min(len(short_head), max(4, avail * 2 // 5)))
    return f"{_elide_middle(short_head, avail - key_room)}<{_elide_middle(key, key_room)}>"


def _split_signature(text: str) -> tuple[str, str]:
    """``void ns::kern<T>(int, float*)`` -> (``ns::kern<T>``, ``(int, float*)``); a name
    whose ``(`` follows a space (``Memcpy DtoH (Device -> Pinned)``) is no signature."""
    if not text.endswith(")"):
        return text, ""
    depth = 0
    for i in range(len(text) - 1, 0, -1):
        c = text[i]
        if c == ")":
            depth += 1
        elif c == "(":
            depth -= 1
            if depth == 0:
                if text[i - 1] == " " or i < 2:
                    break
                return text[:i].removeprefix("void "), text[i:]
    return text, ""


def _elide_middle(text: str, room: int) -> str:
    """The start and the end of ``text`` around an ``…``; a number at the end stays whole
    while there is room for it (``n…10``, not ``nn…0``)."""
    if len(text) <= room:
        return text
    head = room // 2
    number = _TRAILING_NUMBER.search(text)
    if number and room - 2 >= len(number.group()):
        head = min(head, room - 1 - len(number.group()))
    tail = room - 1 - head
    return text[:head] + ELLIPSIS + (text[len(text) - tail :] if tail else "")


def _natural(text: str) -> list[object]:
    return [int(p) if p.isdigit() else p for p in _DIGITS.split(text)]


def _number(v: float) -> str:
    """Coordinates with enough digits that zooming into a 0.1 px frame stays exact."""
    text = f"{v:.4f}".rstrip("0").rstrip(".")
    return text or "0"


def layout(
    tree: CallTree, column: int, inner_width: float, min_width: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """(nodes, x, width, total) of the frames drawn, in pixels: every node with a value at
    least ``min_width`` wide, siblings in natural name order, x from the image's left pad;
    ``total`` is the whole profile's value (the ``all`` frame)."""
    profile = tree.profile
    total = np.clip(tree.total_value[:, column], 0.0, None) if len(tree) else np.zeros(0)
    grand = float(np.clip(profile.values[:, column], 0.0, None).sum()) if len(profile) else 0.0
    if grand <= 0 or not len(tree):
        return np.zeros(0, np.int64), np.zeros(0), np.zeros(0), grand
    scale = inner_width / grand
    live = np.nonzero(total > 0)[0]
    names = profile.strings.strings
    frame_names = np.asarray(profile.frames.name, dtype=np.int64)
    name_id = frame_names[tree.frame[live]]
    distinct = np.unique(name_id)
    rank_of = np.zeros(int(distinct.max()) + 1 if distinct.size else 1, dtype=np.int64)
    ranked = sorted(distinct.tolist(), key=lambda i: _natural(names[i]))
    rank_of[ranked] = np.arange(len(ranked))
    parent = tree.parent[live]
    order = np.lexsort((live, rank_of[name_id], parent))  # by parent, then name
    sibs, par, tot = live[order], parent[order], total[live[order]]
    csum = np.cumsum(tot)
    first = np.ones(len(sibs), dtype=bool)
    first[1:] = par[1:] != par[:-1]
    group_start = np.maximum.accumulate(np.where(first, np.arange(len(sibs)), 0))
    before = csum - tot - (csum[group_start] - tot[group_start])  # earlier siblings' total
    offset = np.zeros(len(tree))
    offset[sibs] = before
    x = np.zeros(len(tree))
    # A parent's id is below its children's: ascending ids place every parent first.
    # Level by level while levels are wide; node by node for slices nested deep.
    depth = tree.depth[live]
    by_level = np.argsort(depth, kind="stable")
    bounds = np.searchsorted(depth[by_level], np.arange(int(depth.max(initial=-1)) + 2))
    if (len(bounds) - 1) * _LEVEL_COST > live.size:
        up_l, off_l, x_l = tree.parent.tolist(), offset.tolist(), x.tolist()
        for i in live.tolist():
            p = up_l[i]
            x_l[i] = off_l[i] + (x_l[p] if p >= 0 else 0.0)
        x = np.asarray(x_l)
    else:
        for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            at = live[by_level[lo:hi]]
            up = tree.parent[at]
            x[at] = offset[at] + np.where(up >= 0, x[np.maximum(up, 0)], 0.0)
    width = total * scale
    drawn = live[width[live] >= min_width]
    return drawn, x[drawn] * scale + XPAD, width[drawn], grand


def render_svg(
    profile: Profile,
    *,
    title: str | None = None,
    subtitle: str | None = None,
    metric: str | None = None,
    inverted: bool = False,
    width: int = WIDTH,
    min_width: float = MIN_WIDTH,
) -> str:
    """The SVG document of ``profile``'s flame graph of ``metric`` (icicle if ``inverted``)."""
    column = profile.type_index(metric)
    sample_type = profile.sample_types[column]
    tree = CallTree.from_profile(profile)
    inner = width - 2 * XPAD
    nodes, xs, ws, grand = layout(tree, column, inner, min_width)
    depths = tree.depth[nodes] + 1  # the "all" frame is depth 0
    max_depth = int(depths.max()) if depths.size else 0
    title = title or _default_title(profile)
    subtitle = subtitle if subtitle is not None else _default_subtitle(profile, column, grand)
    top = _TOP + (_SUBTITLE if subtitle else 0)
    height = (max_depth + 1) * FRAME_HEIGHT + top + _BOTTOM

    def y_of(depth: int) -> float:
        if inverted:
            return top + depth * FRAME_HEIGHT
        return height - _BOTTOM - (depth + 1) * FRAME_HEIGHT + 1

    def value_text(v: float) -> str:
        text = format_value(v, sample_type.unit)
        return f"{text} {sample_type.name}" if sample_type.unit == "count" else text

    out = [_header(width, height, title, subtitle, inverted, y_of(0), sample_type.name)]
    all_info = f"all ({value_text(grand)}, 100%)"
    out.append(_frame("all", all_info, XPAD, y_of(0), inner, "rgb(205,205,205)", inner))
    strings = profile.strings.strings
    frames = profile.frames
    totals = tree.total_value[:, column]
    self_values = tree.self_value[:, column]
    by_place = np.lexsort((xs, depths))
    for k in by_place.tolist():
        node = int(nodes[k])
        fid = int(tree.frame[node])
        raw = strings[frames.name[fid]]
        name = _ANNOTATION.sub("", raw)
        v = float(totals[node])
        info = f"{value_text(v)}, {100 * v / grand:.2f}%"
        own = float(self_values[node])
        if own > 0 and own != v:
            info += f"; self {value_text(own)}"
        color = kind_color(FrameKind(int(frames.kind[fid])), raw)
        w = float(ws[k])
        out.append(
            _frame(name, f"{name} ({info})", float(xs[k]), y_of(int(depths[k])), w, color, w)
        )
    out.append("</g>\n</svg>\n")
    return "".join(out)


def _frame(name: str, info: str, x: float, y: float, w: float, color: str, text_w: float) -> str:
    text = elide(name, int(text_w / (FONT_SIZE * FONT_WIDTH)))
    label = (
        f'<text x="{_number(x + 3)}" y="{_number(y + 11)}">{escape(text)}</text>' if text else ""
    )
    return (
        f"<g><title>{escape(info)}</title>"
        f'<rect x="{_number(x)}" y="{_number(y)}" width="{_number(w)}" '
        f'height="{FRAME_HEIGHT - 1}" fill="{color}" rx="2" ry="2"/>{label}</g>\n'
    )


def _default_title(profile: Profile) -> str:
    title = profile.meta.get("title")
    if isinstance(title, str) and title:
        return title
    source = profile.meta.get("source")
    if isinstance(source, str) and source and source != "-":
        return f"Flame graph of {os.path.basename(source)}"
    return "Flame graph"


def _default_subtitle(profile: Profile, column: int, grand: float) -> str:
    st = profile.sample_types[column]
    return f"{st.name}: {format_value(grand, st.unit)} in all"


def _header(
    width: int, height: int, title: str, subtitle: str, inverted: bool, base: float, metric: str
) -> str:
    mid = width / 2
    sub = (
        f'<text id="subtitle" x="{_number(mid)}" y="{FONT_SIZE * 4}">{escape(subtitle)}</text>\n'
        if subtitle
        else ""
    )
    return (
        '<?xml version="1.0" encoding="UTF-8" standalone="no"?>\n'
        f'<svg version="1.1" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        'xmlns="http://www.w3.org/2000/svg" onload="init(evt)" '
        f'data-xpad="{XPAD}" data-frame-height="{FRAME_HEIGHT}" '
        f'data-char-width="{FONT_SIZE * FONT_WIDTH}" data-base="{_number(base)}" '
        f'data-inverted="{int(inverted)}" data-search-color="{SEARCH_COLOR}" '
        f'data-metric="{escape(metric)}">\n'
        "<style>\n"
        f"text {{ font-family: Verdana, sans-serif; font-size: {FONT_SIZE}px; fill: #000; }}\n"
        "#title { text-anchor: middle; font-size: 17px; }\n"
        "#subtitle { text-anchor: middle; fill: #555; }\n"
        "#search, #unzoom { cursor: pointer; }\n"
        "#search { opacity: 0.5; } #search:hover, #search.show { opacity: 1; }\n"
        "#frames > g:hover > rect { stroke: #000; stroke-width: 0.5; }\n"
        "#frames > g { cursor: pointer; }\n"
        "#frames text { pointer-events: none; }\n"
        ".hide { display: none; }\n"
        ".parent { opacity: 0.5; }\n"
        "</style>\n"
        f'<script type="text/ecmascript"><![CDATA[\n{_script()}]]></script>\n'
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fbfbf8"/>\n'
        f'<text id="title" x="{_number(mid)}" y="{FONT_SIZE * 2}">{escape(title)}</text>\n'
        f"{sub}"
        f'<text id="unzoom" class="hide" x="{XPAD}" y="{FONT_SIZE * 2}">Reset Zoom</text>\n'
        f'<text id="search" x="{width - XPAD - 100}" y="{FONT_SIZE * 2}">Search</text>\n'
        f'<text id="details" x="{XPAD}" y="{height - _BOTTOM / 2 + 4}"> </text>\n'
        f'<text id="matched" x="{width - XPAD - 100}" y="{height - _BOTTOM / 2 + 4}"> </text>\n'
        '<g id="frames">\n'
    )
