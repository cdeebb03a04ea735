"""Format detection and loading: every importer registers a sniffer and a loader.

An importer module defines ``FORMAT`` (its name), ``sniff(head: bytes, path: str) -> bool``
and ``load(source: Input, **options) -> Profile``, and is listed in ``IMPORTERS``.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from aiflame.errors import AiflameError, InputError
from aiflame.model import Profile
from aiflame.sources.inputs import Input

# Most specific first: the first sniffer that says yes wins.
IMPORTERS = (
    "aiflame.sources.torch_memory",
    "aiflame.sources.pprof",
    "aiflame.sources.speedscope",
    "aiflame.sources.kineto",
    "aiflame.sources.nsys",
    "aiflame.sources.perf_script",
    "aiflame.sources.folded",
)


def _modules() -> list[ModuleType]:
    mods = []
    for name in IMPORTERS:
        try:
            mods.append(importlib.import_module(name))
        except ModuleNotFoundError as e:
            if e.name != name:  # a real missing dependency inside an importer
                raise
    return mods


def formats() -> list[str]:
    return [m.FORMAT for m in _modules()]


def detect(source: Input) -> ModuleType:
    head = source.head()
    if not head.strip():
        raise InputError(source.path, "empty input (no samples)")
    for mod in _modules():
        if mod.sniff(head, source.path):
            return mod
    raise InputError(source.path, "unknown format (expected one of: " + ", ".join(formats()) + ")")


def load(path: str, fmt: str | None = None, **options: Any) -> Profile:
    """Load one input, detecting its format unless ``fmt`` is given."""
    source = Input(path)
    if fmt:
        mods = {m.FORMAT: m for m in _modules()}
        if fmt not in mods:
            raise AiflameError(f"unknown input format '{fmt}' (known: {', '.join(mods)})")
        mod = mods[fmt]
    else:
        mod = detect(source)
    try:
        profile = mod.load(source, **options)
    except (AiflameError, MemoryError, KeyboardInterrupt):
        raise
    except Exception as e:  # a parser bug or corrupt data must still be one clear line
        raise InputError(path, f"cannot read as {mod.FORMAT}: {type(e).__name__}: {e}") from e
    profile.meta.setdefault("source", path)
    profile.meta.setdefault("format", mod.FORMAT)
    return profile


def load_many(paths: Sequence[str], fmt: str | None = None, **options: Any) -> Profile:
    """Load several inputs and merge them into one profile."""
    from aiflame.transforms.merge import merge

    profiles = [load(p, fmt, **options) for p in paths]
    return profiles[0] if len(profiles) == 1 else merge(profiles)
