"""Copies that block are syncs: a download into pageable memory blocks the CPU even as
``cudaMemcpyAsync`` (TorchRec's ``.tolist()`` of all-to-all splits); an upload from
``torch.tensor(..., device=...)`` is named an upload; no "graph replays" where there are
none."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from aiflame.analysis import analyze
from aiflame.cli.main import main
from kineto_craft import Trace

DATA = Path(__file__).resolve().parents[1] / "data" / "kineto"
DLRM = DATA / "hta/trace_diff/control/control.json.gz"  # 8-rank DLRM training, rank 3
BERT = DATA / "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"
SGLANG = DATA / "tracelens/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz"
LOOKUP = "void fbgemm_gpu::split_embedding_codegen_forward_unweighted_kernel<float>(int)"


def torchrec_step(tmp_path: Path) -> Path:
    """TorchRec's input distribution: the embedding lookups are queued, then the splits of
    the next all-to-all are read with .tolist(): a cudaMemcpyAsync into pageable memory
    that returns only when the copy (after the queued lookups) is done."""
    t = Trace().rank(0, 8)
    t.annotation("ProfilerStep#4", 0, 12_000)
    t.py("torchrec/distributed/train_pipeline.py(600): progress", 1, 11_990)
    for k in range(3):
        t.op("fbgemm::split_embedding_codegen_lookup_sgd_function", 100 + 60 * k, 50)
        t.launch(LOOKUP, 110 + 60 * k, 20, 400 + 2500 * k, 2500)
    t.py("torchrec/distributed/dist_data.py(275): _get_recat", 450, 7700)
    t.op("aten::to", 460, 7680)
    t.op("aten::_to_copy", 465, 7670)
    t.op("aten::copy_", 470, 7660)
    t.copy("DtoH", "Pageable", 480, 7620, 7900, 50, nbytes=64)  # blocks until 8100
    t.runtime("cudaStreamSynchronize", 8105, 5)
    t.py("torchrec/distributed/dist_data.py(301): __init__", 8200, 300)
    t.op("aten::empty", 8250, 20)
    t.op("c10d::alltoall_base_", 8550, 60)
    t.launch("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", 8560, 30, 8620, 900)
    t.launch(LOOKUP, 9600, 20, 9650, 2000)
    return t.write(tmp_path / "torchrec.json.gz")


def test_a_download_into_pageable_memory_is_a_sync_whatever_the_call(tmp_path):
    (r,) = analyze([str(torchrec_step(tmp_path))]).ranks
    s = r.sync
    assert s is not None
    call = s.by_call["cudaMemcpyAsync (to pageable memory)"]
    assert call.count == 1 and call.blocked_us == pytest.approx(7620)
    assert s.blocked_us == pytest.approx(7620 + 5)
    assert s.by_copy["download"].count == 2  # the copy and the synchronize after it
    assert next(iter(s.by_cause)) == "aten::to"  # what .tolist() called
    # the GPU ran dry (7950) while the CPU sat in the copy: a sync wait, not a host wait
    gap = 8620 - 7950
    assert r.idle is not None and r.idle.categories["sync_wait"].time_us == pytest.approx(gap)
    f = next(f for f in r.findings if f.rule == "sync_stalls")
    assert f.cost_us == pytest.approx(gap)  # it blocked 7.5 ms before: the whole gap is its
    assert "waiting on 2 downloads" in f.summary
    assert ".tolist()" in f.fix
    assert "cudaMemcpyAsync" in f.flame.search
    assert f.top_stacks[0].stack[-4:] == ["aten::to", "aten::_to_copy", "aten::copy_",
                                          "cudaMemcpyAsync"]  # fmt: skip


def test_recorded_dlrm_downloads_count_in_the_sync_section():
    """The DLRM rank copies 60 all-to-all splits into pageable memory with cudaMemcpyAsync:
    75.7 ms of CPU blocked in them, which the sync section now holds."""
    with gzip.open(DLRM, "rt", encoding="utf-8") as f:
        events = json.load(f)["traceEvents"]
    into_pageable = {
        e["args"]["correlation"]
        for e in events
        if e.get("cat") == "gpu_memcpy" and e["name"] == "Memcpy DtoH (Device -> Pageable)"
    }
    calls = [
        e
        for e in events
        if e.get("cat") == "cuda_runtime" and e["args"].get("correlation") in into_pageable
    ]
    assert len(calls) == 60 and {e["name"] for e in calls} == {"cudaMemcpyAsync"}
    (r,) = analyze([str(DLRM)]).ranks
    got = r.sync.by_call["cudaMemcpyAsync (to pageable memory)"]
    assert got.count == 60
    assert got.blocked_us == pytest.approx(sum(e["dur"] for e in calls))
    assert r.sync.by_copy["download"].blocked_us > 0.99 * r.sync.blocked_us


def tensor_upload_step(tmp_path: Path) -> Path:
    """Each step builds its input with torch.tensor(data, device='cuda'): a copy from
    pageable memory, then a stream synchronize that waits for it."""
    t = Trace()
    t.launch("void at::native::vectorized_elementwise_kernel<4>(int)", 0, 10, 20, 980)
    t.py("train.py(51): make_batch", 900, 2400)
    t.op("aten::to", 1000, 2200)
    t.op("aten::_to_copy", 1005, 2190)
    t.op("aten::copy_", 1010, 2180)
    t.copy("HtoD", "Pageable", 1100, 30, 1140, 2000, nbytes=20 << 20)
    t.runtime("cudaStreamSynchronize", 1135, 2025)  # until 3160
    t.py("train.py(60): step", 3300, 100)
    t.launch("void at::native::vectorized_elementwise_kernel<4>(int)", 3300, 10, 3320, 500)
    return t.write(tmp_path / "upload.json.gz")


def test_an_upload_is_named_an_upload(tmp_path):
    (r,) = analyze([str(tensor_upload_step(tmp_path))]).ranks
    assert r.sync is not None and set(r.sync.by_copy) == {"upload"}
    f = next(f for f in r.findings if f.rule == "sync_stalls")
    assert "upload" in f.summary and "download" not in f.summary
    assert "torch.tensor(data, device=...)" in f.fix and ".item()" not in f.fix
    pageable = next(f for f in r.findings if f.rule == "pageable_copies")
    assert "pin" in pageable.fix


def test_no_graph_replays_label_without_graphs(capsys):
    (bert,) = analyze([str(BERT)]).ranks
    assert bert.graph_replays is None
    assert "graph" not in (bert.top_ops_unattributed_why or "")
    (sglang,) = analyze([str(SGLANG)]).ranks
    assert sglang.graph_replays is not None
    assert sglang.top_ops_unattributed_why == "graph replays and launches outside ops"
    assert main(["analyze", str(BERT)]) == 0
    assert "graph replay" not in capsys.readouterr().out.lower()
