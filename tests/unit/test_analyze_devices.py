"""A rank's report names the GPUs it ran work on, not every GPU of the machine."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from aiflame.cli.main import main

TRACE = Path(__file__).parents[1] / "data/kineto/hta/triton_example/triton_example.json.gz"


def test_only_the_gpus_with_activity_are_listed(tmp_path):
    raw = json.loads(gzip.decompress(TRACE.read_bytes()))
    assert len(raw["deviceProperties"]) == 8  # the machine's GPUs
    used = {
        e["args"]["device"]
        for e in raw["traceEvents"]
        if e.get("cat") == "kernel" and "device" in e.get("args", {})
    }
    out = tmp_path / "a.json"
    assert main(["analyze", str(TRACE), "--json", str(out)]) == 0
    (rank,) = json.loads(out.read_text())["ranks"]
    names = {d["id"]: d["name"] for d in raw["deviceProperties"]}
    assert rank["devices"] == [names[i] for i in sorted(used)]
    assert len(rank["devices"]) == len(used) < 8
