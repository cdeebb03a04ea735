"""Graph replays with their capture (--capture-trace): a captured operator that N graph
launches replay is N calls, each with its FLOPs, so its rate is one replay's, as when the
same kernels run eagerly; captures that several replays fit are said so and no roofline
finding rests on them."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiflame.analysis import analyze
from kineto_craft import Trace

GEMM = "ampere_bf16_s16816gemm_bf16_128x256_ldg8_f2f_stages_64x3_nn"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>(int)"  # noqa: E501
BF16 = ["c10::BFloat16", "c10::BFloat16"]
N = 4096
FLOPS = 2 * N**3
GEMM_US = 630.0  # 218 TFLOP/s: 70% of an A100's 312 bf16 TFLOP/s
REPLAYS = 4


def capture(tmp_path: Path, sizes: tuple[int, ...] = (N,)) -> Path:
    """The trace of the graphs' capture: per graph, between StreamBeginCapture and
    EndCapture, an aten::mm and an aten::add launching one kernel each (not run)."""
    t = Trace()
    at = 0.0
    for m in sizes:
        t.runtime("cudaStreamBeginCapture", at, 5)
        t.py("model.py(40): forward", at + 10, 200)
        t.op("aten::mm", at + 20, 80, dims=[[m, N], [N, N]], types=BF16)
        t.runtime("cudaLaunchKernel", at + 30, 10)
        t.op("aten::add", at + 120, 60, dims=[[m, N], [m, N], []], types=[*BF16, "Scalar"])
        t.runtime("cudaLaunchKernel", at + 130, 10)
        t.runtime("cudaStreamEndCapture", at + 220, 5)
        at += 1000
    return t.write(tmp_path / "capture.json.gz")


def replay(tmp_path: Path) -> Path:
    """REPLAYS decode steps, each one cudaGraphLaunch running the GEMM and the add."""
    t = Trace()
    at = 0.0
    for k in range(REPLAYS):
        t.annotation(f"ProfilerStep#{k}", at, 700)
        t.py("engine.py(12): step", at + 1, 690)
        t.graph_launch(at + 5, 20, [(GEMM, at + 30, GEMM_US), (ADD, at + 30 + GEMM_US, 20)])
        at += 700
    return t.write(tmp_path / "replay.json.gz")


def eager(tmp_path: Path) -> Path:
    """The same kernels launched eagerly by their operators, REPLAYS times."""
    t = Trace()
    at = 0.0
    for _ in range(REPLAYS):
        t.op("aten::mm", at, 20, dims=[[N, N], [N, N]], types=BF16)
        t.launch(GEMM, at + 5, 10, at + 30, GEMM_US)
        t.op("aten::add", at + 25, 20, dims=[[N, N], [N, N], []], types=[*BF16, "Scalar"])
        t.launch(ADD, at + 30, 10, at + 30 + GEMM_US, 20)
        at += 700
    return t.write(tmp_path / "eager.json.gz")


def test_each_replay_is_a_call_of_the_captured_operators(tmp_path):
    (r,) = analyze([str(replay(tmp_path))], capture=str(capture(tmp_path))).ranks
    (e,) = analyze([str(eager(tmp_path))]).ranks
    assert r.graph_replays is not None and r.graph_replays.attributed_us == pytest.approx(
        REPLAYS * (GEMM_US + 20)
    )
    mm = next(o for o in r.efficiency.ops if o.op == "aten::mm")
    assert mm.calls == REPLAYS and mm.flops == FLOPS
    assert mm.tflops_per_s == pytest.approx(FLOPS / (GEMM_US * 1e6))  # 218, not 218 / 4
    eager_mm = next(o for o in e.efficiency.ops if o.op == "aten::mm")
    assert mm.tflops_per_s == pytest.approx(eager_mm.tflops_per_s)
    assert r.efficiency.mfu == pytest.approx(e.efficiency.mfu)
    (gemm,) = r.gemm
    assert gemm.calls == REPLAYS and gemm.tflops_per_s == pytest.approx(eager_mm.tflops_per_s)
    ops = {row.name: row for row in r.top_ops}
    assert ops["aten::mm"].count == REPLAYS
    assert ops["aten::mm"].mean_us == pytest.approx(GEMM_US)
    assert "below_roofline" not in {f.rule for f in r.findings}


def test_replays_that_fit_several_captured_graphs_draw_no_roofline_finding(tmp_path):
    """Two graphs captured (batch 8 and 4096) launch the same kernels: the match of the
    replays is not certain, so their rates are shown but no finding rests on them."""
    cap = capture(tmp_path, sizes=(8, N))
    (r,) = analyze([str(replay(tmp_path))], capture=str(cap)).ranks
    assert any("fit more than one graph" in n for n in r.notes)
    # matched to the first graph that fits: the batch-8 GEMM, at a rate far below its
    # roofline if it were true
    mm = next(o for o in r.efficiency.ops if o.op == "aten::mm")
    assert mm.params["M"] == 8 and mm.pct_of_roofline is not None and mm.pct_of_roofline < 0.3
    assert "below_roofline" not in {f.rule for f in r.findings}
