"""Readable names of profiler Python frames and GPU kernels."""

from __future__ import annotations

import pytest

from aiflame.sources.kineto.names import PyFrame, python_frame, short_kernel_name


@pytest.mark.parametrize(
    ("raw", "short"),
    [
        ("torch/profiler/profiler.py(821): step", "step (torch/profiler/profiler.py:821)"),
        (
            "/opt/conda/lib/python3.10/site-packages/torch/nn/modules/module.py(1751): _call_impl",
            "_call_impl (torch/nn/modules/module.py:1751)",
        ),
        ("<string>(1): <module>", "<module> (<string>:1)"),
        ("<frozen os>(808): getenv", "getenv (<frozen os>:808)"),
        ("<built-in method size of Tensor object at 0x74956e48e580>", "Tensor > size"),
        ("<built-in method acquire of _thread.RLock object at 0x7faf84ce84c0>", "RLock > acquire"),
        ("<built-in method layer_norm of type object at 0x7499b741df60>", "layer_norm"),
        (
            "<built-in method _add_metadata_json of PyCapsule object at 0x7498db9dbbd0>",
            "_add_metadata_json",
        ),
        (
            "<built-in method rank of pybind11_builtins.pybind11_detail_function_record_v1"
            " object at 0x7f>",
            "rank",
        ),
        ("<built-in function hasattr>", "hasattr"),
        ("nn.Module: BertLayer_0", "nn.Module: BertLayer_0"),
    ],
)
def test_short_python_names(raw: str, short: str) -> None:
    assert python_frame(raw, "short").name == short
    assert python_frame(raw, "raw").name == raw


def test_python_frames_keep_file_and_line() -> None:
    assert python_frame("a/b.py(12): f") == PyFrame("f (a/b.py:12)", "a/b.py", 12, "f")
    assert python_frame("a/b.py(12): f", "raw") == PyFrame("a/b.py(12): f", "a/b.py", 12, "f")


@pytest.mark.parametrize(
    ("full", "short"),
    [
        (
            "void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, "
            "unsigned int, 2, 2, -2, true>"
            "(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, long)",
            "at::native::(anonymous namespace)::indexSelectLargeIndex<…>",
        ),
        (
            "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn"
            "_align8>(cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8::Params)",
            "cutlass::Kernel2<…>",
        ),
        (
            "void fft2d_r2c_32x32<float, false, 5u, true>(float2*, float const*, int)",
            "fft2d_r2c_32x32<…>",
        ),
        ("__global__ void foo<int>(int)", "foo<…>"),
        ("ampere_sgemm_128x64_tn", "ampere_sgemm_128x64_tn"),
        ("triton_poi_fused_add_cos_sin_0", "triton_poi_fused_add_cos_sin_0"),
        ("Memcpy DtoH (Device -> Pinned)", "Memcpy DtoH (Device -> Pinned)"),
        (
            "Cijk_Alik_Bljk_BBS_BH_MT64x64x64_MI16x16x1",
            "Cijk_Alik_Bljk_BBS_BH_MT64x64x64_MI16x16x1",
        ),
    ],
)
def test_short_kernel_names(full: str, short: str) -> None:
    assert short_kernel_name(full) == short
