"""Leave frames out of a profile: splice them out of their stacks, or drop what ran in them.

A recorder's own code shows up in the profiles it takes: ``aiflame record``'s bootstrap
runs in the recorded interpreter (its import hook wraps ``import torch``, its timer thread
waits for the end of the PyTorch window, its signal handler stops the profiler). Code
that only passes the program's work through (an import hook) is *spliced*: its frames
disappear and what it called keeps its place under the program's frames. Code that is the
recorder's own work is *dropped* with every sample spent in it. The innermost listed frame
of a stack decides: a hook that calls the program's code is spliced, the program's code
that calls into the recorder (a module pre-hook) loses the recorder's part.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from enum import Enum

import numpy as np

from aiflame.model import Profile
from aiflame.model.stacks import EMPTY_STACK, StackTable


class Strip(Enum):
    SPLICE = "splice"  # the frame goes, its callees stay
    DROP = "drop"  # the frame and everything it called go, with their samples


def strip_frames(profile: Profile, frames: Mapping[int, Strip]) -> tuple[Profile, np.ndarray]:
    """``profile`` without the frames (ids) of ``frames``; also the values dropped, per
    sample type. Frame and label tables are kept as they are."""
    if not frames or not len(profile):
        return profile, np.zeros(len(profile.sample_types))
    stacks = StackTable()
    old_parent, old_frame = profile.stacks.parent, profile.stacks.frame
    n = len(old_frame)
    new_id = [EMPTY_STACK] * n
    dropped = [False] * n  # the innermost listed frame at or above this node says drop
    for i, (parent, frame) in enumerate(zip(old_parent, old_frame, strict=True)):
        above = new_id[parent] if parent >= 0 else EMPTY_STACK
        action = frames.get(frame)
        if action is None:
            new_id[i] = stacks.child(above, frame)
            dropped[i] = dropped[parent] if parent >= 0 else False
        else:
            new_id[i] = above
            dropped[i] = action is Strip.DROP
    mapping = np.asarray([*new_id, EMPTY_STACK], dtype=np.int64)  # index -1: empty stack
    gone = np.asarray([*dropped, False], dtype=bool)[profile.sample_stack]
    lost = profile.values[gone].sum(axis=0) if gone.any() else np.zeros(len(profile.sample_types))
    keep = ~gone
    out = replace(
        profile,
        stacks=stacks,
        sample_stack=mapping[profile.sample_stack[keep]],
        values=profile.values[keep],
        sample_labels=profile.sample_labels[keep],
        timestamps=profile.timestamps[keep] if profile.timestamps is not None else None,
        sample_types=list(profile.sample_types),
        label_sets=list(profile.label_sets),
        meta=dict(profile.meta),
    )
    return out, lost


def drop_empty_types(profile: Profile) -> Profile:
    """``profile`` without the sample types that hold no value (a metric with no data is
    not worth offering: ``gpu-time`` of a run on CPUs), and without samples left empty.
    The default type is kept by name where it survives."""
    filled = profile.filled_types()
    if not filled or len(filled) == len(profile.sample_types):
        return profile
    default = profile.sample_types[profile.type_index(None)]
    types = [profile.sample_types[i] for i in filled]
    values = profile.values[:, filled]
    keep = values.any(axis=1)
    meta = dict(profile.meta)
    meta["default_type"] = types.index(default) if default in types else 0
    return replace(
        profile,
        sample_types=types,
        values=values[keep],
        sample_stack=profile.sample_stack[keep],
        sample_labels=profile.sample_labels[keep],
        timestamps=profile.timestamps[keep] if profile.timestamps is not None else None,
        label_sets=list(profile.label_sets),
        meta=meta,
    )
