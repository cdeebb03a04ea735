"""``aiflame record --module-instances / --merge-steps``: the PyTorch window's trace is read
with the same importer options as ``aiflame flamegraph`` gives it (a real trace, as the
recording directory holds it)."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

from aiflame.collectors.torchtrace import load_torch_traces
from aiflame.render.folded import render_folded

DATA = Path(__file__).parents[1] / "data/kineto"
TRACE = DATA / "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"
STEPS = DATA / "hta/nccl_parser_config/nccl_data.json.gz"  # three ProfilerStep#N
INSTANCE = re.compile(r"^nn\.Module: \w+_\d+$")


def record_dir(tmp_path: Path, trace: Path = TRACE) -> Path:
    (tmp_path / "torch-4321.json").write_bytes(gzip.decompress(trace.read_bytes()))
    return tmp_path


def frame_names(record_dir: Path, **options: bool) -> set[str]:
    notes: list[str] = []
    (profile,) = load_torch_traces(str(record_dir), {}, notes, options=options)
    assert notes == []
    return {frame for line in render_folded(profile).splitlines() for frame in line.split(";")}


def test_module_instances_merge_by_default_and_stay_apart_when_asked(tmp_path):
    record_dir(tmp_path)
    merged = frame_names(tmp_path)
    apart = frame_names(tmp_path, module_instances=True)
    assert not any(INSTANCE.match(n) for n in merged)
    instances = {n for n in apart if INSTANCE.match(n)}
    assert {"nn.Module: BertLayer_0", "nn.Module: BertLayer_1"} <= instances


def test_profiler_steps_merge_when_asked(tmp_path):
    record_dir(tmp_path, STEPS)
    steps = {n for n in frame_names(tmp_path) if n.startswith("ProfilerStep#")}
    assert len(steps) > 1
    merged = {n for n in frame_names(tmp_path, merge_steps=True) if n.startswith("ProfilerStep")}
    assert merged == {"ProfilerStep#*"}
