"""Communication recognised by what it does: expert-parallel dispatch/combine kernels by
namespace and function name, kernels on a communication stream, the user's patterns; and
no computation kernel of the recorded traces taken for communication."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from aiflame.analysis import analyze
from aiflame.analysis.report import Options
from aiflame.cli.main import main
from aiflame.model.trace import is_communication
from kineto_craft import H800, Trace

DATA = Path(__file__).resolve().parents[1] / "data" / "kineto"

# Kernel names of expert-parallel and collective libraries, as the profiler writes them
# (DeepEP's csrc/kernels, DeepSeek's profile-data traces, MoRI, NCCL, NVSHMEM).
COMMUNICATION = [
    "void dpsk::ep::internode::notify_dispatch<false, 8>(int const*, long*, int, int const*)",
    "void dpsk::ep::internode::dispatch<false, 8, true, 8>(int4*, float*, long*, float*)",
    "void dpsk::ep::internode::cached_notify<false>(int, int, int, int, int*, int, int)",
    "void dpsk::ep::internode::combine<false, 8, __nv_bfloat16, 8, 2, 16, 24>(int4*, float*)",
    "void dpsk::ep::internode::dispatch_ll<true>(void*, float*, int*)",
    "void dpsk::ep::cuda::get_dispatch_layout<256, 32, 8>(long const*, int*, int*, int*)",
    "void deep_ep::intranode::notify_dispatch<8>(int const*, int*, int, int const*, int*)",
    "void deep_ep::intranode::cached_notify_combine<8>(void**, int*, int, int, int, int**)",
    "void deep_ep::internode_ll::combine<false>(void*, void*, int, void*, long const*)",
    "void deep_ep::intranode::barrier<8>(int**, int)",
    "void mori::moe::EpDispatchInterNodeKernel<__hip_bfloat16>(mori::moe::EpDispatchCombineArgs)",
    "moeA2ADispatchKernel",
    "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    "nvshmemi_transfer_rma_p2p_get_kernel",
    "void ibgda_poll_cq(nvshmemi_ibgda_device_cq_t*)",
    "all_gather_into_tensor_kernel",
]
COMPUTATION = [
    "void cutlass::device_kernel<dpsk::grouped_gemm::cuda::fp8_ptp128c::GemmKernel>(int)",
    "void cuda::per_token_cast_to_fp8_with_channels<__nv_bfloat16, 128, false>(float*)",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>(float)",
    "void sgl_hip::ep_scatter_kernel<__hip_bfloat16>(int)",
    "void at::native::(anonymous namespace)::indexSelectLargeIndex<float, long>(int)",
    "void step::update_kernel(float*)",
]


@pytest.mark.parametrize("name", COMMUNICATION)
def test_communication_kernels_by_name(name):
    assert is_communication(name)


@pytest.mark.parametrize("name", COMPUTATION)
def test_computation_kernels_by_name(name):
    assert not is_communication(name)


@pytest.mark.parametrize(
    "name",
    [
        "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
        "tracelens/mi300/google_owlv2-large-patch14-ensemble__1016001.trimmed.json.gz",
        "tracelens/b200/eager_trace.json.gz",
        "hta/trace_diff/control/control.json.gz",
        "tracelens/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz",
    ],
)
def test_no_kernel_of_recorded_traces_is_taken_for_communication(name):
    with gzip.open(DATA / name, "rt", encoding="utf-8") as f:
        kernels = {e["name"] for e in json.load(f)["traceEvents"] if e.get("cat") == "kernel"}
    known = ("nccl", "rccl", "cross_device_reduce", "allreduce", "all_reduce")
    assert kernels
    for k in kernels:
        assert is_communication(k) == any(m in k.lower() for m in known), k


EP = "void dpsk::ep::internode::"
GEMM = "void cutlass::device_kernel<dpsk::grouped_gemm::cuda::fp8_ptp128c::GemmKernel>(int)"
CAST = "void cuda::per_token_cast_to_fp8_with_channels<__nv_bfloat16, 128, false>(float*)"
UNKNOWN = "void acme::xfer_tokens<8>(int4*, int)"  # a library no rule knows, on the EP stream


def expert_parallel_step(tmp_path: Path) -> tuple[Path, list[tuple[str, float, float, int]]]:
    """A DualPipe-like step: experts' GEMMs and attention on stream 7, DeepEP's dispatch and
    combine on stream 27 (the times of DeepSeek's training profile, scaled down)."""
    t = Trace(H800).rank(0, 64)
    t.annotation("ProfilerStep#3", 0, 10_000)
    kernels = [  # (name, start, duration, stream)
        (EP[:-11] + "cuda::get_dispatch_layout<256, 32, 8>(long const*, int*)", 50, 40, 27),
        (EP + "notify_dispatch<false, 8>(int const*, long*)", 200, 300, 27),
        (GEMM, 100, 2900, 7),
        (EP + "dispatch<false, 8, true, 8>(int4*, float*, long*)", 500, 2000, 27),
        (EP + "cached_notify<false>(int, int, int)", 2600, 200, 27),
        ("void flash::compute_attn_ws<Flash_fwd_kernel_traits<192>>(int)", 3000, 2000, 7),
        (EP + "combine<false, 8, __nv_bfloat16, 8, 2, 16, 24>(int4*, float*)", 4800, 1700, 27),
        (CAST, 6600, 100, 27),
        (UNKNOWN, 6800, 100, 27),
        (GEMM, 7000, 2000, 7),
    ]
    for k, (name, at, dur, stream) in enumerate(kernels):
        t.py("train.py(88): forward_backward_chunk", 10 + 9 * k, 8)
        t.launch(name, 11 + 9 * k, 5, at, dur, stream=stream, call="cudaLaunchKernelExC")
    return t.write(tmp_path / "ep_step.json.gz"), kernels


def union(spans: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        total += max(0.0, b - max(a, end))
        end = max(end, b)
    return total


def test_expert_parallel_all_to_all_is_communication(tmp_path):
    path, kernels = expert_parallel_step(tmp_path)
    (r,) = analyze([str(path)]).ranks
    comm = [(a, a + d) for n, a, d, _ in kernels if "::ep::" in n or n == UNKNOWN]
    compute = [(a, a + d) for n, a, d, _ in kernels if (a, a + d) not in comm]
    tb = r.time_breakdown
    assert tb.communication == pytest.approx(union(comm))
    # the cast on the communication stream computes: it stays computation
    assert tb.computation == pytest.approx(union(compute))
    exposed = union(comm + compute) - union(compute)
    assert tb.exposed_communication == pytest.approx(exposed) and exposed > 0
    cats = {c.category: c.time_us for c in r.op_categories}
    assert cats["communication"] == pytest.approx(sum(d for n, a, d, _ in kernels
                                                      if (a, a + d) in comm))  # fmt: skip
    f = next(f for f in r.findings if f.rule == "exposed_communication")
    assert f.items[0].name == "combine"  # 1.5 of its 1.7 ms run beside no computation
    assert {"combine", "dispatch", "cached_notify"} <= {i.name for i in f.items}
    assert "micro-batches" in f.fix and "bucket" not in f.fix
    assert f.flame.search and "dpsk::ep::internode::combine" in f.flame.search.replace("\\", "")


def test_user_patterns_name_communication_no_rule_knows(tmp_path):
    t = Trace()
    t.launch("void acme::ring_exchange<float>(float*, int)", 0, 5, 10, 100)
    t.launch("void at::native::vectorized_elementwise_kernel<4>(int)", 10, 5, 120, 100)
    path = t.write(tmp_path / "custom.json.gz")
    (plain,) = analyze([str(path)]).ranks
    assert plain.time_breakdown.communication == 0
    (r,) = analyze([str(path)], Options(comm_kernels=["ring_exchange"])).ranks
    assert r.time_breakdown.communication == pytest.approx(100)
    assert r.time_breakdown.exposed_communication == pytest.approx(100)


def test_comm_kernels_flag(tmp_path, capsys):
    t = Trace()
    t.launch("void acme::ring_exchange<float>(float*, int)", 0, 5, 10, 100)
    path = t.write(tmp_path / "custom.json.gz")
    out = tmp_path / "r.json"
    assert main(["analyze", str(path), "--comm-kernels", "RING_EXCHANGE", "--json", str(out)]) == 0
    (rank,) = json.loads(out.read_text())["ranks"]
    assert rank["time_breakdown"]["communication"] == pytest.approx(100)
    capsys.readouterr()
    assert main(["analyze", str(path), "--comm-kernels", "ring(exchange"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--comm-kernels 'ring(exchange'" in err[0]
