"""Flame graphs inline in Jupyter: ``aiflame.show(profile_or_path)`` and ``Profile._repr_html_``.

What a notebook shows is the very page ``aiflame flamegraph`` writes, in an
``<iframe srcdoc=...>`` with ``sandbox="allow-scripts"``: the page runs in a frame of its own
with an opaque origin, so its scripts, styles and element ids can neither see nor clash with
the notebook's, nor with a second page shown in the same notebook, and the notebook keeps
the page with its outputs (it works offline, as the file does).
"""

from __future__ import annotations

import html
import os
from collections.abc import Sequence
from typing import Any

from aiflame.errors import AiflameError
from aiflame.model import Profile
from aiflame.model.profile import register_html_repr

DEFAULT_HEIGHT = 640  # css px: the header, toolbar and about 25 rows of frames

PathLike = str | os.PathLike[str]


def load(
    path: PathLike | Sequence[PathLike],
    format: str | None = None,
    *,
    group_by: str | None = None,
    **options: Any,
) -> Profile:
    """The profile of one input file (or several, merged), detected by content as the
    command line does. ``format`` forces an importer; ``group_by`` puts each ``file``,
    ``rank``, ``device``, ``stream``... at the root; other options go to the importer
    (``kernel_names="short"``, ``python_names="raw"``, ...)."""
    from aiflame.sources.registry import load_many

    paths = (
        [os.fspath(path)] if isinstance(path, str | os.PathLike) else [os.fspath(p) for p in path]
    )
    if not paths:
        raise AiflameError("aiflame.load(): no input given")
    profile = load_many(
        paths, format, label_files="file" if group_by == "file" else None, **options
    )
    if group_by:
        from aiflame.transforms.group import group_by as add_roots

        profile = add_roots(profile, group_by)
    return profile


class FlameGraph:
    """A flame graph page as a notebook displays it (``_repr_html_``); ``page`` is the
    page's own HTML, the same as a file ``aiflame flamegraph`` writes."""

    def __init__(self, page: str, title: str, height: int = DEFAULT_HEIGHT) -> None:
        self.page = page
        self.title = title
        self.height = height

    def _repr_html_(self) -> str:
        return frame_html(self.page, self.title, self.height)

    def __repr__(self) -> str:
        return f"<aiflame flame graph: {self.title}>"

    def save(self, path: PathLike) -> None:
        """Write the page to ``path`` (an .html file that opens in any browser)."""
        from pathlib import Path

        Path(path).write_text(self.page, encoding="utf-8")


def frame_html(page: str, title: str, height: int = DEFAULT_HEIGHT) -> str:
    """``page`` in an isolated frame: sandboxed scripts, no access to the notebook."""
    return (
        f'<iframe class="aiflame-flamegraph" title="{html.escape(title)}" '
        f'sandbox="allow-scripts" srcdoc="{html.escape(page, quote=True)}" '
        f'style="width: 100%; height: {int(height)}px; border: 1px solid #d9dde4; '
        'border-radius: 4px;"></iframe>'
    )


def flame_graph(
    profile_or_path: Profile | PathLike | Sequence[PathLike],
    *,
    title: str | None = None,
    subtitle: str | None = None,
    metric: str | None = None,
    inverted: bool = False,
    height: int = DEFAULT_HEIGHT,
    **load_options: Any,
) -> FlameGraph:
    """The flame graph of a profile, or of the input file(s) :func:`load` reads."""
    from aiflame.render.html import render_html

    if isinstance(profile_or_path, Profile):
        if load_options:
            raise AiflameError(
                f"options {', '.join(sorted(load_options))} are for loading files; "
                "this is a profile already"
            )
        profile = profile_or_path
    else:
        profile = load(profile_or_path, **load_options)
    try:
        profile.type_index(metric)
    except KeyError as e:
        raise AiflameError(str(e.args[0])) from None
    page = render_html(profile, title=title, subtitle=subtitle, metric=metric, inverted=inverted)
    return FlameGraph(page, title or _frame_title(profile), height)


def _frame_title(profile: Profile) -> str:
    """The frame's accessible name: the profile's title, else its file's name."""
    for key in ("title", "source"):
        value = profile.meta.get(key)
        if isinstance(value, str) and value and value != "-":
            return os.path.basename(value) if key == "source" else value
    return "flame graph"


def show(
    profile_or_path: Profile | PathLike | Sequence[PathLike],
    *,
    title: str | None = None,
    subtitle: str | None = None,
    metric: str | None = None,
    inverted: bool = False,
    height: int = DEFAULT_HEIGHT,
    **load_options: Any,
) -> None:
    """Display the interactive flame graph of a profile (or of a file, or several files
    merged) in the notebook cell's output.

    ``metric``: the sample type shown first (``gpu-time``, ``cpu-time``...); ``inverted``:
    the icicle view; ``height``: of the frame, in css pixels. Loading options as in
    :func:`load` (``format=``, ``group_by=``, ``kernel_names=``...).
    """
    graph = flame_graph(
        profile_or_path,
        title=title,
        subtitle=subtitle,
        metric=metric,
        inverted=inverted,
        height=height,
        **load_options,
    )
    try:
        from IPython.display import display
    except ImportError:
        raise AiflameError(
            "aiflame.show() displays in Jupyter, and IPython is not installed here; "
            "write a page with `aiflame flamegraph INPUT -o page.html --open`"
        ) from None
    display(graph)


def profile_html(profile: Profile) -> str | None:
    """A profile's notebook display: its flame graph (None, the text repr, if empty)."""
    if profile.is_empty():
        return None
    return flame_graph(profile)._repr_html_()


register_html_repr(profile_html)
