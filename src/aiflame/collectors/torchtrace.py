"""The PyTorch profiler traces the bootstrap exported, loaded with the Kineto importer."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from aiflame.errors import AiflameError
from aiflame.model import Profile
from aiflame.symbolize.pyframes import PythonNaming


def _pid_of(path: Path) -> int:
    return int(path.name.split("-", 1)[1].split(".", 1)[0])


def add_labels(profile: Profile, labels: Mapping[str, str]) -> None:
    """Give every sample of ``profile`` the ``labels`` it does not have yet (in place)."""
    if not labels:
        return
    new_sets = []
    for label_set in profile.label_sets:
        merged = dict(label_set)
        for k, v in labels.items():
            merged.setdefault(k, v)
        new_sets.append(tuple(sorted(merged.items())))
    profile.label_sets = new_sets


def python_roots(directory: str) -> list[str]:
    """The ``sys.path`` entries of the recorded Python processes: the PyTorch profiler
    names files relative to them, and py-spy's frames are named alike with them."""
    roots: dict[str, None] = {}
    for pattern in ("torch-*.meta.json", "proc-*.json"):
        for path in sorted(Path(directory).glob(pattern)):
            try:
                paths = json.loads(path.read_text()).get("sys_path")
            except (OSError, ValueError, AttributeError):
                continue
            if isinstance(paths, list):
                roots.update((p, None) for p in paths if isinstance(p, str))
    return list(roots)


def load_torch_traces(
    directory: str,
    process_labels: Mapping[int, Mapping[str, str]],
    notes: list[str],
    python_roots: list[str] | None = None,
    naming: PythonNaming | None = None,
    options: Mapping[str, bool] | None = None,
) -> list[Profile]:
    """One profile per exported trace; problems become ``notes`` rather than errors.
    ``python_roots``: see :func:`python_roots` (Python frames then named per function, as
    the samplers' are in the same recording); ``naming``: the samplers' naming itself;
    ``options``: the Kineto importer's (``module_instances``, ``merge_steps``)."""
    from aiflame.sources import load

    out = []
    for path in sorted(Path(directory).glob("torch-*.json")):
        if path.name.endswith(".meta.json"):
            continue
        pid = _pid_of(path)
        try:
            profile = load(
                str(path),
                "kineto",
                python_roots=python_roots,
                python_naming=naming,
                **(options or {}),
            )
        except AiflameError as e:
            notes.append(f"torch trace of process {pid} could not be read: {e}")
            continue
        add_labels(profile, {"pid": str(pid), **process_labels.get(pid, {})})
        meta = path.with_name(f"torch-{pid}.meta.json")
        try:
            timings = json.loads(meta.read_text())
            profile.meta["torch_window"] = timings
        except (OSError, ValueError):
            pass
        out.append(profile)
    for err in sorted(Path(directory).glob("torch-*.error")):
        for line in err.read_text(errors="replace").splitlines():
            notes.append(f"torch window of process {_pid_of(err)}: {line}")
    return out


def window_costs(profiles: list[Profile]) -> list[dict]:
    """The start/stop/export seconds each bootstrap measured."""
    return [w for p in profiles if isinstance(w := p.meta.get("torch_window"), dict)]
