"""Shared fixtures: test data location, golden-file comparison with a bless switch.

Set ``AIFLAME_BLESS=1`` to rewrite expected files of aiflame's own outputs from the
current results; review the diff of the expected files as the review of the change.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import systools

DATA = Path(__file__).parent / "data"
BLESS = os.environ.get("AIFLAME_BLESS") == "1"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA


def check_golden(actual: str, expected_path: Path) -> None:
    """Assert ``actual`` equals the file's text; with AIFLAME_BLESS=1, rewrite the file."""
    if BLESS:
        expected_path.parent.mkdir(parents=True, exist_ok=True)
        expected_path.write_text(actual, encoding="utf-8")
        return
    assert expected_path.exists(), f"missing golden file {expected_path} (run with AIFLAME_BLESS=1)"
    expected = expected_path.read_text(encoding="utf-8")
    if actual != expected:
        a, e = actual.splitlines(), expected.splitlines()
        for i, (x, y) in enumerate(zip(a, e, strict=False)):
            if x != y:
                pytest.fail(
                    f"{expected_path.name} line {i + 1}:\n  got      {x!r}\n  expected {y!r}"
                )
        pytest.fail(f"{expected_path.name}: {len(a)} lines, expected {len(e)}")


@pytest.fixture
def golden():
    return check_golden


def pytest_runtest_setup(item: pytest.Item) -> None:
    """``@pytest.mark.tools("gcc", ...)``: the system programs the test needs (systools.py)."""
    for mark in item.iter_markers(name="tools"):
        systools.need(*mark.args)
