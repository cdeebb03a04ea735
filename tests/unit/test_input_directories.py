"""A directory given as input stands for its trace files, one per rank, in rank order."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from aiflame.cli.main import main
from aiflame.errors import InputError
from aiflame.sources.registry import expand_inputs

RANKS = Path(__file__).parents[1] / "data/kineto/hta/trace_filter"


def test_trace_files_in_natural_order(tmp_path):
    for name in ("rank-10.json", "rank-2.json.gz", "rank-1.json", "notes.txt", ".hidden.json"):
        (tmp_path / name).write_text("{}")
    (tmp_path / "sub.json").mkdir()
    found = [Path(p).name for p in expand_inputs([str(tmp_path)])]
    assert found == ["rank-1.json", "rank-2.json.gz", "rank-10.json"]


def test_a_directory_without_traces_is_one_clear_error(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(InputError, match="no trace files"):
        expand_inputs([str(tmp_path)])


def test_analyze_a_directory_of_ranks(tmp_path, capsys):
    ranks = tmp_path / "traces"
    ranks.mkdir()
    for path in sorted(RANKS.glob("*.json.gz")):
        shutil.copy(path, ranks / path.name)
    out = tmp_path / "a.json"
    assert main(["analyze", str(ranks), "--json", str(out)]) == 0
    capsys.readouterr()
    report = json.loads(out.read_text())
    assert [Path(r["path"]).name for r in report["ranks"]] == [
        "sampled_rank-0.json.gz",
        "sampled_rank-1.json.gz",
    ]
    assert report["job"]["ranks"] == 2
