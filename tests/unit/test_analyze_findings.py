"""The findings a user reads first, on real traces: the top finding per trace and its cost,
checked against numbers recomputed here from the trace's own events (idle gaps, the CPU
slices running in them, collectives not overlapped by computation), by plain loops that
share no code with the analysis; and the costs never sum past the timeline."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from functools import cache
from itertools import pairwise
from pathlib import Path

import pytest

from aiflame.analysis import analyze
from aiflame.analysis.schema import Finding, RankReport

DATA = Path(__file__).resolve().parents[1] / "data"
K = DATA / "kineto"
OWL_H100 = K / "tracelens/h100/google_owlv2-large-patch14-ensemble__1016001.trimmed.json.gz"
OWL_MI300 = K / "tracelens/mi300/google_owlv2-large-patch14-ensemble__1016001.trimmed.json.gz"
RESNET_NW0 = K / "kineto_tb_plugin/resnet50_num_workers_0_worker0.step7.pt.trace.json.gz"
RESNET_NW4 = K / "kineto_tb_plugin/resnet50_num_workers_4_worker0.step6.pt.trace.json.gz"
DLRM = K / "hta/trace_diff/control/control.json.gz"
DDP = K / "hta/nccl_parser_config/nccl_data.json.gz"
BERT = K / "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"
VIT = K / "tracelens/h100/Falconsai_nsfw_image_detection__1016002.json.gz"
QWEN = K / "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
COMPILED = K / "tracelens/torch_compile_triton/trace.json.gz"
PARAM = K / "param/resnet_kineto.iteration.json.gz"
CLOVER = DATA / "nsys/cloverleaf/perlmutter-cloverleaf-cuda.sqlite"
SGLANG = K / "tracelens/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz"
EVENT_SYNC = K / "hta/critical_path/cuda_event_sync/event_sync_trace.json.gz"
ALEXNET = K / "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"
VLLM_EAGER = K / "tracelens/b200/eager_trace.json.gz"

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "Runtime"}


@cache
def report(path: Path) -> RankReport:
    (r,) = analyze([str(path)]).ranks
    return r


def findings(path: Path) -> dict[str, Finding]:
    return {f.rule: f for f in report(path).findings}


@cache
def events(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def gpu_union(path: Path) -> list[tuple[float, float]]:
    """The busy intervals of the GPU, merged (us)."""
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in events(path) if e["cat"] in GPU_CATS)
    out: list[list[float]] = []
    for s, e in spans:
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(a, b) for a, b in out]


def host_gaps(path: Path) -> list[tuple[float, float, tuple]]:
    """Idle gaps whose next activity's launch call started after the GPU ran dry, with the
    (pid, tid) of that launch call."""
    ev = events(path)
    launch = {
        e["args"]["correlation"]: e
        for e in ev
        if e["cat"] in RUNTIME_CATS and "correlation" in e.get("args", {})
    }
    starts = sorted(
        (e["ts"], e) for e in ev if e["cat"] in GPU_CATS
    )  # the activity starting each busy period
    busy = gpu_union(path)
    first_at = {}
    for ts, e in starts:
        first_at.setdefault(ts, e)
    out = []
    for (_, end), (nxt, _) in pairwise(busy):
        act = first_at[nxt]
        call = launch.get(act.get("args", {}).get("correlation"))
        if call is not None and call["ts"] > end:
            out.append((end, nxt, (call["pid"], call["tid"])))
    return out


def cpu_time_in_gaps(path: Path, marks: tuple[str, ...]) -> float:
    """us of the host gaps during which the innermost CPU slice open on the launching
    thread has a slice named with one of ``marks`` around it (or is one)."""
    return time_in_gaps(path, lambda e: any(m in e["name"] for m in marks))


def time_in_gaps(path: Path, open_slice) -> float:  # type: ignore[no-untyped-def]
    """us of the host gaps during which a CPU slice for which ``open_slice(event)`` holds
    is open on the launching thread."""
    by_thread = defaultdict(list)
    for e in events(path):
        if e["cat"] not in GPU_CATS:
            by_thread[(e["pid"], e["tid"])].append(e)
    gaps = defaultdict(list)
    for g0, g1, th in host_gaps(path):
        gaps[th].append((g0, g1))
    total = 0.0
    for th, windows in gaps.items():
        slices = sorted(by_thread[th], key=lambda e: e["ts"])
        active: list[dict] = []
        k = 0
        for g0, g1 in sorted(windows):  # a sweep: the gaps are disjoint, in time order
            while k < len(slices) and slices[k]["ts"] < g1:
                active.append(slices[k])
                k += 1
            active = [e for e in active if e["ts"] + e["dur"] > g0]
            inside = [e for e in active if e["ts"] < g1]
            ends = (x for e in inside for x in (e["ts"], e["ts"] + e["dur"]))
            cuts = sorted({g0, g1, *(max(g0, min(g1, x)) for x in ends)})
            for a, b in pairwise(cuts):
                open_ = [e for e in inside if e["ts"] <= a and e["ts"] + e["dur"] >= b]
                if any(open_slice(e) for e in open_):
                    total += b - a
    return total


@cache
def first_launches(path: Path) -> frozenset[int]:
    """ids of the launch calls (events) that launched their kernel first and took 1 ms or
    more: a module loaded on the first launch (lazy loading)."""
    ev = events(path)
    call = {e["args"]["correlation"]: e for e in ev
            if e["cat"] in RUNTIME_CATS and "correlation" in e.get("args", {})}  # fmt: skip
    first: dict[str, dict] = {}
    for k in sorted((e for e in ev if e["cat"] in ("kernel", "Kernel")), key=lambda e: e["ts"]):
        c = call.get(k["args"].get("correlation"))
        if c is not None and (k["name"] not in first or c["ts"] < first[k["name"]]["ts"]):
            first[k["name"]] = c
    return frozenset(id(c) for c in first.values() if c["dur"] >= 1000)


def exposed_communication(path: Path) -> float:
    """us of collective kernels during which no computation kernel runs (a sweep over the
    kernels' starts and ends, counting how many of each kind are running)."""
    edges = []
    for e in events(path):
        if e["cat"] in ("kernel", "gpu_memset"):
            kind = "comm" if "nccl" in e["name"].lower() else "comp"
            edges += [(e["ts"], 1, kind), (e["ts"] + e["dur"], -1, kind)]
    edges.sort(key=lambda x: (x[0], x[1]))
    running = {"comm": 0, "comp": 0}
    exposed, last = 0.0, None
    for at, step, kind in edges:
        if last is not None and running["comm"] and not running["comp"]:
            exposed += at - last
        running[kind] += step
        last = at
    return exposed


def timeline_us(path: Path) -> float:
    busy = gpu_union(path)
    return busy[-1][1] - busy[0][0]


# -- the top finding of each trace ----------------------------------------------------


@pytest.mark.parametrize("path", [OWL_H100, OWL_MI300])
def test_owlv2_leads_with_the_preprocessing_the_gpu_waits_for(path):
    """One workload, one diagnosis on both GPUs: the CPU's image preprocessing."""
    top = report(path).findings[0]
    assert top.rule == "preprocessing"
    expected = cpu_time_in_gaps(path, ("image_processing", "preprocess"))
    assert expected > 0.4 * timeline_us(path)
    assert top.cost_us == pytest.approx(expected, rel=0.01)
    assert top.severity == "high"
    assert "resize" in " ".join(top.top_stacks[0].stack)
    assert "DataLoader workers" in top.fix or "GPU" in top.fix
    rules = findings(path)
    assert "launch_bound" not in rules  # 16 launches around a 120 ms stall are not launch-bound
    assert "sync_stalls" not in rules  # the copy before the stall did not cause it


def test_resnet_loading_in_the_main_process_leads_with_the_dataloader():
    top = report(RESNET_NW0).findings[0]
    assert top.rule == "data_loading"
    expected = cpu_time_in_gaps(RESNET_NW0, ("DataLoader",))
    assert top.cost_us == pytest.approx(expected, rel=0.01)
    assert "num_workers" in top.fix
    launch = findings(RESNET_NW0).get("launch_bound")
    assert launch is None or launch.cost_us < top.cost_us / 5


def test_dlrm_rank_leads_with_exposed_communication():
    top = report(DLRM).findings[0]
    assert top.rule == "exposed_communication"
    figures = {f.label: f.value for f in top.figures}
    assert figures["exposed communication"] == pytest.approx(exposed_communication(DLRM), rel=1e-3)
    assert top.cost_us >= figures["exposed communication"]
    assert top.items and top.items[0].name in ("sendrecv", "alltoall", "allreduce")
    assert "bucket" in top.fix


def test_eager_bert_inference_is_launch_bound():
    top = report(BERT).findings[0]
    assert top.rule == "launch_bound"
    idle = sum(b - a for a, b, _ in host_gaps(BERT))
    assert 0.3 * idle < top.cost_us <= idle
    assert "CUDA graphs" in top.fix


def pageable_download_calls(path: Path) -> set[int]:
    """Correlation ids of the calls that copied into pageable memory (they block)."""
    return {
        e["args"]["correlation"]
        for e in events(path)
        if e["cat"] in GPU_CATS and "DtoH" in e["name"] and "Pageable)" in e["name"]
    }


def idle_inside(path: Path, call_names: tuple[str, ...]) -> tuple[float, float]:
    """(us the calls named so, or copying into pageable memory, blocked, us of it during
    which the GPU ran nothing, inside the GPU timeline: from the first activity's start to
    the last one's end)."""
    busy = gpu_union(path)
    blocked = inside = 0.0
    downloads = pageable_download_calls(path)
    for e in events(path):
        into_pageable = e["cat"] in RUNTIME_CATS and e["args"].get("correlation") in downloads
        if e["name"] in call_names or into_pageable:
            blocked += e["dur"]
            c0, c1 = max(e["ts"], busy[0][0]), min(e["ts"] + e["dur"], busy[-1][1])
            if c1 > c0:
                inside += (c1 - c0) - sum(max(0.0, min(b, c1) - max(a, c0)) for a, b in busy)
    return blocked, inside


def test_sglang_decode_leads_with_the_copy_that_waits_on_work_the_trace_does_not_show():
    """The step's blocking download waits 463 ms while the GPU runs nothing in the trace:
    the sync is the cause, and what it waited on is outside the trace."""
    top = report(SGLANG).findings[0]
    assert top.rule == "sync_stalls" and top.severity == "high"
    blocked, inside = idle_inside(SGLANG, ("hipMemcpyWithStream",))
    assert inside > 0.95 * blocked > 0.9 * timeline_us(SGLANG)
    figures = {f.label: f.value for f in top.figures}
    assert figures["GPU idle while they blocked"] == pytest.approx(inside, abs=1.0)
    assert top.cost_us == pytest.approx(inside, rel=1e-3)
    assert "waited on work it does not record" in top.summary
    assert top.fix.startswith("first find what the calls waited on")
    assert "cuda_graph_runner" in " ".join(top.top_stacks[0].stack)


def test_syncs_that_wait_for_traced_work_are_not_said_to_wait_elsewhere():
    f = findings(EVENT_SYNC)["sync_stalls"]
    blocked, inside = idle_inside(EVENT_SYNC, ("cudaEventSynchronize", "cudaDeviceSynchronize",
                                               "cudaStreamSynchronize"))  # fmt: skip
    assert 0 < inside < 0.5 * blocked
    assert {x.label: x.value for x in f.figures}["GPU idle while they blocked"] == pytest.approx(
        inside, abs=1.0
    )
    assert "does not record" not in f.summary and not f.fix.startswith("first find")


def test_eager_vllm_engine_is_launch_bound_and_its_input_step_is_not_preprocessing():
    """vLLM in eager mode on B200: ~70 us of Python and dispatch per launch for kernels of
    a few us; the engine's _preprocess launches GPU work (the embedding), which is not
    input preprocessing to move off the step."""
    top = report(VLLM_EAGER).findings[0]
    assert top.rule == "launch_bound" and "CUDA/HIP graphs" in top.fix
    assert "enforce_eager" in top.fix  # the engine's own switch
    idle = sum(b - a for a, b, _ in host_gaps(VLLM_EAGER))
    assert 0.3 * idle < top.cost_us <= idle
    assert "preprocessing" not in findings(VLLM_EAGER)
    assert "exposed_communication" in findings(VLLM_EAGER)  # the tensor-parallel all-reduces


def test_first_iterations_lead_with_their_one_time_initialization():
    """AlexNet's first iterations: cuDNN's setup in runtime calls of seconds, not a
    caching-allocator or Python problem."""
    top = report(ALEXNET).findings[0]
    assert top.rule == "initialization" and top.severity == "high"

    def setup_call(e: dict) -> bool:  # a long runtime call, neither a sync nor a copy
        name = e["name"]
        return (e["cat"] in RUNTIME_CATS and e["dur"] >= 50_000
                and "Synchronize" not in name and "Memcpy" not in name)  # fmt: skip

    def first_launch(e: dict) -> bool:  # the first launch of its kernel, 1 ms or more
        return e["cat"] in RUNTIME_CATS and id(e) in first_launches(ALEXNET)

    expected = time_in_gaps(ALEXNET, setup_call)
    assert expected > 0.9 * timeline_us(ALEXNET)
    items = {i.name.split(" (")[0]: i.cost_us for i in top.items}
    # a long call that is a kernel's first launch is counted once, as a first launch
    assert items["runtime calls of 50 ms or more"] + items["first launches of kernels"] == (
        pytest.approx(expected, rel=0.01)
    )
    assert items["first launches of kernels"] == pytest.approx(
        time_in_gaps(ALEXNET, first_launch), rel=0.01
    )
    # and the rest of the cold start: first allocations and operators' first calls
    assert set(items) >= {"first allocations", "first calls of operators"}
    assert top.cost_us == pytest.approx(sum(items.values()))
    assert expected < top.cost_us <= report(ALEXNET).time_breakdown.idle
    assert "schedule(wait=1, warmup=2" in top.fix and "CUDA_MODULE_LOADING=EAGER" in top.fix
    assert "allocation" not in findings(ALEXNET)  # cudaFree of seconds is no allocator issue
    assert "initialization" not in findings(BERT) and "initialization" not in findings(DLRM)


def test_cpp_cuda_program_gets_fixes_for_its_own_stack():
    r = report(CLOVER)
    assert r.workload.kind == "cuda-app"
    rules = findings(CLOVER)
    assert "cudaDeviceSynchronize" in rules["sync_stalls"].fix
    assert "cudaMallocHost" in rules["pageable_copies"].fix
    text = " ".join(f.fix for f in r.findings)
    assert ".item()" not in text and "DataLoader" not in text and "torch" not in text


# -- the rules of the causes these traces have, where they fire and where not -----------


def test_eager_attention_fires_on_owlv2_not_on_sdpa_models():
    f = findings(OWL_H100)["eager_attention"]
    softmax = sum(
        e["dur"] for e in events(OWL_H100) if e["cat"] == "kernel" and "SoftMax" in e["name"]
    )
    # the softmax kernels and the scale/mask kernels beside them (a chain cut by the
    # trimmed window's edge is not counted)
    assert 0.9 * softmax <= f.cost_us <= 1.25 * softmax
    assert "sdpa" in f.fix
    for sdpa in (BERT, VIT):
        assert "eager_attention" not in findings(sdpa)


def test_elementwise_fusion_fires_on_eager_decode_not_on_compiled_code():
    f = findings(QWEN)["elementwise_fusion"]
    assert f.severity == "high" and "torch.compile" in f.fix
    assert "elementwise_fusion" not in findings(COMPILED)


def test_exposed_communication_not_without_collectives():
    assert "exposed_communication" not in findings(BERT)
    assert "exposed_communication" in findings(DDP)


def test_small_copies_fire_on_ddp_not_on_a_single_copy():
    f = findings(DDP)["many_small_copies"]
    copies = {x.label: x.value for x in f.figures}["copies"]
    small = sum(
        1
        for e in events(DDP)
        if e["cat"] == "gpu_memcpy"
        and e["args"].get("bytes", 1 << 30) < 65536
        and "DtoH" not in e["name"]
    )
    assert copies == small >= 20
    assert f.cost_us < report(DDP).time_breakdown.idle + report(DDP).time_breakdown.memcpy
    assert "many_small_copies" not in findings(BERT)


def test_pageable_copies_on_param_resnet_not_on_bert():
    assert "pageable_copies" in findings(PARAM)
    assert "pageable_copies" not in findings(BERT)


def test_data_loading_not_where_workers_load():
    assert "data_loading" not in findings(RESNET_NW4)
    assert "data_loading" not in findings(OWL_H100)  # its DataLoader only wraps preprocessing


def test_op_categories_match_the_kernels_of_each_op():
    r = report(BERT)
    cats = {c.category: c for c in r.op_categories}
    total = sum(e["dur"] for e in events(BERT) if e["cat"] in GPU_CATS)
    assert sum(c.time_us for c in r.op_categories) == pytest.approx(total)
    assert cats["gemm"].top[0] == "aten::addmm" and cats["attention"].time_us > 0
    assert {"gemm", "attention", "elementwise", "memcpy"} <= set(cats)


# -- one currency ------------------------------------------------------------------------


ALL = [OWL_H100, OWL_MI300, RESNET_NW0, RESNET_NW4, DLRM, DDP, BERT, VIT, QWEN, COMPILED,
       PARAM, CLOVER, SGLANG, EVENT_SYNC, ALEXNET, VLLM_EAGER]  # fmt: skip


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name[:40])
def test_findings_never_claim_more_than_the_timeline(path):
    r = report(path)
    tb = r.time_breakdown
    assert sum(f.cost_us for f in r.findings) <= tb.total * (1 + 1e-9)
    for f in r.findings:
        assert 0 < f.cost_us <= tb.total and f.share_of_gpu_time == pytest.approx(
            f.cost_us / tb.total
        )
        assert f.summary and f.assumption and f.fix and f.figures
    assert r.findings == sorted(r.findings, key=lambda f: -f.cost_us)
    idle = r.idle
    if idle is not None:
        assert sum(c.time_us for c in idle.causes) == pytest.approx(idle.total_us, rel=1e-6)
