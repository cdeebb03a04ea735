"""Idle charged to what the CPU did: a cold first call is initialization (first launches
loading modules, cuBLAS setup, first allocations), not dispatch; time in a step with no
operator running is not dispatch either (the free of the last batch, or unexplained); two
findings with one fix are one finding."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiflame.analysis import analyze
from aiflame.analysis.causes import INDEX
from aiflame.analysis.insights import Context
from aiflame.sources.registry import load_trace
from kineto_craft import Trace

SWITCH = "transformers/models/switch_transformers/modeling_switch_transformers.py"
KERNELS = {  # one model call's kernels, (name, GPU us)
    "linear": ("ampere_sgemm_128x64_tn", 40),
    "softmax": ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>(int)", 8),
    "router": ("void at::native::reduce_kernel<512, 1>(int)", 6),
    "add": ("void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor>(int)", 5),
}
FIRST_LAUNCH_US = {"linear": 9000, "softmax": 3000, "router": 18000, "add": 4000}
CUBLAS_SETUP_US = 12_000  # the first aten::addmm creates cuBLAS' handle and workspace
MALLOC_US = 2_000


def cold_call(tmp_path: Path, warm: bool = False) -> Path:
    """A Switch-Transformer's first forward (or, with ``warm``, a later one): per layer a
    linear, the router's softmax and reduction, a residual add; the first launch of each
    kernel loads its module (3-18 ms), the first addmm sets cuBLAS up, the allocator's
    first cudaMalloc calls fill its pool."""
    t = Trace()
    seen: set[str] = set()
    t.op("aten::to", 0, 40)  # the input ids uploaded first: the GPU timeline starts there
    t.copy("HtoD", "Pageable", 5, 30, 20, 5, nbytes=4096)
    at = 100.0
    gpu = 0.0
    t.py(f"{SWITCH}(1650): forward", 90, 1e6)
    for layer in range(4):
        for op, (kernel, gpu_us) in KERNELS.items():
            first = op not in seen and not warm
            seen.add(op)
            name = {"linear": "aten::addmm", "softmax": "aten::softmax",
                    "router": "aten::sum", "add": "aten::add"}[op]  # fmt: skip
            setup = CUBLAS_SETUP_US if first and op == "linear" else 0
            malloc = MALLOC_US if first else 0
            launch = FIRST_LAUNCH_US[op] if first else 6
            dur = 20 + setup + malloc + launch
            t.py(f"{SWITCH}({300 + layer}): forward", at, dur + 10)
            t.op(name, at + 2, dur)
            if malloc:
                t.runtime("cudaMalloc", at + 4 + setup, malloc)
            start = at + 6 + setup + malloc
            gpu = max(gpu, start + launch + 2)
            t.launch(kernel, start, launch, gpu, gpu_us)
            gpu += gpu_us
            at += dur + 15
    return t.write(tmp_path / ("warm.json.gz" if warm else "cold.json.gz"))


def test_a_cold_first_call_leads_with_its_initialization(tmp_path):
    (r,) = analyze([str(cold_call(tmp_path))]).ranks
    top = r.findings[0]
    assert top.rule == "initialization" and top.severity == "high"
    assert "CUDA_MODULE_LOADING=EAGER" in top.fix and "warm-up" in top.fix
    items = {i.name.split(" (")[0]: i.cost_us for i in top.items}
    # the first launches: what the GPU idled while they ran (it had nothing queued)
    assert items["first launches of kernels"] == pytest.approx(sum(FIRST_LAUNCH_US.values()))
    assert items["first allocations"] == pytest.approx(len(KERNELS) * MALLOC_US, rel=0.01)
    assert items["first calls of operators"] >= CUBLAS_SETUP_US
    figures = {f.label: f.value for f in top.figures}
    assert figures["slow first launches of kernels"] == len(KERNELS)
    # not Python and dispatch, not CUDA graphs
    overhead = sum(f.cost_us for f in r.findings if f.rule in ("host_overhead", "launch_bound"))
    assert overhead < 0.05 * top.cost_us
    assert top.cost_us > 0.9 * r.time_breakdown.idle


def test_a_warm_call_has_no_initialization(tmp_path):
    (r,) = analyze([str(cold_call(tmp_path, warm=True))]).ranks
    assert "initialization" not in {f.rule for f in r.findings}


BATCH = 2056 * 3 * 32 * 32 * 4  # bytes of one batch of 2,056 CIFAR images (25 MB)
FREE_US = 2100
STAGE_US = 900


def training_steps(tmp_path: Path, frees: bool = True, steps: int = 4) -> Path:
    """A training loop with batch 2056: the DataLoader's workers hand each batch over in
    shared memory; the loop frees the last batch (2.1 ms: the innermost slice is the
    ProfilerStep), takes the next, copies it from pageable memory, runs forward and
    backward."""
    t = Trace()
    at = 0.0
    for k in range(steps):
        t.annotation(f"ProfilerStep#{k + 10}", at, 6000)
        if frees:
            t.memory(at + 20, -BATCH, addr=0x7F0000000000 + k * BATCH)
        loader = at + 20 + FREE_US
        t.annotation("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", loader, 80)
        t.memory(loader + 40, BATCH, addr=0x7F0000000000 + (k + 1) * BATCH)
        up = loader + 100
        t.op("aten::to", up, STAGE_US + 40)
        t.op("aten::_to_copy", up + 5, STAGE_US + 30)
        t.op("aten::copy_", up + 10, STAGE_US + 20)
        t.copy("HtoD", "Pageable", up + 15, STAGE_US, up + 15 + STAGE_US - 200, 400, BATCH)
        fwd = up + STAGE_US + 60
        t.op("aten::conv2d", fwd, 30)
        t.launch("cudnn::winograd_nonfused::winogradForwardOutput4x4", fwd + 5, 10, fwd + 20, 2500)
        t.op("aten::add_", fwd + 40, 20)
        t.launch("void at::native::vectorized_elementwise_kernel<4>(int)", fwd + 45, 8,
                 fwd + 2530, 300)  # fmt: skip
        at += 6000
    return t.write(tmp_path / f"train{'' if frees else '_nofree'}.json.gz")


def test_freeing_the_last_batch_is_not_dispatch_and_pinning_fixes_it_with_the_copies(tmp_path):
    """The 2.1 ms in each step before the DataLoader's next batch is the free of the last
    one, not Python dispatch; pin_memory=True fixes it and the pageable copies: one
    finding, first."""
    path = training_steps(tmp_path)
    c = Context(load_trace(str(path)))
    e = c.explained
    freeing = float(e.ns[e.cause == INDEX["host_free"]].sum()) / 1e3
    # per step: the free's time until the DataLoader's slice (the first gap starts at the
    # first GPU activity, so the first step's free is not in it)
    assert freeing == pytest.approx(3 * FREE_US, rel=0.02)
    assert float(e.ns[e.cause == INDEX["python_overhead"]].sum()) / 1e3 < 0.1 * freeing
    (r,) = analyze([str(path)]).ranks
    top = r.findings[0]
    assert top.rule in ("host_memory", "pageable_copies")
    assert set([top.rule, *top.merged]) == {"host_memory", "pageable_copies"}
    assert "pin_memory=True" in top.fix
    assert "host_overhead" not in {f.rule for f in r.findings}


def test_a_step_with_nothing_traced_in_it_is_unexplained_not_dispatch(tmp_path):
    """Without the free, the same 2.1 ms shows only the ProfilerStep: the trace does not
    say what the CPU did, and the report says so."""
    (r,) = analyze([str(training_steps(tmp_path, frees=False))]).ranks
    causes = {c.cause: c.time_us for c in r.idle.causes}
    assert causes["untraced"] == pytest.approx(3 * FREE_US, rel=0.02)
    assert causes.get("python_overhead", 0) < 0.1 * causes["untraced"]
    rules = {f.rule: f for f in r.findings}
    assert "host_overhead" not in rules and "unexplained_idle" in rules
    assert "with_stack=True" in rules["unexplained_idle"].fix


def test_two_findings_with_one_fix_are_one():
    """Eager BERT: its launch-bound phases and the dispatch between them are fixed alike
    (CUDA graphs, torch.compile): one finding, with both costs."""
    bert = Path(__file__).resolve().parents[1] / (
        "data/kineto/tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"
    )
    c = Context(load_trace(str(bert)))
    from aiflame.analysis import rules_host

    bound, overhead = rules_host.launch_bound(c), rules_host.host_overhead(c)
    assert bound is not None and overhead is not None
    (r,) = analyze([str(bert)]).ranks
    rules = [f.rule for f in r.findings]
    assert "host_overhead" not in rules
    merged = r.findings[rules.index("launch_bound")]
    assert merged.merged == ["host_overhead"]
    assert merged.cost_us == pytest.approx((bound.cost_ns + overhead.cost_ns) / 1e3)
