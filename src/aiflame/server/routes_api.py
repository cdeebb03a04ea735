"""aiflame's own JSON API (traces, attribution, findings, workloads, trace requests)."""

from __future__ import annotations

from starlette.routing import Route

ROUTES: list[Route] = []
