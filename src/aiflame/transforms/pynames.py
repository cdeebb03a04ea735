"""Name the methods of PyTorch modules ``Class > method`` from the profiler's module frames,
and merge the instances of a module class.

The PyTorch profiler records a module call as a frame ``nn.Module: BertLayer_0`` followed by
``_call_impl`` / ``_wrapped_call_impl`` and then the method itself (``forward (...)``): the
class is known there, the method frame alone does not say it. :func:`module_methods`
renames that method frame to ``BertLayer > forward (...)``.

The instance number (``_0``, ``_1``...) makes every layer of a transformer a tower of its
own, 24 thin towers for 24 layers, sorted 0, 1, 10, 11...: by default the instances merge.
Where the method frame names the module's class, the module frame and the call machinery
between them say nothing more and are dropped (``Qwen2Model > forward`` calls
``Qwen2DecoderLayer > forward`` directly); elsewhere the module frame stays without its
number (``nn.Module: Qwen2DecoderLayer``). ``instances=True`` keeps every frame as recorded.

:func:`merge_steps` merges the profiler's ``ProfilerStep#N`` annotations into one frame.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from aiflame.model import FrameKind, Profile
from aiflame.model.stacks import EMPTY_STACK, StackTable

_MODULE = re.compile(r"^nn\.Module: (?P<cls>[A-Za-z_][\w.]*?)(?:_\d+)?$")
# Frames between the module frame and the method it runs: torch's call machinery.
_GLUE = re.compile(r"^(?:_call_impl|_wrapped_call_impl|decorate_context|inner|_fn|wrapper)\b")
_STEP = re.compile(r"^ProfilerStep#\d+$")
MERGED_STEP = "ProfilerStep#*"


def module_methods(profile: Profile, instances: bool = False) -> Profile:
    """A profile whose module methods read ``Class > method`` and, unless ``instances``,
    whose module instances are merged; unchanged if it has no module frames."""
    frames = profile.frames
    names = profile.strings.strings
    module_class: dict[int, str] = {}
    for f, name_id in enumerate(frames.name):
        m = _MODULE.match(names[name_id])
        if m:
            module_class[f] = m.group("cls")
    if not module_class:
        return profile
    renamed: dict[tuple[int, str], int] = {}

    def method(f: int, cls: str) -> int:
        """The frame ``cls > name`` for method frame ``f`` (``f`` if it names a class)."""
        if " > " in names[frames.name[f]]:
            return f  # already named with its class (from the source, or a built-in's owner)
        key = (f, cls)
        fid = renamed.get(key, -1)
        if fid < 0:
            old = frames.get(f)
            fid = renamed[key] = frames.intern(
                f"{cls} > {old.name}", old.kind, old.file, old.line, old.module
            )
        return fid

    parent_of, frame_of = profile.stacks.parent, profile.stacks.frame
    n = len(frame_of)
    # Nodes on the way from a module frame to its method (the module frame, then glue):
    # the class they wait for; and each one's first child that is a method (Python code
    # with a source file: the built-ins torch's call machinery calls are not methods).
    waiting: list[str | None] = [None] * n
    method_child = [-1] * n
    for i, (p, f) in enumerate(zip(parent_of, frame_of, strict=True)):
        if f in module_class:
            waiting[i] = module_class[f]
            continue
        cls = waiting[p] if p >= 0 else None
        if cls is None or frames.kind[f] != FrameKind.PYTHON:
            continue
        if _GLUE.match(names[frames.name[f]]):
            waiting[i] = cls
        elif frames.file[f] and method_child[p] < 0:
            method_child[p] = i
    stacks = StackTable()
    child = stacks.child
    new_id = [EMPTY_STACK] * n
    if instances:
        for i, (p, f) in enumerate(zip(parent_of, frame_of, strict=True)):
            cls = waiting[p] if p >= 0 else None
            if cls is not None and waiting[i] is None and frames.file[f] and f not in module_class:
                f = method(f, cls)
            new_id[i] = child(new_id[p] if p >= 0 else EMPTY_STACK, f)
        return profile.with_stacks(stacks, np.asarray([*new_id, EMPTY_STACK], dtype=np.int64))

    # The frame that stands for a module call: its method, when named with the module's
    # class; found through the glue (children come after parents: walk backwards).
    stand_in = [-1] * n
    for i in range(n - 1, -1, -1):
        cls = waiting[i]
        if cls is None:
            continue
        first = method_child[i]
        if first >= 0:
            fid = method(frame_of[first], cls)
            if names[frames.name[fid]].startswith(cls + " > "):
                stand_in[i] = fid
        p = parent_of[i]
        is_glue = frame_of[i] not in module_class
        if stand_in[i] >= 0 and is_glue and p >= 0 and waiting[p] and method_child[p] < 0:
            stand_in[p] = stand_in[i]  # a glue frame's method stands for its module too
    plain: dict[int, int] = {}  # module frame -> the same without its instance number
    for i, (p, f) in enumerate(zip(parent_of, frame_of, strict=True)):
        above = new_id[p] if p >= 0 else EMPTY_STACK
        if waiting[i] is not None and stand_in[i] >= 0:
            if p >= 0 and stand_in[p] == stand_in[i] and f not in module_class:
                new_id[i] = above  # glue of a module call: one node with it
            else:
                new_id[i] = child(above, stand_in[i])
        elif p >= 0 and stand_in[p] >= 0 and method_child[p] == i:
            new_id[i] = above  # the method itself: the node of its module call
        elif f in module_class:  # no method names it: the module frame, numberless
            plain_id = plain.get(f)
            if plain_id is None:
                old = frames.get(f)
                name = f"nn.Module: {module_class[f]}"
                plain_id = plain[f] = frames.intern(name, old.kind, old.file, old.line, old.module)
            new_id[i] = child(above, plain_id)
        else:
            cls = waiting[p] if p >= 0 else None
            if cls is not None and waiting[i] is None and frames.file[f]:
                f = method(f, cls)  # another method run by the module call (a hook)
            new_id[i] = child(above, f)
    return profile.with_stacks(stacks, np.asarray([*new_id, EMPTY_STACK], dtype=np.int64))


def module_call_frames(names: Sequence[str]) -> list[bool]:
    """For a stack of frame names (root first): which ones are module frames or the call
    machinery right after one, the frames that merging the module instances drops."""
    out: list[bool] = []
    after_module = False
    for name in names:
        if _MODULE.match(name):
            after_module = True
        elif not (after_module and _GLUE.match(name)):
            after_module = False
        out.append(after_module)
    return out


def merge_steps(profile: Profile) -> Profile:
    """``ProfilerStep#5``, ``ProfilerStep#6``... as one frame ``ProfilerStep#*``, so the
    steps of a trace add up instead of standing side by side."""
    frames = profile.frames
    names = profile.strings.strings
    steps = [f for f, n in enumerate(frames.name) if _STEP.match(names[n])]
    if not steps:
        return profile
    new_frame = list(range(len(frames)))
    for f in steps:
        old = frames.get(f)
        new_frame[f] = frames.intern(MERGED_STEP, old.kind, old.file, old.line, old.module)
    stacks = StackTable()
    child = stacks.child
    new_id = [EMPTY_STACK] * len(profile.stacks)
    for i, (parent, f) in enumerate(zip(profile.stacks.parent, profile.stacks.frame, strict=True)):
        new_id[i] = child(new_id[parent] if parent >= 0 else EMPTY_STACK, new_frame[f])
    mapping = np.asarray([*new_id, EMPTY_STACK], dtype=np.int64)
    return profile.with_stacks(stacks, mapping)
