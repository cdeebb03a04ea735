"""Peak arithmetic rates of NVIDIA data-center GPUs, per pipe, for the FLOP/s estimate.

The estimate (:func:`estimate_flops`) counts each pipe at its peak rate for the fraction
of time NVML's GPM says it was active: ``Σ activity_pipe × peak_pipe``. It assumes that
tensor work is dense FP16/BF16 matrix math (HMMA; FP8 work runs at twice that rate and
TF32 at half, and is counted as FP16), that FP64 tensor work is DMMA, and that an active
pipe issues at its full rate. So it is an upper bound of the useful rate of the period,
and says which assumption it used (``basis``).

Rates are dense (no 2:4 sparsity), in FLOP/s, from NVIDIA's data sheets and architecture
white papers (H100: "NVIDIA H100 Tensor Core GPU Architecture", table 3; A100: "NVIDIA
A100 Tensor Core GPU Architecture", table 1; H200: the H200 data sheet, same compute as
H100 SXM; B200: the HGX B200 data sheet divided by its 8 GPUs).
"""

from __future__ import annotations

from dataclasses import dataclass

T = 1e12


@dataclass(frozen=True)
class PipePeaks:
    label: str
    tensor_fp16: float  # dense FP16/BF16 tensor (HMMA)
    tensor_fp64: float  # FP64 tensor (DMMA)
    fp16: float  # non-tensor FP16
    fp32: float
    fp64: float


# Matched against the NVML device name, first match wins (more specific names first).
PEAKS: tuple[tuple[str, PipePeaks], ...] = (
    ("H200 NVL", PipePeaks("H200 NVL", 835.5 * T, 60.0 * T, 120.0 * T, 60.0 * T, 30.0 * T)),
    ("H200", PipePeaks("H200 SXM", 989.4 * T, 66.9 * T, 133.8 * T, 66.9 * T, 33.5 * T)),
    ("H100 PCIe", PipePeaks("H100 PCIe", 756.0 * T, 51.2 * T, 102.4 * T, 51.2 * T, 25.6 * T)),
    ("H100 NVL", PipePeaks("H100 NVL", 835.5 * T, 60.0 * T, 120.0 * T, 60.0 * T, 30.0 * T)),
    ("H100", PipePeaks("H100 SXM", 989.4 * T, 66.9 * T, 133.8 * T, 66.9 * T, 33.5 * T)),
    ("H800", PipePeaks("H800 SXM", 989.4 * T, 1.0 * T, 133.8 * T, 66.9 * T, 1.0 * T)),
    ("GH200", PipePeaks("GH200", 989.4 * T, 66.9 * T, 133.8 * T, 66.9 * T, 33.5 * T)),
    # non-tensor FP16 of B200 is not in its data sheet: taken as twice FP32, as on Hopper
    ("B200", PipePeaks("B200", 2250.0 * T, 37.0 * T, 150.0 * T, 75.0 * T, 37.0 * T)),
    ("A100", PipePeaks("A100", 312.0 * T, 19.5 * T, 78.0 * T, 19.5 * T, 9.7 * T)),
)


def peaks_for(device_name: str) -> PipePeaks | None:
    name = device_name.upper()
    for key, peaks in PEAKS:
        if key.upper() in name:
            return peaks
    return None


def estimate_flops(
    peaks: PipePeaks,
    hmma: float | None,
    any_tensor: float | None,
    dmma: float | None,
    fp16: float | None,
    fp32: float | None,
    fp64: float | None,
) -> tuple[float, str]:
    """(FLOP/s, the basis in words) from pipe activities (fractions 0..1)."""
    parts, total = [], 0.0
    tensor = hmma if hmma is not None else any_tensor
    terms = (
        ("tensor_hmma" if hmma is not None else "tensor_active", tensor, peaks.tensor_fp16,
         "dense FP16/BF16 tensor"),
        ("tensor_dmma", dmma, peaks.tensor_fp64, "FP64 tensor"),
        ("fp16_active", fp16, peaks.fp16, "FP16"),
        ("fp32_active", fp32, peaks.fp32, "FP32"),
        ("fp64_active", fp64, peaks.fp64, "FP64"),
    )  # fmt: skip
    for name, activity, peak, what in terms:
        if activity is None:
            continue
        total += activity * peak
        parts.append(f"{name} x {peak / T:g} TFLOP/s {what}")
    basis = " + ".join(parts) + f" ({peaks.label}; estimate: each pipe at its peak while active)"
    return total, basis
