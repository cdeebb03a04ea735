"""Fold the interpreter's import machinery: each run of importlib's own frames becomes one
``[import]`` frame.

``import numpy`` runs through five to eight frames of ``<frozen importlib._bootstrap>``
(``_find_and_load``, ``_find_and_load_unlocked``, ``_load_unlocked``, ``exec_module``,
``_call_with_frames_removed``) before the module's own ``<module>``, and again for every
module it imports: the start-up of a short script is mostly those frames, none of them
the program's. Folded, ``<module> (train.py) ; [import] ; <module> (numpy/__init__.py)``
says the same in one frame, and the time importlib spends itself (finding files, reading
bytecode) stays as ``[import]``'s own. pyinstrument hides these frames the same way.
"""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np

from aiflame.model import FrameKind, Profile
from aiflame.model.stacks import EMPTY_STACK, StackTable

IMPORT_FRAME = "[import]"
# The machinery's files: frozen in CPython 3.3 and later; plain files where it is not frozen
MACHINERY = ("<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>")
MACHINERY_SUFFIXES = ("importlib/_bootstrap.py", "importlib/_bootstrap_external.py")


# a frame named "fn (file:line)" with no file of its own (folded stacks, py-spy's raw output)
_NAMED_LOCATION = re.compile(r" \(([^()]*?)(?::\d+)?\)$")


def is_machinery(name: str, file: str) -> bool:
    if not file:
        m = _NAMED_LOCATION.search(name)
        file = m.group(1) if m else ""
    return file in MACHINERY or file.endswith(MACHINERY_SUFFIXES)


def fold_imports(profile: Profile) -> Profile:
    """``profile`` with each run of import machinery frames replaced by one ``[import]``
    frame; values, labels and timestamps unchanged. (The frame table gains that frame.)"""
    strings, frames = profile.strings.strings, profile.frames
    machinery = [
        frames.kind[f] == FrameKind.PYTHON
        and is_machinery(strings[frames.name[f]], strings[frames.file[f]])
        for f in range(len(frames))
    ]
    if not any(machinery):
        return profile
    folded = profile.frames.intern(IMPORT_FRAME, FrameKind.PYTHON)
    stacks = StackTable()
    old_parent, old_frame = profile.stacks.parent, profile.stacks.frame
    new_id = [EMPTY_STACK] * len(old_frame)
    in_run = [False] * len(old_frame)
    for i, (parent, frame) in enumerate(zip(old_parent, old_frame, strict=True)):
        above = new_id[parent] if parent >= 0 else EMPTY_STACK
        if not machinery[frame]:
            new_id[i] = stacks.child(above, frame)
        elif parent >= 0 and in_run[parent]:
            new_id[i], in_run[i] = above, True  # the run goes on: one frame for all of it
        else:
            new_id[i], in_run[i] = stacks.child(above, folded), True
    mapping = np.asarray([*new_id, EMPTY_STACK], dtype=np.int64)  # index -1: empty stack
    return replace(profile, stacks=stacks, sample_stack=mapping[profile.sample_stack],
                   meta=dict(profile.meta))  # fmt: skip
