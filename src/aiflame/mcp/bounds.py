"""Answers a model can take in: few rows, short names, a bounded size; and what each answer
was computed from (its provenance).

Rows are cut to what was asked (at most ``MAX_ROWS``), names longer than ``MAX_NAME`` are
elided in the middle (a kernel's start and end tell it apart), free text is cut at
``MAX_TEXT``, and an answer whose JSON is still larger than ``MAX_ANSWER_CHARS`` has its
longest lists halved until it fits, saying so in ``truncated``.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from typing import Any

from aiflame.render.elide import elide_middle
from aiflame.render.jsonsafe import dumps
from aiflame.version import __version__

DEFAULT_ROWS = 15
MAX_ROWS = 100
MAX_NAME = 400
MAX_TEXT = 600
MAX_ANSWER_CHARS = 60_000


def rows(n: int | None) -> int:
    """The rows to give: what was asked, within 1..MAX_ROWS."""
    return DEFAULT_ROWS if n is None else max(1, min(int(n), MAX_ROWS))


def name(text: str) -> str:
    return elide_middle(text, MAX_NAME) if len(text) > MAX_NAME else text


def text(value: str) -> str:
    return value if len(value) <= MAX_TEXT else value[: MAX_TEXT - 1] + "…"


def iso(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat(timespec="seconds")


def file_inputs(paths: list[str], formats: list[str] | None = None) -> list[dict[str, Any]]:
    """Each input file as provenance: its path, size, modification time and format."""
    out = []
    for i, path in enumerate(paths):
        st = os.stat(path)
        entry: dict[str, Any] = {"path": path, "bytes": st.st_size, "modified": iso(st.st_mtime)}
        if formats and i < len(formats) and formats[i]:
            entry["format"] = formats[i]
        out.append(entry)
    return out


def provenance(**fields: Any) -> dict[str, Any]:
    """The provenance of an answer: what it was computed from, by which aiflame, when."""
    return {**fields, "computed_by": f"aiflame {__version__}", "computed_at": iso(_now())}


def _now() -> float:
    return dt.datetime.now(dt.UTC).timestamp()


def bounded(answer: dict[str, Any]) -> dict[str, Any]:
    """``answer``, its longest lists halved until its JSON fits ``MAX_ANSWER_CHARS``."""
    size = len(dumps(answer))
    cut: dict[str, int] = {}
    while size > MAX_ANSWER_CHARS:
        found = _longest_list(answer, "")
        if found is None:
            break
        where, parent, key, items = found
        if len(items) <= 1:
            break
        keep = len(items) // 2
        parent[key] = items[:keep]
        cut[where] = cut.get(where, len(items))
        size = len(dumps(answer))
    if cut:
        answer["truncated"] = {
            "why": f"the answer is kept under {MAX_ANSWER_CHARS:,} characters",
            "lists": {
                where: {"had": n, "kept": _length(answer, where)} for where, n in cut.items()
            },
        }
    return answer


def _longest_list(node: Any, where: str) -> tuple[str, Any, Any, list] | None:
    """(path, container, key, list) of the list whose JSON is longest."""
    best: tuple[int, tuple[str, Any, Any, list]] | None = None
    items = (
        node.items()
        if isinstance(node, dict)
        else enumerate(node)
        if isinstance(node, list)
        else ()
    )
    for key, value in items:
        path = f"{where}.{key}" if where else str(key)
        if isinstance(value, list) and len(value) > 1:
            size = len(json.dumps(value, default=str))
            if best is None or size > best[0]:
                best = (size, (path, node, key, value))
        if isinstance(value, dict | list):
            inner = _longest_list(value, path)
            if inner is not None:
                size = len(json.dumps(inner[3], default=str))
                if best is None or size > best[0]:
                    best = (size, inner)
    return best[1] if best else None


def _length(answer: Any, where: str) -> int:
    node = answer
    for part in where.split("."):
        node = node[int(part)] if isinstance(node, list) else node[part]
    return len(node)
