"""What keeps ``aiflame mcp``'s answers safe and small, without the MCP SDK: inputs confined
to the roots (links followed, devices refused), rows and names bounded, and an answer over
the size bound cut to fit, saying what was cut."""

from __future__ import annotations

import json
import os

import pytest

from aiflame.mcp import bounds
from aiflame.mcp.paths import PathRefused, Roots


def test_paths_stay_under_the_roots(tmp_path):
    root = tmp_path / "traces"
    root.mkdir()
    (root / "a.json").write_text("{}")
    (tmp_path / "secret").write_text("x")
    os.symlink(tmp_path / "secret", root / "link")
    r = Roots.of([str(root)])
    assert r.resolve("a.json") == str(root / "a.json")
    assert r.resolve(str(root)) == str(root)
    for bad in ("../secret", str(tmp_path / "secret"), "link", "/etc/passwd", "", "a\x00b"):
        with pytest.raises(PathRefused):
            r.resolve(bad)
    with pytest.raises(PathRefused, match="not a regular file"):
        Roots.of(["/dev"]).resolve("/dev/null")
    with pytest.raises(PathRefused, match="No such file"):
        r.resolve("missing.json")


def test_rows_names_and_text_are_bounded():
    assert bounds.rows(None) == bounds.DEFAULT_ROWS and bounds.rows(10**6) == bounds.MAX_ROWS
    assert bounds.rows(0) == 1
    long = "void at::native::elementwise_kernel<" + "x" * 2000 + ">::MulFunctor<float>"
    short = bounds.name(long)
    assert len(short) <= bounds.MAX_NAME and short.startswith("void at::native")
    assert short.endswith("MulFunctor<float>") and "…" in short
    assert bounds.name("plain") == "plain"
    assert len(bounds.text("y" * 5000)) == bounds.MAX_TEXT


def test_an_answer_over_the_bound_is_cut_and_says_so():
    answer = {
        "rows": [{"name": "f" * 300, "value": i} for i in range(1000)],
        "small": [1, 2, 3],
        "provenance": {"inputs": []},
    }
    out = bounds.bounded(answer)
    assert len(json.dumps(out)) <= bounds.MAX_ANSWER_CHARS
    assert out["small"] == [1, 2, 3] and out["provenance"] == {"inputs": []}
    cut = out["truncated"]["lists"]["rows"]
    assert cut["had"] == 1000 and cut["kept"] == len(out["rows"]) < 1000
    assert out["rows"][0]["value"] == 0  # the first (largest) rows are kept
    small = bounds.bounded({"rows": [1, 2]})
    assert "truncated" not in small
