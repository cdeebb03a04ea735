"""What the agent's tests share (imported by name: every test directory has a conftest.py,
so ``from conftest import`` would find whichever was loaded last)."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest

REQUIRED = os.environ.get("AIFLAME_REQUIRE_EBPF") == "1"
HERE = Path(__file__).parent
SRC = HERE.parents[1] / "src"

# the pod and container the profile test puts its program in
POD_UID = "4c9f1974-5c46-44c2-b42f-3bbf0e98eef9"
CONTAINER_ID = "cd" * 32


def need_fleet_extra() -> None:
    """``aiflame agent`` needs the fleet extra (prometheus-client...): without it the tests
    that start one skip, naming it, as the server's do."""
    missing = []
    for module in FLEET_MODULES:
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(module)
    if missing:
        pytest.skip(
            f"aiflame agent needs the fleet extra ({', '.join(missing)} missing): "
            "pip install -e '.[fleet]'"
        )


FLEET_MODULES = ("prometheus_client",)


def need(ok: bool, why: str) -> None:
    if not ok:
        if REQUIRED:
            pytest.fail(f"AIFLAME_REQUIRE_EBPF=1 but {why}")
        pytest.skip(why)
