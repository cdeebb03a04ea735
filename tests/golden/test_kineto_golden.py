"""Folded output of the Kineto importer on small real traces (GPU and CPU views).

The expected files are aiflame's own output, reviewed by hand against the traces (and, for
the launch stacks, against HTA's and TraceLens' references checked in tests/unit);
``AIFLAME_BLESS=1`` rewrites them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from aiflame.render.folded import render_folded
from aiflame.sources.inputs import Input
from aiflame.sources.kineto import importer as kineto

DATA = Path(__file__).resolve().parents[1] / "data" / "kineto"
EXPECTED = Path(__file__).parent / "kineto"

CASES = {
    "amd-mi250-gpu-time": (
        "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
        "gpu-time",
        {},
    ),
    "amd-mi250-wall-time": (
        "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
        "wall-time",
        {},
    ),
    "triton-mi300-gpu-time-short": (
        "tracelens/torch_compile_triton/trace.json.gz",
        "gpu-time",
        {"kernel_names": "short"},
    ),
    "gpu-only-mi210-kernel-count": ("tracelens/mi210/gpu_only_trace.json.gz", "kernel-count", {}),
    "cpu-only-wall-time": (
        "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
        "wall-time",
        {},
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_folded(golden, case: str) -> None:  # type: ignore[no-untyped-def]
    rel, metric, options = CASES[case]
    profile = kineto.load(Input(str(DATA / rel)), **options)
    golden(render_folded(profile, metric), EXPECTED / f"{case}.folded")
