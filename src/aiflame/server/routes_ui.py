"""The web UI: Fleet, Workload, Explore and Findings pages, and their assets."""

from __future__ import annotations

from starlette.routing import Route

ROUTES: list[Route] = []
