"""Group samples by a label: the label's values become the root frames of the flame graph."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from aiflame.model import FrameKind, Profile, ProfileBuilder
from aiflame.model.stacks import EMPTY_STACK

GROUP_KEYS = ("rank", "device", "stream", "pid", "tid")


# Labels whose value names itself: the root frame is the value alone (a file name).
BARE_KEYS = ("file",)


def root_name(key: str, value: str | None) -> str:
    """The root frame of a group: ``rank 3``, or ``[no rank]`` for samples without it."""
    if value is None:
        return f"[no {key}]"
    return value if key in BARE_KEYS else f"{key} {value}"


def with_label(profile: Profile, key: str, value: str) -> Profile:
    """``profile`` with label ``key=value`` on every sample (e.g. the input file it came
    from, before merging); samples, stacks and values are shared, not copied."""
    sets = [tuple(sorted({**dict(ls), key: value}.items())) for ls in profile.label_sets]
    return replace(profile, label_sets=sets, meta=dict(profile.meta))


def group_by(profile: Profile, key: str) -> Profile:
    """A copy of ``profile`` whose stacks start with a LABEL frame naming label ``key``.

    Values, labels and timestamps are unchanged: only the stacks gain a root, so the
    flame graph splits by rank, device, stream... at its first level.
    """
    builder = ProfileBuilder(profile.sample_types)
    frame_map = [
        builder.frames.intern_frame(profile.frames.get(f)) for f in range(len(profile.frames))
    ]
    # Samples whose label set has no such key (CPU time has no stream) share one root.
    root_of_set = []
    for label_set in profile.label_sets:
        name = root_name(key, dict(label_set).get(key))
        root_of_set.append(builder.stacks.child(EMPTY_STACK, builder.frame(name, FrameKind.LABEL)))
    roots = np.asarray(root_of_set, dtype=np.int64)[profile.sample_labels]
    pairs, inverse = np.unique(
        np.stack([roots, profile.sample_stack], axis=1), axis=0, return_inverse=True
    )
    intern, frames_of = builder.stacks.intern, profile.stacks.frames_of
    new_stack = np.asarray(
        [
            intern([frame_map[f] for f in frames_of(s)], r) if s != EMPTY_STACK else r
            for r, s in pairs.tolist()
        ],
        dtype=np.int64,
    )
    label_ids = np.asarray([builder.labels(dict(ls)) for ls in profile.label_sets], dtype=np.int64)
    builder.add_many(
        new_stack[inverse.reshape(-1)],
        profile.values,
        label_ids[profile.sample_labels],
        profile.timestamps,
    )
    grouped = builder.build()
    grouped.meta = dict(profile.meta)
    return grouped
