"""``--open``: show a written page in the user's web browser, or say where it is.

The browser is the one Python's :mod:`webbrowser` picks, so ``$BROWSER`` is honoured. Where
no graphical browser can show the page (an SSH session or a console without ``DISPLAY``),
nothing is started, since a console browser cannot run the page's scripts: the page's
``file://`` URL is printed instead, to open from a machine that has one.
"""

from __future__ import annotations

import argparse
import os
import sys
import webbrowser
from pathlib import Path

from aiflame.errors import AiflameError


def add_open(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--open",
        action="store_true",
        help="open the written page in a web browser ($BROWSER is honoured; without one, "
        "e.g. over SSH, print the page's file:// URL)",
    )


def check_open(args: argparse.Namespace, path: str | None, is_page: bool) -> None:
    """Refuse ``--open`` before any work when there will be no page file to open."""
    if not getattr(args, "open", False):
        return
    if not path or path == "-":
        raise AiflameError("--open needs an HTML file to open: give -o PAGE.html")
    if not is_page:
        raise AiflameError(f"--open opens HTML pages, and '{path}' is not one (name it .html)")


def page_url(path: str) -> str:
    return Path(path).resolve().as_uri()


def graphical_session() -> bool:
    """Whether a browser started here would be seen by the user."""
    if os.environ.get("BROWSER"):
        return True  # the user said which command shows pages
    remote = bool(os.environ.get("SSH_CONNECTION") or os.environ.get("SSH_TTY"))
    display = bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    if sys.platform == "darwin" or sys.platform.startswith("win"):
        return display or not remote
    return display  # Linux and other Unixes: X11 or Wayland, local or forwarded over SSH


def open_page(path: str) -> bool:
    """Open ``path`` in a browser; prints its URL either way. True if a browser took it."""
    url = page_url(path)
    opened = False
    if graphical_session():
        try:
            opened = webbrowser.open(url)
        except webbrowser.Error:
            opened = False
    if opened:
        print(f"aiflame: opened {url}", file=sys.stderr)
    else:
        print(f"aiflame: no web browser to open here; the page is {url}", file=sys.stderr)
    return opened


def open_first_page(paths: list[str]) -> None:
    """Open the first HTML page of ``paths`` (a recording writes a page and a pprof file)."""
    from aiflame.render.registry import format_for_path

    page = next((p for p in paths if format_for_path(p) == "html"), None)
    if page is not None:
        open_page(page)
