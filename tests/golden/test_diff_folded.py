"""``stack base test`` output against inferno-diff-folded's and difffolded.pl's expected files.

The expected files are the peers' own outputs (see tests/data/diff/PROVENANCE.md), never
rewritten by AIFLAME_BLESS. Both peers print in hash order, so they are compared sorted;
aiflame's output must already be in that sorted order.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from aiflame.cli.main import main
from aiflame.render.folded import render_diff_folded
from aiflame.sources import load
from aiflame.transforms.diff import diff_profiles

DIFF = Path(__file__).resolve().parents[1] / "data" / "diff"


def sorted_lines(path: Path) -> list[str]:
    return sorted(path.read_text(encoding="utf-8").splitlines())


def ours(base: str, test: str, truncate: bool = False, **options: bool) -> list[str]:
    profile = diff_profiles(load(str(DIFF / base)), load(str(DIFF / test)), **options)
    return render_diff_folded(profile, truncate=truncate).splitlines()


# (expected file in inferno_results/, base input, diff_profiles options, truncate)
INFERNO = [
    ("default.txt", "before.txt", {}, False),
    ("normalize.txt", "before.txt", {"normalize": True}, False),
    ("strip_hex.txt", "before.txt", {"strip_hex": True}, False),
    ("fractionals.txt", "before_fractionals.txt", {}, True),
]


@pytest.mark.parametrize(("expected", "base", "options", "truncate"), INFERNO)
def test_matches_inferno(expected, base, options, truncate):
    got = ours(base, "after.txt", truncate, **options)
    assert got == sorted_lines(DIFF / "inferno_results" / expected)


# (expected file in difffolded_pl/, base, test, options)
DIFFFOLDED = [
    ("default.txt", "before.txt", "after.txt", {}),
    ("normalize.txt", "before.txt", "after.txt", {"normalize": True}),
    ("strip_hex.txt", "before.txt", "after.txt", {"strip_hex": True}),
    ("strip_hex_normalize.txt", "before.txt", "after.txt", {"strip_hex": True, "normalize": True}),
    ("fractionals.txt", "before_fractionals.txt", "after.txt", {}),
    ("fractionals_normalize.txt", "before_fractionals.txt", "after.txt", {"normalize": True}),
    ("own_default.txt", "own_before.txt", "own_after.txt", {}),
    ("own_normalize.txt", "own_before.txt", "own_after.txt", {"normalize": True}),
    ("own_strip_hex.txt", "own_before.txt", "own_after.txt", {"strip_hex": True}),
    (
        "own_strip_hex_normalize.txt",
        "own_before.txt",
        "own_after.txt",
        {"strip_hex": True, "normalize": True},
    ),
]


@pytest.mark.parametrize(("expected", "base", "test", "options"), DIFFFOLDED)
def test_matches_difffolded_pl(expected, base, test, options):
    assert ours(base, test, **options) == sorted_lines(DIFF / "difffolded_pl" / expected)


def test_bad_line_is_skipped_where_difffolded_pl_prints_an_empty_stack():
    expected = sorted_lines(DIFF / "difffolded_pl" / "bad_before.txt")
    assert " 0 0" in expected  # the peer's bug this test documents
    assert load(str(DIFF / "bad_before.txt")).meta["ignored_lines"] == 1
    assert ours("bad_before.txt", "after.txt") == [x for x in expected if x != " 0 0"]


def test_cli_strip_hex_matches_inferno_cli(tmp_path):
    out = tmp_path / "diff.folded"
    args = ["diff", "-s", str(DIFF / "before.txt"), str(DIFF / "after.txt"), "-o", str(out)]
    assert main(args) == 0
    assert out.read_text(encoding="utf-8").splitlines() == sorted_lines(
        DIFF / "inferno_results" / "strip_hex.txt"
    )


@pytest.mark.tools("perl")
@pytest.mark.parametrize("flags", [[], ["-n"], ["-s"], ["-n", "-s"]])
def test_live_difffolded_pl_when_available(flags, tmp_path):
    """Runs the real script when a FlameGraph checkout is named by AIFLAME_FLAMEGRAPH."""
    import os

    root = os.environ.get("AIFLAME_FLAMEGRAPH")
    script = Path(root) / "difffolded.pl" if root else None
    if script is None or not script.exists():
        pytest.skip("set AIFLAME_FLAMEGRAPH to a FlameGraph checkout to run difffolded.pl")
    base, test = DIFF / "own_before.txt", DIFF / "own_after.txt"
    peer = subprocess.run(
        ["perl", str(script), *flags, str(base), str(test)],
        capture_output=True,
        check=True,
        text=True,
        encoding="utf-8",
    ).stdout
    options = {"normalize": "-n" in flags, "strip_hex": "-s" in flags}
    assert ours(base.name, test.name, **options) == sorted(peer.splitlines())
