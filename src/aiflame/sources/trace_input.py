"""What a source of GPU traces gives ``aiflame analyze``: the trace's columns and, from the
same parse, the flame graph the report links into.

A source of a GPU trace format (Kineto, Nsight Systems, generic Chrome traces) offers,
besides ``load(source) -> Profile``, ``trace_input(source) -> TraceInput`` (and
``trace(source) -> TraceData``, its ``trace``); the registry reaches them through
:func:`aiflame.sources.registry.load_trace_input`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiflame.model import Profile
from aiflame.model.trace import TraceData


@dataclass
class TraceInput:
    format: str  # the source's FORMAT
    trace: TraceData
    profile: Callable[[], Profile]  # the flame graph of the same input, built on demand
    state: Any = None  # the source's own parse (Kineto: its columns), for related views
