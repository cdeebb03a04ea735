"""GPU PC samples of ``aiflame record --gpu-pc-sampling``: the dumps and cubins that the
in-process collector (``torch_bootstrap/aiflame_cupti_pcsampling.py``) left in the
recording directory, read as CUPTI dumps and put under the launch stacks of the PyTorch
window of the same process (by correlation id; by kernel name for launches outside it)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from aiflame.errors import AiflameError
from aiflame.model import Profile
from aiflame.sources import load
from aiflame.transforms.gpujoin import join_gpu_samples

ENV = "AIFLAME_GPU_PC_SAMPLING"
_PID = re.compile(r"gpupc-(\d+)\.")


def collector_env(torch_window: float) -> dict[str, str]:
    """Kernel-serialized sampling when a PyTorch window gives launch stacks to join by
    correlation id; continuous otherwise (kernels keep running concurrently)."""
    return {ENV: "serialized" if torch_window > 0 else "continuous"}


def load_gpu_samples(
    directory: str, process_labels: Mapping[int, Mapping[str, str]], notes: list[str]
) -> list[Profile]:
    from aiflame.collectors.torchtrace import add_labels

    out = []
    for path in sorted(Path(directory).glob("gpupc-*.dat")):
        pid = int(_PID.match(path.name).group(1))  # type: ignore[union-attr]
        try:
            profile = load(str(path), "cupti-pc")
        except AiflameError as e:
            notes.append(f"GPU PC samples of process {pid} could not be read: {e}")
            continue
        add_labels(profile, {"pid": str(pid), **process_labels.get(pid, {})})
        out.append(profile)
    for err in sorted(Path(directory).glob("gpupc-*.error")):
        m = _PID.match(err.name)
        for line in err.read_text(errors="replace").splitlines():
            notes.append(f"GPU PC sampling of process {m.group(1) if m else '?'}: {line}")
    return out


def join_with_windows(torch_profiles: list[Profile], samples: list[Profile]) -> list[Profile]:
    """``samples`` re-rooted under the launch stacks of the PyTorch window of their own
    process (correlation ids are per process)."""
    out = []
    for s in samples:
        mine = [t for t in torch_profiles if _pid(t) == _pid(s)]
        out.append(join_gpu_samples([*mine, s])[-1] if mine else s)
    return out


def _pid(profile: Profile) -> str | None:
    for label_set in profile.label_sets:
        for k, v in label_set:
            if k == "pid":
                return v
    return None
