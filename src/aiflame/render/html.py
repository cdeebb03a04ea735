"""The interactive flame graph: one self-contained HTML file that works offline.

The page is ``assets/page.html`` with the stylesheet and scripts of ``assets/`` inlined and
the profile packed by :mod:`aiflame.render.flamedata`. It makes no network request.
"""

from __future__ import annotations

import base64
import html
import json
import re
from functools import cache
from importlib import resources

from aiflame.model import FrameKind, Profile, gpu
from aiflame.render import jsonsafe
from aiflame.render.flamedata import pack
from aiflame.render.memtimeline import memory_stacks, pack_memory
from aiflame.render.titles import flame_title
from aiflame.render.visible import visible
from aiflame.version import __version__

# Load order matters: app.js starts the page and uses everything defined before it;
# fragment.js (deep links) waits for it.
SCRIPTS: tuple[str, ...] = ("decode.js", "tree.js", "format.js", "flameview.js", "app.js")
SCRIPTS = (*SCRIPTS, "fragment.js")
# The memory chart (memchart.js) waits for app.js too; without memory data it does nothing.
SCRIPTS = (*SCRIPTS, "memchart.js")

_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


@cache
def _asset(name: str) -> str:
    return resources.files("aiflame.render").joinpath("assets", name).read_text("utf-8")


def script_json(value: object) -> str:
    """JSON that is safe inside a <script> element: no ``</script>``, no ``<!--``; NaN and
    infinities as null."""
    text = jsonsafe.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def _inline_script(source: str) -> str:
    # Our own scripts never contain "</script"; refuse rather than emit a broken page.
    if "</script" in source.lower():
        raise ValueError("an asset script contains '</script'")
    return f"<script>\n{source}</script>"


def _default_title(profile: Profile) -> str:
    title = profile.meta.get("title")
    if isinstance(title, str) and title:
        return title
    return flame_title(profile)


def _diff_info(profile: Profile) -> dict[str, object] | None:
    """``meta["diff"]`` if it names two valid sample-type columns."""
    diff = profile.meta.get("diff")
    if not isinstance(diff, dict):
        return None
    ntypes = len(profile.sample_types)
    base, test = diff.get("base"), diff.get("test")
    if not (isinstance(base, int) and isinstance(test, int)):
        return None
    if not (0 <= base < ntypes and 0 <= test < ntypes):
        return None
    info: dict[str, object] = {
        "base": base,
        "test": test,
        "normalized": bool(diff.get("normalized", False)),
    }
    names = {k: diff.get(f"{k}_name") for k in ("base", "test")}
    if all(isinstance(v, str) and v for v in names.values()):
        info["names"] = names  # what each input is: "H100 (run_a)", "8 ranks of ..."
    return info


def gpu_info(profile: Profile) -> dict[str, object] | None:
    """What the page needs of GPU PC samples: the class of each stall-reason frame (for
    colours and the legend), the classes present in legend order, one sample's period,
    how the samples were joined to launch stacks. None without stall frames."""
    kinds = profile.frames.kind
    names = {
        profile.frames.name_of(f) for f in range(len(kinds)) if kinds[f] == FrameKind.GPU_STALL
    }
    if not names:
        return None
    classes = {n: gpu.stall_class(n) for n in sorted(names)}
    period = profile.meta.get(gpu.META_PERIOD)
    return {
        "stallClasses": classes,
        "classes": [c for c in gpu.STALL_CLASSES if c in classes.values()],
        "period": period if isinstance(period, (int, float)) else None,
        "periodUnit": str(profile.meta.get(gpu.META_PERIOD_UNIT, "")),
        "join": str(profile.meta.get(gpu.META_JOIN, "")),
    }


def render_html(
    profile: Profile,
    *,
    title: str | None = None,
    subtitle: str | None = None,
    metric: str | None = None,
    inverted: bool = False,
) -> str:
    """The page of ``profile``; ``metric`` is the sample type shown first."""
    title = visible(title or _default_title(profile))
    subtitle = subtitle if subtitle is not None else str(profile.meta.get("subtitle", "") or "")
    subtitle = visible(subtitle)
    diff = _diff_info(profile)
    column = diff["test"] if diff else profile.type_index(metric)
    packed = pack(
        profile,
        title=title,
        subtitle=subtitle,
        metric=int(column),  # type: ignore[call-overload]
        inverted=inverted,
        extra={
            "diff": diff,
            "source": str(profile.meta.get("source", "")),
            "gpu": gpu_info(profile),
        },
        keep=memory_stacks(profile),
    )
    # A memory profile's chart over time (memchart.js): its own header and sections.
    memory = pack_memory(profile, packed)
    if memory is not None:
        packed.header["memory"] = memory[0]
    values = {
        "title": html.escape(title),
        "subtitle": html.escape(subtitle),
        "generator": f"aiflame {html.escape(__version__)}",
        "css": _asset("style.css"),
        "header": script_json(packed.header),
        "data": base64.b64encode(packed.payload).decode("ascii"),
        "memory": base64.b64encode(memory[1]).decode("ascii") if memory else "",
        "scripts": "\n".join(_inline_script(_asset(name)) for name in SCRIPTS),
    }
    # One pass, so text inserted for one placeholder is never scanned for another.
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], _asset("page.html"))


def extract_data(page: str) -> tuple[dict, bytes]:
    """The header and compressed payload embedded in a page (for tests and tools)."""
    head = re.search(r'<script id="aiflame-header"[^>]*>(.*?)</script>', page, re.S)
    data = re.search(r'<script id="aiflame-data"[^>]*>(.*?)</script>', page, re.S)
    if not head or not data:
        raise ValueError("not an aiflame flame graph page")
    return json.loads(head.group(1)), base64.b64decode(data.group(1))
