"""Folded output of the Nsight Systems importer on the real saxpy export (GPU and CPU views).

The expected files are aiflame's own output, reviewed by hand against the export's tables;
``AIFLAME_BLESS=1`` rewrites them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from aiflame.render.folded import render_folded
from aiflame.sources import load

ROOT = Path(__file__).resolve().parents[1]
EXPORT = ROOT / "data" / "nsys" / "saxpy-mpi-cuda_nsys_perlmutter0.sqlite"
EXPECTED = Path(__file__).parent / "nsys"


@pytest.fixture(scope="module")
def profile():  # type: ignore[no-untyped-def]
    return load(str(EXPORT))


@pytest.mark.parametrize("metric", ["gpu-time", "kernel-count", "gpu-bytes", "cpu-samples"])
def test_folded(profile, golden, metric: str) -> None:  # type: ignore[no-untyped-def]
    golden(render_folded(profile, metric), EXPECTED / f"saxpy-{metric}.folded")
