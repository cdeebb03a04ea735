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


def test_traces_that_are_not_ranks_of_one_job_are_not_merged_silently(tmp_path, capsys):
    """A folder of three models' traces: the merged graph says so, and how to see each."""
    h100 = Path(__file__).parents[1] / "data/kineto/tracelens/h100"
    models = tmp_path / "models"
    models.mkdir()
    for name in (
        "Falconsai_nsfw_image_detection__1016002.json.gz",
        "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
        "gaunernst_bert-small-uncased__1016001.json.gz",
    ):
        shutil.copy(h100 / name, models / name)
    out = tmp_path / "m.html"
    assert main(["flamegraph", str(models), "-o", str(out)]) == 0
    (warning,) = [ln for ln in capsys.readouterr().err.splitlines() if "warning" in ln]
    assert warning.startswith("aiflame: warning: 3 inputs that are not ranks of one job merged")
    assert "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz" in warning and "--group-by file" in warning
    assert main(["flamegraph", str(models), "-o", str(out), "--group-by", "file"]) == 0
    assert "warning" not in capsys.readouterr().err
    # the ranks of one job merge as expected, without a word
    assert main(["flamegraph", str(RANKS), "-o", str(out)]) == 0
    assert "warning" not in capsys.readouterr().err
