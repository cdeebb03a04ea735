"""Format detection and loading: every importer registers a sniffer and a loader.

An importer module defines ``FORMAT`` (its name), ``sniff(head: bytes, path: str) -> bool``
and ``load(source: Input, **options) -> Profile``, and is listed in ``IMPORTERS``.
"""

from __future__ import annotations

import importlib
import os
import re
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
    "aiflame.sources.trace_events",
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
    problem = profile.value_problem()
    if problem:
        raise InputError(path, problem)
    profile.meta.setdefault("source", path)
    profile.meta.setdefault("format", mod.FORMAT)
    return profile


def load_many(paths: Sequence[str], fmt: str | None = None, **options: Any) -> Profile:
    """Load several inputs and merge them into one profile.

    A directory stands for the trace files in it (``*.json``, ``*.json.gz``), e.g. one file
    per rank of a PyTorch profiler run.
    """
    from aiflame.transforms.merge import merge

    profiles = [load(p, fmt, **options) for p in expand_inputs(paths)]
    if len(profiles) == 1:
        return profiles[0]
    merged = merge(profiles)
    problem = merged.value_problem()
    if problem:
        raise AiflameError(f"{len(profiles)} inputs merged: {problem}")
    merged.meta.update(combine_meta(profiles))
    return merged


TRACE_SUFFIXES = (".json", ".json.gz")


def natural_key(name: str) -> list[object]:
    """Sort key that puts ``rank-2`` before ``rank-10`` (numbers compared as numbers)."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def expand_inputs(paths: Sequence[str]) -> list[str]:
    """``paths`` with each directory replaced by its trace files, in natural name order."""
    out: list[str] = []
    for path in paths:
        if path == "-" or not os.path.isdir(path):
            out.append(path)
            continue
        found = sorted(
            (
                os.path.join(path, name)
                for name in os.listdir(path)
                if name.lower().endswith(TRACE_SUFFIXES)
                and not name.startswith(".")
                and os.path.isfile(os.path.join(path, name))
            ),
            key=natural_key,
        )
        if not found:
            raise InputError(path, "directory holds no trace files (*.json, *.json.gz)")
        out.extend(found)
    return out


def combine_meta(profiles: Sequence[Profile]) -> dict[str, object]:
    """Meta of merged inputs: ``info:`` lines per input when they differ, ``*_ns`` summed."""
    out: dict[str, object] = {}
    keys = {k for p in profiles for k in p.meta}
    for key in sorted(keys):
        values = [p.meta.get(key) for p in profiles]
        if key.startswith("info:"):
            if len({str(v) for v in values}) > 1:
                out[key] = " | ".join(
                    f"{_input_label(p)}: {v}" for p, v in zip(profiles, values, strict=True) if v
                )
        elif key.endswith("_ns") and all(type(v) is int for v in values):
            out[key] = sum(values)  # type: ignore[arg-type]
    return out


def _input_label(profile: Profile) -> str:
    if "rank" in profile.meta:
        return f"rank {profile.meta['rank']}"
    return os.path.basename(str(profile.meta.get("source", "?")))
