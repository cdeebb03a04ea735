"""Cut stacks short at the first frame of given kinds (e.g. keep Python and ops only).

Two runs of one model on different GPUs launch kernels with different names (and through
different runtimes: ``cudaLaunchKernel`` vs ``hipLaunchKernel``); compared at the level of
Python frames and framework ops, their GPU time lines up again.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import numpy as np

from aiflame.model import FrameKind, FrameTable, Profile, StringTable
from aiflame.model.stacks import EMPTY_STACK, StackTable

# Everything from the runtime call down: what differs between vendors for the same op.
GPU_SIDE = frozenset(
    {
        FrameKind.RUNTIME,
        FrameKind.DELIMITER,
        FrameKind.GPU_KERNEL,
        FrameKind.GPU_SOURCE,
        FrameKind.GPU_INSTRUCTION,
        FrameKind.GPU_STALL,
    }
)


def has_kinds(profile: Profile, kinds: Iterable[FrameKind]) -> bool:
    """Whether any stack of ``profile`` has a frame of one of ``kinds``."""
    wanted = {int(k) for k in kinds}
    kind = profile.frames.kind
    return any(kind[f] in wanted for f in set(profile.stacks.frame))


_PY_LINE = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?):\d+\)$")


def without_line(name: str) -> str:
    """``forward (models/bert.py:1306)`` -> ``forward (models/bert.py)``."""
    m = _PY_LINE.match(name)
    return f"{m.group('func')} ({m.group('file')})" if m else name


def cut_at_kinds(
    profile: Profile, kinds: Iterable[FrameKind] = GPU_SIDE, python_lines: bool = True
) -> Profile:
    """A profile whose stacks end just above the first frame of one of ``kinds``.

    Values of the removed frames are charged to the frame above them, so totals are kept.
    With ``python_lines=False`` Python frames lose their line numbers (and merge), so two
    runs of the same code under different library versions still line up.
    """
    cut_kinds = {int(k) for k in kinds}
    frame_kind = profile.frames.kind
    strings, frames = profile.strings, profile.frames
    frame_map = list(range(len(frames)))
    if not python_lines:
        strings = StringTable()
        frames = FrameTable(strings)
        for f in range(len(profile.frames)):
            old = profile.frames.get(f)
            name = without_line(old.name) if old.kind == FrameKind.PYTHON else old.name
            line = 0 if old.kind == FrameKind.PYTHON else old.line
            frame_map[f] = frames.intern(name, old.kind, old.file, line, old.module, old.address)
    stacks = StackTable()
    old_parent, old_frame = profile.stacks.parent, profile.stacks.frame
    new_id = [EMPTY_STACK] * len(old_frame)
    stopped = [False] * len(old_frame)  # a frame at or above this node was cut
    for i, (parent, frame) in enumerate(zip(old_parent, old_frame, strict=True)):
        above = new_id[parent] if parent >= 0 else EMPTY_STACK
        if (parent >= 0 and stopped[parent]) or frame_kind[frame] in cut_kinds:
            new_id[i], stopped[i] = above, True
        else:
            new_id[i] = stacks.child(above, frame_map[frame])
    mapping = np.asarray([*new_id, EMPTY_STACK], dtype=np.int64)  # index -1: empty stack
    return profile.with_stacks(stacks, mapping, frames)
