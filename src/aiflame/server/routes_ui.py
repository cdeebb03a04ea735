"""The web UI: Fleet, Workload, Explore and Findings pages, and their assets.

Each page is ``ui/page.html`` with its script; the scripts read the JSON API and draw with
the vendored ECharts (``ui/vendor``); flame graphs are aiflame's own page in a frame. Every
asset is served from the package: the UI works offline and loads nothing from elsewhere.
"""

from __future__ import annotations

import html
from functools import cache
from importlib import resources

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from aiflame.server.errors import NotFound
from aiflame.version import __version__

PAGES = {
    "fleet": "Fleet",
    "workload": "Workload",
    "explore": "Explore",
    "findings": "Findings",
}
_TYPES = {
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
# The UI's own scripts only; charts draw inline styles; flame graphs come from this server.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; frame-src 'self'; connect-src 'self'; object-src 'none'"
)


@cache
def _file(name: str) -> bytes:
    return resources.files("aiflame.server").joinpath("ui", name).read_bytes()


def _asset_names() -> set[str]:
    root = resources.files("aiflame.server").joinpath("ui")
    names = {p.name for p in root.iterdir() if p.is_file()}
    names |= {"vendor/" + p.name for p in root.joinpath("vendor").iterdir() if p.is_file()}
    return names


async def page(request: Request) -> Response:
    name = request.path_params["page"]
    if name not in PAGES:
        raise NotFound(f"no page {name}")
    nav = "".join(
        f'<a href="/ui/{p}" class="{"on" if p == name else ""}" data-nav="{p}">{t}</a>'
        for p, t in PAGES.items()
    )
    text = _file("page.html").decode("utf-8")
    for key, value in (
        ("title", html.escape(PAGES[name])),
        ("page", name),
        ("nav", nav),
        ("version", html.escape(__version__)),
    ):
        text = text.replace("{{" + key + "}}", value)
    return HTMLResponse(text, headers={"Content-Security-Policy": CSP})


async def asset(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in _asset_names():
        raise NotFound(f"no asset {name}")
    suffix = name[name.rfind(".") :]
    return Response(
        _file(name),
        media_type=_TYPES.get(suffix, "application/octet-stream"),
        headers={"Cache-Control": "public, max-age=3600"},
    )


async def favicon(request: Request) -> Response:
    return Response(_file("favicon.svg"), media_type="image/svg+xml")


ROUTES = [
    Route("/favicon.ico", favicon),
    Route("/ui/assets/{name:path}", asset),
    Route("/ui/{page}", page),
]
