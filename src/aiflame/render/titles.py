"""Short names of a page's inputs, for titles that say what is shown.

One input is named by its file (``Qwen_Qwen1.5-0.5B-Chat__1016005``) and, where the trace
says it, its device (``H100 (Qwen_Qwen1.5-0.5B-Chat__1016005)``); several inputs merged
into one profile by their count and the pattern of their names (``8 ranks of
worker*_step_12``). A differential page reads ``H100 (run) vs MI300X (run)``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from aiflame.model import Profile

# What a file name ends with that is not its name (checked repeatedly: x.pt.trace.json.gz).
_EXTENSIONS = (
    ".gz", ".json", ".trace", ".pt", ".txt", ".folded", ".collapsed", ".pb", ".speedscope",
)  # fmt: skip
MAX_NAME = 48


def file_stem(path: str) -> str:
    """``logs/worker0.pt.trace.json.gz`` -> ``worker0``."""
    name = os.path.basename(path.rstrip("/")) or path
    changed = True
    while changed:
        changed = False
        for ext in _EXTENSIONS:
            if name.lower().endswith(ext) and len(name) > len(ext):
                name = name[: -len(ext)]
                changed = True
    return name


def _shorten(text: str, room: int = MAX_NAME) -> str:
    if len(text) <= room:
        return text
    head = (room - 1) // 2 + (room - 1) % 2
    return text[:head] + "…" + text[len(text) - (room - 1 - head) :]


def name_pattern(names: Sequence[str]) -> str:
    """The common start and end of ``names`` around a ``*``: ``worker*_step_12``. Digits
    are not split (``rank1`` and ``rank10`` give ``rank*``); no common part gives ``*``."""
    if len(set(names)) == 1:
        return names[0]
    prefix = _common_start(names)
    rests = [n[len(prefix) :] for n in names]
    suffix = _common_start([r[::-1] for r in rests])[::-1]
    if prefix and prefix[-1].isdigit() and any(r[:1].isdigit() or not r for r in rests):
        prefix = prefix.rstrip("0123456789")
    if suffix and suffix[0].isdigit():
        suffix = suffix.lstrip("0123456789")
    return f"{prefix}*{suffix}"


def _common_start(texts: Sequence[str]) -> str:
    """The longest start all ``texts`` share (characters, not path components)."""
    first, last = min(texts), max(texts)  # the most different pair bounds the others
    n = 0
    while n < min(len(first), len(last)) and first[n] == last[n]:
        n += 1
    return first[:n]


def _inputs(profile: Profile) -> list[str]:
    inputs = profile.meta.get("inputs")
    if isinstance(inputs, list) and all(isinstance(p, str) for p in inputs):
        return list(inputs)
    source = profile.meta.get("source")
    return [source] if isinstance(source, str) and source and source != "-" else []


def input_name(profile: Profile) -> str:
    """What ``profile`` was made from, in a few words ("" when nothing says it)."""
    inputs = _inputs(profile)
    if len(inputs) > 1:
        ranks = profile.meta.get("input_ranks")
        what = "ranks" if isinstance(ranks, list) and len(set(ranks)) == len(inputs) else "files"
        pattern = name_pattern([file_stem(p) for p in inputs])
        name = f"{len(inputs)} {what}" + (f" of {_shorten(pattern)}" if pattern != "*" else "")
    else:
        name = _shorten(file_stem(inputs[0])) if inputs else ""
    device = profile.meta.get("device")
    if isinstance(device, str) and device:
        return f"{device} ({name})" if name else device
    return name


def _parts(profile: Profile) -> tuple[str, str]:
    """(device, what the input is) of a profile, "" where unknown."""
    device = profile.meta.get("device")
    whole = input_name(profile)
    if isinstance(device, str) and device and whole.startswith(device + " ("):
        return device, whole[len(device) + 2 : -1]
    return "", whole


def diff_names(base: Profile, test: Profile) -> tuple[str, str, str]:
    """(title, base name, test name) of a comparison: ``H100 (run_a) vs MI300X (run_b)``;
    when only the devices differ ``H100 vs MI300X (run)``, each input named by its device;
    when the names are the same, told apart by their folders."""
    (bdev, bname), (tdev, tname) = _parts(base), _parts(test)
    if bname == tname and bdev and tdev and bdev != tdev:
        return f"{bdev} vs {tdev} ({bname})" if bname else f"{bdev} vs {tdev}", bdev, tdev
    names = [input_name(base) or "base", input_name(test) or "test"]
    if names[0] == names[1]:
        folders = []
        for p in (base, test):
            inputs = _inputs(p)
            path = os.path.abspath(inputs[0]) if inputs else ""
            folders.append(os.path.basename(os.path.dirname(path)) if path else "")
        if folders[0] and folders[1] and folders[0] != folders[1]:
            names = [f"{folders[0]}/{names[0]}", f"{folders[1]}/{names[1]}"]
        else:
            names = [f"{names[0]} (base)", f"{names[1]} (test)"]
    return f"{names[0]} vs {names[1]}", names[0], names[1]


def flame_title(profile: Profile) -> str:
    """``Flame graph of H100 (run)``, ``Flame graph of 8 ranks of worker*_step_12``."""
    name = input_name(profile)
    return f"Flame graph of {name}" if name else "Flame graph"
