"""Format detection and loading: every importer registers a sniffer and a loader.

An importer module defines ``FORMAT`` (its name), ``sniff(head: bytes, path: str) -> bool``
and ``load(source: Input, **options) -> Profile``, and is listed in ``MODULE_OF_FORMAT``. An
importer of traces also defines ``load_timeline(source: Input, **options) -> Timeline``:
the slices in time that the Chrome trace exporter writes. A source of a GPU trace format
also defines ``trace_input(source: Input, **options) -> TraceInput`` and
``trace(source: Input, **options) -> TraceData``, which ``aiflame analyze`` reads
(:func:`load_trace_input`). Every reader's failure on bad input is one :class:`InputError`.
"""

from __future__ import annotations

import importlib
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from aiflame.errors import AiflameError, InputError
from aiflame.model import Profile
from aiflame.model.strings import natural_key
from aiflame.model.trace import TraceData
from aiflame.sources.inputs import Input
from aiflame.sources.nsys.db import SQLITE_MAGIC
from aiflame.sources.trace_input import TraceInput

# Each format's importer, most specific first: the first sniffer that says yes wins.
MODULE_OF_FORMAT = {
    "hpctoolkit": "aiflame.sources.hpctoolkit.importer",
    "rocprofv3-pc": "aiflame.sources.gpu_samples.rocprof_pc",
    "cupti-pc": "aiflame.sources.gpu_samples.cupti_pc",
    "nsight-compute": "aiflame.sources.gpu_samples.ncu",
    "iaprof": "aiflame.sources.gpu_samples.iaprof",
    "torch-memory": "aiflame.sources.torch_memory.importer",
    "pprof": "aiflame.sources.pprof.importer",
    "speedscope": "aiflame.sources.speedscope",
    "kineto": "aiflame.sources.kineto.importer",
    "trace-events": "aiflame.sources.kineto.trace_events",
    "nsys": "aiflame.sources.nsys.importer",
    "perf-script": "aiflame.sources.perf.importer",
    # austin before folded: its lines are folded stacks with a P;T head
    "austin": "aiflame.sources.austin",
    "folded": "aiflame.sources.folded.importer",
}
IMPORTERS = tuple(MODULE_OF_FORMAT.values())


# The sources of GPU timelines (in IMPORTERS' order), which analyze reads: asked first, so
# that reading a trace does not import every other importer.
TRACE_SOURCES = tuple(MODULE_OF_FORMAT[f] for f in ("kineto", "trace-events", "nsys"))


def _modules(names: Sequence[str] = IMPORTERS) -> list[ModuleType]:
    mods = []
    for name in names:
        try:
            mods.append(importlib.import_module(name))
        except ModuleNotFoundError as e:
            if e.name != name:  # a real missing dependency inside an importer
                raise
    return mods


def _module_of(fmt: str) -> ModuleType:
    """The importer of ``fmt``, importing no other (each costs its dependencies: protobuf,
    sqlite...)."""
    if fmt not in MODULE_OF_FORMAT:
        raise AiflameError(f"unknown input format '{fmt}' (known: {', '.join(formats())})")
    return importlib.import_module(MODULE_OF_FORMAT[fmt])


def formats() -> list[str]:
    return [m.FORMAT for m in _modules()]


def detect(source: Input) -> ModuleType:
    if os.path.isdir(source.path):  # a database directory (HPCToolkit): asked by name
        for mod in _modules():
            if getattr(mod, "sniff_directory", None) and mod.sniff_directory(source.path):
                return mod
        raise InputError(source.path, "is a directory, not a profile")
    head = source.head()
    if not head.strip():
        raise InputError(source.path, "empty input (no samples)")
    for mod in _modules():
        if mod.sniff(head, source.path):
            return mod
    if head.startswith(SQLITE_MAGIC):
        raise InputError(source.path, "unknown format: SQLite, but not an Nsight Systems export")
    raise InputError(source.path, "unknown format (expected one of: " + ", ".join(formats()) + ")")


def load(path: str, fmt: str | None = None, **options: Any) -> Profile:
    """Load one input, detecting its format unless ``fmt`` is given."""
    source = Input(path)
    mod = _module_of(fmt) if fmt else detect(source)
    profile = _guarded(mod, path, mod.load, source, **options)
    problem = profile.value_problem()  # NaN, infinities, sums beyond a float's range
    if problem:
        raise InputError(path, problem)
    profile.meta.setdefault("source", path)
    profile.meta.setdefault("format", mod.FORMAT)
    return profile


def _guarded(mod: ModuleType, path: str, read: Any, *args: Any, **options: Any) -> Any:
    """``read(*args, **options)``, any failure on bad input turned into one InputError."""
    try:
        return read(*args, **options)
    except (AiflameError, MemoryError, KeyboardInterrupt):
        raise
    except RecursionError as e:
        raise InputError(path, f"cannot read as {mod.FORMAT}: nested too deeply") from e
    except Exception as e:  # a parser bug or corrupt data must still be one clear line
        raise InputError(path, unexpected(mod.FORMAT, e)) from e


def unexpected(fmt: str, e: Exception) -> str:
    """The last resort of a reader's failure: damage no check of the reader names (each
    one found is given a message of its own that names the field)."""
    return f"cannot read as {fmt}: damaged in a way the reader does not name ({e})"


def trace_formats() -> list[str]:
    return [m.FORMAT for m in _modules(TRACE_SOURCES)]


def load_trace(path: str, **options: Any) -> TraceData:
    """The :class:`TraceData` of one GPU timeline trace (see :func:`load_trace_input`)."""
    return load_trace_input(path, **options).trace


def load_trace_input(path: str, **options: Any) -> TraceInput:
    """One GPU timeline trace (Kineto, Nsight Systems, Chrome trace) for the analysis.

    The trace must be a file (or ``-``); its format is detected from its content. The
    TraceInput's ``profile()`` builds the flame graph of the same input; a failure there is
    one InputError too.
    """
    if path != "-" and not os.path.isfile(path):
        raise InputError(path, "no such file" if not os.path.exists(path) else "not a file")
    source = Input(path)
    head = source.head()
    # No earlier importer claims what a timeline source sniffs (pickles, protobuf and
    # speedscope's JSON are not Chrome traces or SQLite), so these may be asked alone.
    mod = next((m for m in _modules(TRACE_SOURCES) if head.strip() and m.sniff(head, path)), None)
    mod = mod or detect(source)
    if not hasattr(mod, "trace_input"):
        raise InputError(
            path,
            f"a {mod.FORMAT} profile has no GPU timeline to analyze (analyze reads: "
            + ", ".join(trace_formats())
            + ")",
        )
    found: TraceInput = _guarded(mod, path, mod.trace_input, source, **options)
    build = found.profile
    found.profile = lambda: _guarded(mod, path, build)
    return found


def load_many(
    paths: Sequence[str],
    fmt: str | None = None,
    *,
    label_files: str | None = None,
    **options: Any,
) -> Profile:
    """Load several inputs and merge them into one profile.

    A directory stands for the trace files in it (``*.json``, ``*.json.gz``), e.g. one file
    per rank of a PyTorch profiler run. ``label_files``: a label key given to every sample,
    whose value names the input file it came from (its shortest distinct path suffix).
    """
    from aiflame.sources.hpctoolkit.importer import pair_inputs
    from aiflame.transforms.gpujoin import join_gpu_samples
    from aiflame.transforms.group import with_label
    from aiflame.transforms.merge import merge

    files = expand_inputs(paths)
    # An HPCToolkit database and its measurement directory are one input.
    files, measurements = pair_inputs(files) if fmt in (None, "hpctoolkit") else (files, {})
    profiles = [
        load(p, fmt, **options, **({"measurements": measurements[p]} if p in measurements else {}))
        for p in files
    ]
    profiles = join_gpu_samples(profiles)  # PC samples under the launch stacks of a trace
    if label_files:
        names = distinct_names(files)
        profiles = [with_label(p, label_files, n) for p, n in zip(profiles, names, strict=True)]
    if len(profiles) == 1:
        return profiles[0]
    merged = merge(profiles)
    problem = merged.value_problem()
    if problem:
        raise AiflameError(f"{len(profiles)} inputs merged: {problem}")
    merged.meta.pop("device", None)  # the first input's; kept only if all share it
    merged.meta.update(combine_meta(profiles))
    if not label_files:
        _say_what_was_merged(files, merged.meta.get("input_ranks"))
    for p in profiles:  # GPU samples: how they met the launch stacks, one sample's period
        for key in _CARRIED_META:
            if key in p.meta and key not in merged.meta:
                merged.meta[key] = p.meta[key]
        if "gpu_samples_join" in p.meta and "subtitle" not in merged.meta:
            merged.meta["subtitle"] = p.meta["gpu_samples_join"]
    return merged


_CARRIED_META = ("gpu_samples_join", "gpu_sample_period", "gpu_sample_period_unit")


def _say_what_was_merged(files: Sequence[str], ranks: object) -> None:
    """Ranks of one job merge as one would expect; other inputs (a folder of several
    models' traces) are merged too, but never silently."""
    if isinstance(ranks, list) and len(set(ranks)) == len(files):
        return
    names = distinct_names(files)
    shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    warnings.warn(
        f"{len(files)} inputs that are not ranks of one job merged into one graph ({shown}):"
        " --group-by file puts each under a root of its own",
        stacklevel=2,
    )


def load_timeline(path: str, fmt: str | None = None, metric: str | None = None, **options: Any):  # type: ignore[no-untyped-def]
    """The timeline of one input: a trace's own, or the slices of a profile's timed samples
    (``metric`` chooses their weight); refused for inputs that have no times."""
    from aiflame.transforms.timeline import sample_timeline

    source = Input(path)
    if fmt:
        mods = {m.FORMAT: m for m in _modules()}
        if fmt not in mods:
            raise AiflameError(f"unknown input format '{fmt}' (known: {', '.join(mods)})")
        mod = mods[fmt]
    else:
        mod = detect(source)
    reader = getattr(mod, "load_timeline", None)
    if reader is None:
        # A source that keeps sample times only when asked (they cost memory) says how.
        profile = load(path, mod.FORMAT, **{**options, **getattr(mod, "TIMELINE_OPTIONS", {})})
        if profile.timestamps is None:
            raise InputError(
                path,
                f"{_WHAT.get(mod.FORMAT, mod.FORMAT + ' input')} has no timeline (no times): a "
                "Chrome trace is written from traces (PyTorch profiler, Nsight Systems, Chrome "
                "trace JSON) or from profiles with sample times",
            )
        try:
            return sample_timeline(profile, metric)
        except AiflameError as e:
            raise InputError(path, str(e)) from None
    try:
        timeline = reader(source, **options)
    except (AiflameError, MemoryError, KeyboardInterrupt):
        raise
    except Exception as e:  # as load(): a parser bug or corrupt data is one clear line
        raise InputError(path, unexpected(mod.FORMAT, e)) from e
    timeline.meta.setdefault("source", path)
    return timeline


_WHAT = {
    "folded": "folded stacks input",
    "perf-script": "'perf script' input (collapsed to stacks)",
    "pprof": "a pprof profile",
    "speedscope": "a sampled speedscope profile",
}


def load_timelines(paths: Sequence[str], fmt: str | None = None, **options: Any):  # type: ignore[no-untyped-def]
    """The timelines of several inputs (directories expanded), as one."""
    from aiflame.transforms.timeline import merge_timelines

    files = expand_inputs(paths)
    return merge_timelines([load_timeline(p, fmt, **options) for p in files], distinct_names(files))


TRACE_SUFFIXES = (".json", ".json.gz")


def expand_inputs(paths: Sequence[str]) -> list[str]:
    """``paths`` with each directory replaced by its trace files, in natural name order."""
    out: list[str] = []
    for path in paths:
        if path == "-" or not os.path.isdir(path) or _is_database(path):
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


def distinct_names(paths: Sequence[str]) -> list[str]:
    """Short names that tell ``paths`` apart: the file names, with as many parent folders
    as it takes where two are alike (``a/rank0.json``, ``b/rank0.json``)."""
    parts = [Path(p).parts if p != "-" else ("stdin",) for p in paths]
    depth = [1] * len(paths)
    while True:
        names = ["/".join(ps[-d:]) for ps, d in zip(parts, depth, strict=True)]
        seen: dict[str, list[int]] = {}
        for i, n in enumerate(names):
            seen.setdefault(n, []).append(i)
        grow = [
            i for same in seen.values() if len(same) > 1 for i in same if depth[i] < len(parts[i])
        ]
        if not grow:
            return names
        for i in grow:
            depth[i] += 1


def _is_database(path: str) -> bool:
    """A directory that one importer reads whole (an HPCToolkit database)."""
    return any(
        getattr(mod, "sniff_directory", None) and mod.sniff_directory(path) for mod in _modules()
    )


def combine_meta(profiles: Sequence[Profile]) -> dict[str, object]:
    """Meta of merged inputs: ``info:`` lines per input when they differ, ``*_ns`` summed,
    the inputs' paths (``inputs``), ranks (``input_ranks``, when each has one) and their
    ``device`` when they share it (titles name them: "8 ranks of worker*_step_12")."""
    out: dict[str, object] = {"inputs": [str(p.meta.get("source", "?")) for p in profiles]}
    ranks = [p.meta.get("rank") for p in profiles]
    if all(r is not None for r in ranks):
        out["input_ranks"] = ranks
    devices = {p.meta.get("device") for p in profiles}
    if len(devices) == 1 and devices != {None}:
        out["device"] = devices.pop()
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
