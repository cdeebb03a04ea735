"""Output formats by name, and by file extension."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiflame.errors import AiflameError

if TYPE_CHECKING:  # the model (and numpy) load with a renderer, not with the format names
    from collections.abc import Iterator

    from aiflame.model import Profile
    from aiflame.model.timeline import Timeline

FORMATS = ("folded", "pprof", "speedscope", "html", "svg", "chrome")
# Written from a timeline (slices in time), not from a profile's stacks: see render_timeline.
TIMELINE_FORMATS = ("chrome",)
# Names that are not valid Unicode (lone surrogates, from JSON escapes): "?" in text outputs.
_REPLACE = "replace"

_EXTENSIONS = (
    (".speedscope.json", "speedscope"),
    (".json.gz", "chrome"),  # Chrome / Perfetto trace (Trace Event Format), as Kineto names them
    (".json", "chrome"),
    (".pb.gz", "pprof"),
    (".pprof", "pprof"),
    (".pb", "pprof"),
    (".html", "html"),
    (".htm", "html"),
    (".svg", "svg"),
    (".folded", "folded"),
    (".collapsed", "folded"),
    (".txt", "folded"),
)


def extensions(fmt: str) -> list[str]:
    """The file name endings that stand for ``fmt``."""
    return [ext for ext, f in _EXTENSIONS if f == fmt]


def format_for_path(path: str) -> str | None:
    lower = path.lower()
    for ext, fmt in _EXTENSIONS:
        if lower.endswith(ext):
            return fmt
    return None


def render(
    profile: Profile, fmt: str, metric: str | None = None, title: str | None = None
) -> bytes:
    """Serialise ``profile`` as ``fmt``; single-metric formats take ``metric``."""
    try:
        profile.type_index(metric)
    except KeyError as e:  # a metric the profile lacks: the message names what it has
        raise AiflameError(str(e.args[0])) from None
    if fmt == "folded":
        from aiflame.render.folded import render_folded

        return render_folded(profile, metric).encode("utf-8", _REPLACE)
    if fmt == "pprof":
        from aiflame.render.pprof import render_pprof

        return render_pprof(profile)
    if fmt == "speedscope":
        from aiflame.render.speedscope import render_speedscope

        return render_speedscope(profile, metric).encode("utf-8", _REPLACE)
    if fmt == "html":
        from aiflame.render.html import render_html

        return render_html(profile, title=title, metric=metric).encode("utf-8", _REPLACE)
    if fmt == "chrome":
        from aiflame.transforms.timeline import sample_timeline

        return b"".join(render_timeline(sample_timeline(profile, metric), fmt))
    if fmt == "svg":
        from aiflame.render.svg import render_svg

        return render_svg(profile, title=title, metric=metric).encode("utf-8", _REPLACE)
    raise AiflameError(f"unknown output format '{fmt}' (known: {', '.join(FORMATS)})")


def render_timeline(timeline: Timeline, fmt: str = "chrome", path: str = "") -> Iterator[bytes]:
    """Serialise a timeline (gzip-compressed when ``path`` ends in .gz)."""
    if fmt != "chrome":
        raise AiflameError(f"'{fmt}' is not written from a timeline (only: chrome)")
    from aiflame.render.chrome_trace import render_chrome_trace

    return render_chrome_trace(timeline, compress=path.lower().endswith(".gz"))
