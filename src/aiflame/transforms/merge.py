"""Merge several profiles into one (union of sample types, stacks re-interned)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from aiflame.model import Profile, ProfileBuilder
from aiflame.model.stacks import EMPTY_STACK


def copy_into(
    builder: ProfileBuilder,
    profile: Profile,
    type_map: Sequence[int] | None = None,
) -> None:
    """Append every sample of ``profile`` to ``builder``, re-interning frames and stacks.

    ``type_map[i]`` is the builder column for the profile's type ``i`` (default: same index).
    """
    types = list(type_map) if type_map is not None else list(range(len(profile.sample_types)))
    frame_map = np.full(len(profile.frames), -1, dtype=np.int64)
    for f in range(len(profile.frames)):
        frame_map[f] = builder.frames.intern_frame(profile.frames.get(f))
    stack_map = np.full(len(profile.stacks) + 1, EMPTY_STACK, dtype=np.int64)
    parents, frames = profile.stacks.parent, profile.stacks.frame
    child = builder.stacks.child
    for s in range(len(profile.stacks)):  # parents come before children
        stack_map[s + 1] = child(int(stack_map[parents[s] + 1]), int(frame_map[frames[s]]))
    label_map = [builder.labels(dict(ls)) for ls in profile.label_sets]
    values = np.zeros((len(profile), len(builder.sample_types)))
    for t, c in enumerate(types):
        values[:, c] += profile.values[:, t]
    builder.add_many(
        stack_map[profile.sample_stack + 1],
        values,
        np.asarray(label_map, dtype=np.int64)[profile.sample_labels],
        profile.timestamps,
    )


def merge(profiles: Sequence[Profile]) -> Profile:
    """One profile holding every sample of ``profiles``; types matched by name."""
    builder = ProfileBuilder([])
    maps = []
    for p in profiles:
        maps.append([builder.add_type(t) for t in p.sample_types])
    for p, tmap in zip(profiles, maps, strict=True):
        copy_into(builder, p, tmap)
    merged = builder.build()
    merged.meta = dict(profiles[0].meta)
    merged.meta.pop("gpu_launches", None)  # its stack ids are those of profiles[0] alone
    merged.meta["sources"] = [p.meta.get("source") for p in profiles]
    reads = [p.meta.get("samples_read") for p in profiles]  # perf script's samples
    if all(isinstance(r, int) for r in reads):
        merged.meta["samples_read"] = sum(reads)  # type: ignore[arg-type]
    else:
        merged.meta.pop("samples_read", None)
    return merged
