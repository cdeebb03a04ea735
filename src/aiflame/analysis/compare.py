"""Two inputs compared: the differential profile of ``aiflame diff`` (and of ``aiflame mcp``'s
diff), ``base`` before and ``test`` after.

GPU traces are compared at the level of Python functions and operators by default (``level``
``auto``): kernels and runtime calls fold into the op that launched them and Python line
numbers drop, so runs on other GPUs or library versions line up.
"""

from __future__ import annotations

from aiflame.model import Profile
from aiflame.sources import load_many
from aiflame.transforms.cut import GPU_SIDE, cut_at_kinds, has_kinds
from aiflame.transforms.diff import diff_profiles


def diff_inputs(
    base_path: str,
    test_path: str,
    *,
    metric: str | None = None,
    normalize: bool = False,
    strip_hex: bool = False,
    level: str = "auto",
    input_format: str | None = None,
    **load_options: object,
) -> tuple[Profile, Profile, Profile]:
    """(base, test, their differential profile), loaded as the registry reads them."""
    base = load_many([base_path], input_format, **load_options)
    test = load_many([test_path], input_format, **load_options)
    if level == "auto":
        level = "ops" if has_kinds(base, GPU_SIDE) or has_kinds(test, GPU_SIDE) else "full"
    if level == "ops":
        base = cut_at_kinds(base, python_lines=False)
        test = cut_at_kinds(test, python_lines=False)
    diff = diff_profiles(base, test, metric=metric, normalize=normalize, strip_hex=strip_hex)
    return base, test, diff
