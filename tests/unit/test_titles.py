"""Page titles that say what is shown: each input's device and name, the count and name
pattern of merged inputs."""

from __future__ import annotations

import gzip
import json
import re

import pytest

from aiflame.cli.main import main
from aiflame.render.html import extract_data
from aiflame.render.titles import file_stem, name_pattern
from aiflame.sources.kineto.info import short_device_name

QWEN = "kineto/tracelens/{}/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
BERT = "kineto/tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"
CPU_ONLY = "kineto/hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"


@pytest.mark.parametrize(
    ("name", "short"),
    [
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("AMD Instinct MI300X VF", "MI300X"),
        ("Tesla V100-SXM2-16GB", "V100"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA B200", "B200"),
        ("NVIDIA GeForce RTX 2080 Ti", "RTX 2080 Ti"),
        ("NVIDIA", "NVIDIA"),  # nothing else to say: the name as it is
    ],
)
def test_device_names_keep_the_model(name, short):
    assert short_device_name(name) == short


def test_file_stems_and_name_patterns():
    assert file_stem("logs/worker0.pt.trace.json.gz") == "worker0"
    assert file_stem("profile.pb.gz") == "profile"
    names = [f"worker{i}_step_12" for i in range(8)]
    assert name_pattern(names) == "worker*_step_12"
    assert name_pattern(["rank1", "rank10", "rank2"]) == "rank*"  # numbers stay whole
    assert name_pattern(["run_7", "run_17"]) == "run_*"
    assert name_pattern(["a", "b"]) == "*"
    assert name_pattern(["same", "same"]) == "same"


def title_of(page: str) -> str:
    m = re.search(r"<title>(.*?)</title>", page)
    assert m
    return m.group(1)


def run(args: list[str]) -> None:
    assert main(args) == 0


def test_merged_ranks_are_counted_in_the_title(data_dir, tmp_path):
    """Eight ranks of a job, one trace each, as the profiler names them per worker."""
    trace = json.loads(gzip.decompress((data_dir / CPU_ONLY).read_bytes()))
    job = tmp_path / "job"
    job.mkdir()
    for rank in range(8):
        trace["distributedInfo"]["rank"] = rank
        (job / f"worker{rank}_step_12.pt.trace.json").write_text(json.dumps(trace))
    out = tmp_path / "job.html"
    run(["flamegraph", str(job), "-o", str(out)])
    page = out.read_text(encoding="utf-8")
    assert title_of(page) == "Flame graph of 8 ranks of worker*_step_12"
    assert extract_data(page)[0]["title"] == "Flame graph of 8 ranks of worker*_step_12"
    # The same files with one rank (a copy per step, say): files, not ranks.
    trace["distributedInfo"]["rank"] = 3
    for step in (1, 2):
        (tmp_path / f"step{step}.json").write_text(json.dumps(trace))
    run(["flamegraph", str(tmp_path / "step1.json"), str(tmp_path / "step2.json"), "-o", str(out)])
    assert title_of(out.read_text(encoding="utf-8")) == "Flame graph of 2 files of step*"


def test_one_input_is_named_by_its_device_and_file(data_dir, tmp_path):
    out = tmp_path / "x.html"
    run(["flamegraph", str(data_dir / BERT), "-o", str(out)])
    assert title_of(out.read_text(encoding="utf-8")) == (
        "Flame graph of H100 (gaunernst_bert-small-uncased__1016001)"
    )


def test_diff_titles_say_which_input_is_which(data_dir, tmp_path):
    out = tmp_path / "d.html"
    h100, mi300 = (str(data_dir / QWEN.format(d)) for d in ("h100", "mi300"))
    run(["diff", h100, mi300, "-o", str(out)])
    page = out.read_text(encoding="utf-8")
    assert title_of(page) == "H100 vs MI300X (Qwen_Qwen1.5-0.5B-Chat__1016005)"
    header = extract_data(page)[0]
    assert header["diff"]["names"] == {"base": "H100", "test": "MI300X"}
    assert f"base: {h100} · test: {mi300}" in page
    run(["diff", str(data_dir / BERT), mi300, "-o", str(out)])
    assert title_of(out.read_text(encoding="utf-8")) == (
        "H100 (gaunernst_bert-small-uncased__1016001) vs MI300X (Qwen_Qwen1.5-0.5B-Chat__1016005)"
    )
    run(["diff", mi300, mi300, "-o", str(out), "--title", "mine"])
    assert title_of(out.read_text(encoding="utf-8")) == "mine"
    run(["diff", mi300, mi300, "-o", str(out)])
    assert title_of(out.read_text(encoding="utf-8")) == (
        "MI300X (Qwen_Qwen1.5-0.5B-Chat__1016005) (base) vs "
        "MI300X (Qwen_Qwen1.5-0.5B-Chat__1016005) (test)"
    )
