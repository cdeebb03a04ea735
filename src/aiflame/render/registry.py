"""Output formats by name, and by file extension."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiflame.errors import AiflameError

if TYPE_CHECKING:  # the model (and numpy) load with a renderer, not with the format names
    from aiflame.model import Profile

FORMATS = ("folded", "pprof", "speedscope", "html")
# Names that are not valid Unicode (lone surrogates, from JSON escapes): "?" in text outputs.
_REPLACE = "replace"

_EXTENSIONS = (
    (".speedscope.json", "speedscope"),
    (".pb.gz", "pprof"),
    (".pprof", "pprof"),
    (".pb", "pprof"),
    (".html", "html"),
    (".htm", "html"),
    (".folded", "folded"),
    (".collapsed", "folded"),
    (".txt", "folded"),
)


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
    raise AiflameError(f"unknown output format '{fmt}' (known: {', '.join(FORMATS)})")
