"""What a timeline source gives ``aiflame analyze``: the trace's columns and, from the same
parse, the flame graph the report links into.

A source of a GPU timeline format (Kineto, Nsight Systems, generic Chrome traces) offers,
besides ``load(source) -> Profile``, ``timeline(source) -> Timeline`` (and
``trace(source) -> TraceData``, its ``trace``); the registry reaches them through
:func:`aiflame.sources.registry.load_timeline`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiflame.model import Profile
from aiflame.model.trace import TraceData


@dataclass
class Timeline:
    format: str  # the source's FORMAT
    trace: TraceData
    profile: Callable[[], Profile]  # the flame graph of the same input, built on demand
    state: Any = None  # the source's own parse (Kineto: its columns), for related views
