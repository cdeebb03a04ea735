"""The Kineto reader keeps operators' Input Dims / Input type only when asked (shapes=True)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np

from aiflame.sources.inputs import Input
from aiflame.sources.kineto import importer as kineto

BERT = (
    Path(__file__).resolve().parents[1]
    / "data/kineto/tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"
)


def test_shapes_are_opt_in_and_match_the_events():
    plain, _ = kineto.read_columns(Input(str(BERT)))
    assert plain.cpu_shape is None and plain.shapes == []
    cols, _ = kineto.read_columns(Input(str(BERT)), shapes=True)
    np.testing.assert_array_equal(cols.cpu_ts, plain.cpu_ts)  # nothing else changes
    with gzip.open(BERT, "rt", encoding="utf-8") as f:
        events = json.load(f)["traceEvents"]
    addmm = [
        (e["args"]["Input Dims"], e["args"]["Input type"], e["args"]["Concrete Inputs"])
        for e in events
        if e.get("name") == "aten::addmm" and e.get("cat") == "cpu_op"
    ]
    names = np.array(cols.names)[cols.cpu_name]
    got = [cols.shapes[i] for i in cols.cpu_shape[names == "aten::addmm"].tolist()]
    assert len(got) == len(addmm) == 26
    assert sorted(map(repr, got)) == sorted(map(repr, addmm))
    # bytes of the one memcpy (1 byte, the .item() result); kernels record none
    assert cols.gpu_bytes is not None and plain.gpu_bytes is None
    copies = [e for e in events if e.get("cat") == "gpu_memcpy"]
    assert (
        sorted(cols.gpu_bytes[cols.gpu_bytes >= 0].tolist())
        == [1]
        == [e["args"]["bytes"] for e in copies]
    )


def test_shapes_survive_a_batch_that_falls_back_to_plain_dicts(tmp_path):
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0,
         "dur": 5, "args": {"Input Dims": [[2, 3], [3, 4]], "Input type": ["float", "float"]}},
        {"ph": "X", "cat": "cpu_op", "name": "odd", "pid": 1, "tid": 1, "ts": 10, "dur": 1,
         "args": 7},  # an args that is not an object: the batch is decoded as plain dicts
    ]  # fmt: skip
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    cols, _ = kineto.read_columns(Input(str(path)), shapes=True)
    assert cols.cpu_shape is not None
    assert cols.shapes[int(cols.cpu_shape[0])] == ([[2, 3], [3, 4]], ["float", "float"], None)
    assert int(cols.cpu_shape[1]) == -1
