"""The one contract between sources, transforms and renderers: :class:`Profile`.

``model`` imports nothing else from the project.
"""

from aiflame.model.calltree import CallTree
from aiflame.model.frames import Frame, FrameKind, FrameTable
from aiflame.model.profile import Profile, ProfileBuilder, SampleType
from aiflame.model.stacks import StackTable
from aiflame.model.strings import StringTable

__all__ = [
    "CallTree",
    "Frame",
    "FrameKind",
    "FrameTable",
    "Profile",
    "ProfileBuilder",
    "SampleType",
    "StackTable",
    "StringTable",
]
