"""aiflame's own code inside a recorded program, found in its profile to be left out.

The bootstrap (``torch_bootstrap/sitecustomize.py``) runs in every Python process that
``aiflame record`` starts: at startup, around ``import torch`` (an import hook), in a
module pre-hook on the first forward, in a timer thread that waits for the end of the
PyTorch window and in the signal handler that stops and exports it. None of it is the
program's work. Its frames are recognised by file and first line (every recorder names
Python frames per function: see :mod:`aiflame.symbolize.pyframes`), and the functions by
the bootstrap's own code objects.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

from aiflame.model import FrameKind, Profile
from aiflame.symbolize.pyclass import ClassResolver
from aiflame.transforms.strip import Strip

BOOTSTRAP_DIR = str(Path(__file__).resolve().parent / "torch_bootstrap")
BOOTSTRAP_FILE = os.path.join(BOOTSTRAP_DIR, "sitecustomize.py")
# Functions that only pass the program's own work through: the import hook around
# `import torch` (the import is the program's) and the call of a sitecustomize it shadows.
PASS_THROUGH = frozenset({"find_spec", "exec_module", "_chain"})


@cache
def _functions() -> ClassResolver:
    return ClassResolver()


@cache
def _is_bootstrap(file: str) -> bool:
    if not file.endswith("sitecustomize.py") or not os.path.isabs(file):
        return False
    return os.path.realpath(file) == os.path.realpath(BOOTSTRAP_FILE)


def _is_site_import(file: str, name: str) -> bool:
    """``site.execsitecustomize``: the interpreter importing the bootstrap at startup."""
    site = file == "<frozen site>" or os.path.basename(file) == "site.py"
    return site and name.startswith("execsitecustomize")


def bootstrap_frames(profile: Profile) -> dict[int, Strip]:
    """Frame id -> what to do with it, for the Python frames of the bootstrap (and the
    startup's import of it: a sitecustomize the bootstrap shadows is run by ``_chain``,
    whose work is kept)."""
    out: dict[int, Strip] = {}
    frames, strings = profile.frames, profile.strings.strings
    python = int(FrameKind.PYTHON)
    for f in range(len(frames)):
        if frames.kind[f] != python:
            continue
        file = strings[frames.file[f]]
        if _is_site_import(file, strings[frames.name[f]]):
            out[f] = Strip.DROP
        elif _is_bootstrap(file):
            fn = _functions().function_at(BOOTSTRAP_FILE, int(frames.line[f]))
            passes = fn is not None and fn.name in PASS_THROUGH
            out[f] = Strip.SPLICE if passes else Strip.DROP
    return out
