"""FLOPs of convolution and attention against TraceLens' tables; devices, MFU and roofline."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from aiflame.analysis import devices, efficiency, opmodels
from aiflame.analysis.schema import to_builtins
from aiflame.analysis.timeline import time_breakdown
from aiflame.sources.registry import load_trace as read_trace

DATA = Path(__file__).resolve().parents[1] / "data" / "kineto" / "tracelens"
TRACES = {
    "vit": "h100/Falconsai_nsfw_image_detection__1016002",
    "h100": "h100/gaunernst_bert-small-uncased__1016001",
    "mi300": "mi300/gaunernst_bert-small-uncased__1016001",
    "triton": "torch_compile_triton/trace",
}
_cache: dict[str, object] = {}


def report(key: str) -> dict:
    if key not in _cache:
        t = read_trace(str(DATA / f"{TRACES[key]}.json.gz"))
        spec, _ = devices.resolve(t.device_info)
        b = time_breakdown(t.gpu_ts, t.gpu_dur, t.gpu_kind)
        _cache[key] = to_builtins(efficiency.efficiency(t, spec, b.total, b.busy, top=1000))
    return _cache[key]  # type: ignore[return-value]


def table(key: str, name: str) -> list[dict[str, str]]:
    with (DATA / f"{TRACES[key]}_perf_report_csvs" / f"{name}.csv").open(encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_convolution_equals_tracelens_conv_fwd():
    (ref,) = table("vit", "CONV_fwd")
    (row,) = [r for r in report("vit")["ops"] if r["family"] == "conv"]
    assert row["op"] == ref["name"] == "aten::convolution"
    assert row["params"]["input"] == [4, 3, 224, 224]
    assert row["params"]["stride"] == [16, 16]
    # TraceLens ignores the bias of aten::convolution (it looks for 3 inputs, the op has 9);
    # the bias adds |output| FLOPs and Cout elements, 0.07% and 0.04% here.
    assert row["params"]["bias"] is True
    out = 4 * 768 * 14 * 14
    assert row["flops"] - out == int(float(ref["GFLOPS_first"]) * 1e9)
    assert row["bytes"] - 768 * 2 == pytest.approx(float(ref["Data Moved (MB)_first"]) * 2**20)
    assert row["flops"] / 1e9 == pytest.approx(float(ref["GFLOPS_first"]), rel=0.01)
    # the kernel time covers the layout transposes, memsets and bias add under the op
    assert row["kernel_time_us"]["sum"] == pytest.approx(float(ref["Kernel Time (µs)_sum"]))
    assert row["tflops_per_s"] == pytest.approx(float(ref["TFLOPS/s_mean"]), rel=0.01)


@pytest.mark.parametrize("key", ["vit", "h100", "mi300", "triton"])
def test_attention_equals_tracelens_sdpa_fwd(key):
    refs = table(key, "SDPA_fwd")
    rows = {
        (r["params"]["B"], r["params"]["N_q"], r["params"]["H_q"], r["params"]["d_qk"]): r
        for r in report(key)["ops"]
        if r["family"] == "attention"
    }
    assert len(rows) == len(refs) > 0
    for ref in refs:
        k = tuple(int(ref[f"param: {p}"]) for p in ("B", "N_Q", "H_Q", "d_h_qk"))
        row = rows[k]
        assert row["op"] == ref["name"]
        assert row["flops"] == pytest.approx(float(ref["GFLOPS_first"]) * 1e9, rel=1e-9)
        assert row["bytes"] == pytest.approx(float(ref["Data Moved (MB)_first"]) * 2**20)
        assert row["calls"] == int(ref["name_count"])
        assert row["tflops_per_s"] == pytest.approx(float(ref["TFLOPS/s_mean"]), rel=0.01)
        assert row["tb_per_s"] == pytest.approx(float(ref["TB/s_mean"]), rel=0.01)


@pytest.mark.parametrize("key", ["vit", "h100"])
def test_gemm_rows_equal_the_gemm_table(key):
    refs = table(key, "GEMM")
    rows = [r for r in report(key)["ops"] if r["family"] == "gemm"]
    assert len(rows) == len(refs)
    by_mnk = {(r["params"]["M"], r["params"]["N"], r["params"]["K"]): r for r in rows}
    for ref in refs:
        row = by_mnk[tuple(int(ref[f"param: {p}"]) for p in "MNK")]
        assert row["tflops_per_s"] == pytest.approx(float(ref["TFLOPS/s_mean"]), rel=0.01)


def test_causal_attention_counts_the_pairs_under_the_mask():
    assert opmodels.causal_pairs(4, 4) == 4 + 3 + 2 + 1
    assert opmodels.causal_pairs(2, 5) == 1 + 2  # top-left aligned, as PyTorch's is_causal
    assert opmodels.causal_pairs(6, 3) == 1 + 2 + 3 + 3 + 3 + 3
    dims = [[2, 4, 128, 64], [2, 4, 128, 64], [2, 4, 128, 64]]
    types = ["c10::BFloat16"] * 3
    flash = "aten::_scaled_dot_product_flash_attention"
    full = opmodels.op_cost(flash, dims, types, ["", "", "", "0.", "False", "False", ""])
    causal = opmodels.op_cost(flash, dims, types, ["", "", "", "0.", "True", "False", ""])
    assert full is not None and causal is not None
    assert full.flops == 2 * 2 * 4 * 128 * 128 * (64 + 64)
    assert causal.flops == 2 * 2 * 4 * (128 * 129 // 2) * 128
    assert causal.bytes == full.bytes == 4 * (2 * 4 * 128 * 64) * 2


def test_convolution_model_transposed_grouped_and_unmodelled():
    # 1-D transposed convolution, groups 2: out = (10 - 1) * 2 - 0 + 1 * (3 - 1) + 1 + 1 = 22
    dims = [[1, 4, 10], [4, 3, 3], [6], [], [], [], [], [], []]
    concrete = ["", "", "", "[2]", "[0]", "[1]", "True", "[1]", "2"]
    c = opmodels.op_cost("aten::convolution", dims, ["float"] * 3, concrete)
    assert c is not None and dict(c.params)["transposed"] is True
    assert c.flops == 2 * (1 * 4 * 10) * (3 * 3) + 1 * 6 * 22
    assert c.bytes == (40 + 36 + 6 + 6 * 22) * 4
    # without Concrete Inputs (older traces) stride and padding are unknown: no number
    assert opmodels.op_cost("aten::convolution", dims, ["float"] * 3, None) is None
    assert opmodels.op_cost("aten::relu", [[2, 2]], ["float"]) is None


def test_devices_from_device_properties():
    assert devices.identify({"name": "NVIDIA H100 80GB HBM3", "numSms": 132}).name == (
        "NVIDIA H100 SXM"
    )
    assert devices.identify({"name": "NVIDIA H100 PCIe", "numSms": 114}).name == (
        "NVIDIA H100 PCIe"
    )
    a100 = {"name": "NVIDIA A100-PG509-200", "totalGlobalMem": 42297524224}
    assert devices.identify(a100).tb_per_s == 1.555  # the 40 GB part
    assert devices.identify({"name": "AMD Instinct MI300X VF"}).peak("bf16") == 1307.4
    assert devices.identify({"name": "AMD Radeon Graphics", "numSms": 104}) is None
    # A GH200 trace's deviceProperties (Lambda's GH200 480GB): its name holds "h200", but
    # its GPU has 96 GB of HBM3 at 4.0 TB/s, not an H200's 141 GB at 4.8 TB/s.
    gh200 = {"name": "NVIDIA GH200 480GB", "totalGlobalMem": 101468602368, "numSms": 132}
    assert devices.identify(gh200).name == "NVIDIA GH200 96GB"
    assert devices.identify(gh200).tb_per_s == 4.0 and devices.identify(gh200).peak("bf16") == 989.4
    assert devices.identify({**gh200, "totalGlobalMem": 150_000_000_000}).tb_per_s == 4.9
    spec, why = devices.resolve([{"name": "", "totalGlobalMem": 0}])  # vLLM's ROCm traces
    assert spec is None and why.startswith("the trace names no device")
    spec, why = devices.resolve([{"name": "AMD Radeon Graphics"}])
    assert spec is None and "not in the table" in why
    spec, why = devices.resolve([{"name": "AMD Radeon Graphics"}], device="mi250x")
    assert spec is not None and why is None and spec.peak("fp16") == 191.5
    spec, _ = devices.resolve([], peak_tflops=devices.parse_peaks("400"), peak_tb_per_s=2.0)
    assert spec is not None and spec.peak("bf16") == 400 and spec.tb_per_s == 2.0
    spec, _ = devices.resolve(
        [{"name": "NVIDIA H100 80GB HBM3"}], peak_tflops=devices.parse_peaks("bf16=700")
    )
    assert spec.peak("bf16") == 700 and spec.peak("fp32") == 67  # the rest from the table
    with pytest.raises(ValueError):
        devices.parse_peaks("bf16=-1")


def test_mfu_and_roofline_follow_their_definitions():
    e = report("triton")
    peak, bw = 1307.4, 5.3  # MI300X bf16, TB/s
    flops = e["by_precision"]["bf16"]["flops"]
    t = read_trace(str(DATA / f"{TRACES['triton']}.json.gz"))
    b = time_breakdown(t.gpu_ts, t.gpu_dur, t.gpu_kind)
    assert e["mfu"] == pytest.approx(flops / (peak * 1e12) / (b.total / 1e9))
    assert e["mfu_busy"] == pytest.approx(flops / (peak * 1e12) / (b.busy / 1e9))
    for r in e["ops"]:
        intensity = r["flops"] / r["bytes"]
        assert r["attainable_tflops_per_s"] == pytest.approx(min(peak, intensity * bw))
        assert r["pct_of_roofline"] == pytest.approx(
            r["tflops_per_s"] / r["attainable_tflops_per_s"]
        )
        assert r["bound"] == ("compute" if intensity * bw >= peak else "memory")
    # each call's FLOPs go to its longest kernel: the kernel table holds all of them
    assert sum(k["flops"] for k in e["kernels"]) == e["modelled"]["flops"]


def test_no_mfu_without_a_device_but_rates_still_there():
    t = read_trace(str(DATA / f"{TRACES['h100']}.json.gz"))
    b = time_breakdown(t.gpu_ts, t.gpu_dur, t.gpu_kind)
    e = to_builtins(efficiency.efficiency(t, None, b.total, b.busy))
    assert e["mfu"] is None and e["device"] is None
    assert all(r["tflops_per_s"] and r["pct_of_peak"] is None for r in e["ops"])
