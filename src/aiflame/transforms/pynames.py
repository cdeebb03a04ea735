"""Name the methods of PyTorch modules ``Class > method`` from the profiler's module frames.

The PyTorch profiler records a module call as a frame ``nn.Module: BertLayer_0`` followed by
``_call_impl`` / ``_wrapped_call_impl`` and then the method itself (``forward (...)``): the
class is known there, the method frame alone does not say it. This transform renames that
method frame to ``BertLayer > forward (...)`` (the instance suffix ``_0`` dropped, so all
layers of one class merge when compared).
"""

from __future__ import annotations

import re

import numpy as np

from aiflame.model import FrameKind, Profile
from aiflame.model.stacks import EMPTY_STACK, StackTable

_MODULE = re.compile(r"^nn\.Module: (?P<cls>[A-Za-z_][\w.]*?)(?:_\d+)?$")
# Frames between the module frame and the method it runs: torch's call machinery.
_GLUE = re.compile(r"^(?:_call_impl|_wrapped_call_impl|inner|_fn|wrapper)\b")


def module_methods(profile: Profile) -> Profile:
    """A profile whose module methods read ``Class > method``; unchanged if none apply."""
    frames = profile.frames
    names = profile.strings.strings
    module_class: dict[int, str] = {}
    for f, name_id in enumerate(frames.name):
        m = _MODULE.match(names[name_id])
        if m:
            module_class[f] = m.group("cls")
    if not module_class:
        return profile
    stacks = StackTable()
    old_parent, old_frame = profile.stacks.parent, profile.stacks.frame
    new_id = [EMPTY_STACK] * len(old_frame)
    pending: list[str | None] = [None] * len(old_frame)  # class awaiting its method frame
    renamed: dict[tuple[int, str], int] = {}
    for i, (parent, f) in enumerate(zip(old_parent, old_frame, strict=True)):
        above = new_id[parent] if parent >= 0 else EMPTY_STACK
        cls = pending[parent] if parent >= 0 else None
        frame = f
        if f in module_class:
            pending[i] = module_class[f]
        elif cls is not None and frames.kind[f] == FrameKind.PYTHON:
            if _GLUE.match(names[frames.name[f]]):
                pending[i] = cls  # still on the way to the method
            elif " > " in names[frames.name[f]]:
                pass  # already named with its class (from the source, or a built-in's owner)
            else:
                key = (f, cls)
                frame = renamed.get(key, -1)
                if frame < 0:
                    old = frames.get(f)
                    frame = renamed[key] = frames.intern(
                        f"{cls} > {old.name}", old.kind, old.file, old.line, old.module
                    )
        new_id[i] = stacks.child(above, frame)
    mapping = np.asarray([*new_id, EMPTY_STACK], dtype=np.int64)
    return profile.with_stacks(stacks, mapping)
