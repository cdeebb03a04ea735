"""speedscope JSON output: one "sampled" profile of one metric, one sample per stack.

All samples are merged into that one profile (labels, such as the ``profile`` label of a
multi-profile speedscope input, are not kept).

Frames are shared by (name, file, line, kind); weights are the summed values of each stack
in the metric's unit (nanoseconds, bytes, or "none" for counts and other units). A frame's
kind, which the format has no field for, is kept in ``"aiflameKind"`` (``gpu-kernel``,
``cpp``...): speedscope ignores it, aiflame's reader takes it back, so that a round trip
keeps the colours (what kind a name alone suggests can be wrong: ``-``, GPU lines).
"""

from __future__ import annotations

import json

import numpy as np

from aiflame.model import FrameKind, Profile
from aiflame.render.stackpaths import check_frames, json_paths
from aiflame.version import __version__

SCHEMA_URL = "https://www.speedscope.app/file-format-schema.json"
KIND_FIELD = "aiflameKind"  # a frame's kind, beside the format's name, file and line
_UNITS = {
    "nanoseconds": "nanoseconds",
    "microseconds": "microseconds",
    "milliseconds": "milliseconds",
    "seconds": "seconds",
    "bytes": "bytes",
}


def render_speedscope(profile: Profile, metric: str | None = None) -> str:
    col = profile.type_index(metric)
    sample_type = profile.sample_types[col]
    # Samples without a stack stay in (as []), so that the total is the profile's.
    stack_values = [(s, v) for s, v in profile.iter_stack_values(col) if v != 0]
    stack_ids = np.asarray([s for s, _ in stack_values], dtype=np.int64)
    frames, shared_of = _shared_frames(profile)
    # Samples spell their stacks out: written as text (index digits and a comma a frame).
    check_frames("speedscope output", profile.stacks, stack_ids, len(str(len(frames))) + 1)
    samples = json_paths(profile.stacks, stack_ids, shared_of[profile.stacks.frames_array()])
    weights = [_number(v) for _, v in stack_values]
    total = float(sum(v for _, v in stack_values))
    name = str(profile.meta.get("title") or profile.meta.get("source") or "aiflame profile")
    doc = {
        "$schema": SCHEMA_URL,
        "exporter": f"aiflame@{__version__}",
        "name": name,
        "activeProfileIndex": 0,
        "shared": {"frames": frames},
        "profiles": [
            {
                "type": "sampled",
                "name": f"{name} ({sample_type.name})",
                "unit": _UNITS.get(sample_type.unit, "none"),
                "startValue": 0,
                "endValue": _number(total),
                "samples": _SAMPLES,
                "weights": weights,
            }
        ],
    }
    # Values were checked finite on import: allow_nan=False only guards against a bug.
    text = json.dumps(doc, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    # The samples go where their placeholder is: the last string of the document, as
    # only numbers (the weights) follow it.
    head, found, tail = text.rpartition(json.dumps(_SAMPLES))
    assert found, "the samples' placeholder is in the document"
    return head + samples + tail + "\n"


_SAMPLES = "\x00samples\x00"  # placeholder for the samples' JSON text


def _shared_frames(profile: Profile) -> tuple[list[dict], np.ndarray]:
    """speedscope frames for the profile's frames used by stacks, and frame id -> index."""
    frames, strings = profile.frames, profile.strings.strings
    used = np.flatnonzero(np.bincount(profile.stacks.frames_array(), minlength=len(frames)))
    index: dict[tuple[int, int, int, int], int] = {}
    out: list[dict] = []
    shared_of = np.zeros(len(frames), dtype=np.int64)
    for f in used.tolist():
        key = (frames.name[f], frames.file[f], frames.line[f], frames.kind[f])
        i = index.get(key)
        if i is None:
            i = index[key] = len(out)
            entry: dict[str, object] = {"name": strings[key[0]]}
            if key[1]:
                entry["file"] = strings[key[1]]
            if key[2]:
                entry["line"] = key[2]
            if key[3] != FrameKind.UNKNOWN:
                entry[KIND_FIELD] = FrameKind(key[3]).slug
            out.append(entry)
        shared_of[f] = i
    return out, shared_of


def _number(v: float) -> float | int:
    """Whole numbers as JSON integers, so that counts stay counts."""
    return int(v) if float(v).is_integer() else float(v)
