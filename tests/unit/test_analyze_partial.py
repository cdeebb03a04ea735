"""Bad or partial input: what can be computed is reported, what cannot is said plainly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aiflame.analysis.report import Options, analyze
from aiflame.analysis.schema import to_builtins
from aiflame.cli.main import main
from aiflame.sources.registry import load_trace as read_trace

DATA = Path(__file__).resolve().parents[1] / "data" / "kineto"
CPU_ONLY = DATA / "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
GPU_ONLY = DATA / "tracelens/mi210/gpu_only_trace.json.gz"
NO_PROPS = DATA / "hta/trace_filter/sampled_rank-0.json.gz"  # no deviceProperties
UNKNOWN = DATA / "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"  # 'AMD Radeon Graphics'
NO_SHAPES = DATA / "param/resnet_kineto.iteration.json.gz"  # record_shapes=False
BERT = DATA / "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"
RESNET_V100 = DATA / "kineto_tb_plugin/resnet50_num_workers_4_worker0.step6.pt.trace.json.gz"


def rank(path: Path, **opts: object) -> dict:
    (r,) = analyze([read_trace(str(path))], options=Options(**opts)).ranks  # type: ignore[arg-type]
    out = to_builtins(r)
    json.dumps(out)  # everything is JSON
    return out


def test_cpu_only_trace_says_there_is_no_gpu_activity():
    r = rank(CPU_ONLY)
    for key in ("time_breakdown", "idle", "kernels", "launch", "efficiency", "mfu"):
        assert "no GPU activity" in r["unavailable"][key]
    assert r["idle"] is None and r["efficiency"] is None and r["findings"] == []
    assert r["top_ops"] == []


def test_gpu_only_trace_has_breakdown_and_idle_but_no_ops_or_flops():
    r = rank(GPU_ONLY)
    assert r["time_breakdown"]["busy"] > 0 and r["idle"]["total_us"] > 0
    assert r["hta_temporal_breakdown"]["idle_us"] == pytest.approx(r["idle"]["total_us"])
    assert "no CPU operators" in r["unavailable"]["ops"]
    assert "no shapes" in r["unavailable"]["efficiency"] and r["efficiency"] is None
    assert "mfu" not in r["unavailable"]  # efficiency already says why


def test_missing_device_properties_give_rates_but_no_mfu():
    r = rank(NO_PROPS)
    assert "no deviceProperties" in r["unavailable"]["mfu"]
    e = r["efficiency"]
    assert e["mfu"] is None and e["device"] is None and e["modelled"]["calls"] > 0
    assert all(row["tflops_per_s"] is not None for row in e["ops"])
    # with the device named on the command line, MFU is there
    named = rank(NO_PROPS, device="a100")
    assert "mfu" not in named["unavailable"] and named["efficiency"]["mfu"] > 0


def test_unknown_device_is_named_and_peaks_can_be_given():
    r = rank(UNKNOWN)
    assert "'AMD Radeon Graphics' is not in the table" in r["unavailable"]["mfu"]
    given = rank(UNKNOWN, peak_tflops={"*": 191.5}, peak_tb_per_s=1.6)
    e = given["efficiency"]
    assert e["device"]["source"] == "command line" and e["device"]["tb_per_s"] == 1.6
    assert e["mfu"] is not None and "mfu" not in given["unavailable"]


def test_trace_without_shapes_says_so():
    r = rank(NO_SHAPES)
    assert "record_shapes=False" in r["unavailable"]["efficiency"]
    assert r["gemm"] == [] and r["efficiency"] is None


def test_per_sample_needs_the_batch_size_and_input_copies():
    assert "--batch-size" in rank(BERT)["unavailable"]["per_sample"]
    r = rank(BERT, batch_size=4)  # inference on data already on the GPU
    assert r["per_sample"]["samples"] == 4
    assert r["per_sample"]["gpu_time_per_sample_us"] == pytest.approx(
        r["time_breakdown"]["total"] / 4
    )
    assert "no host-to-device copies" in r["unavailable"]["input_bytes"]
    r = rank(RESNET_V100, batch_size=32)  # one training step, its batch copied in
    ps = r["per_sample"]
    assert ps["steps"] == 1 and ps["input_bytes"] > 0
    assert ps["busy_ns_per_input_byte"] == pytest.approx(
        r["time_breakdown"]["busy"] * 1e3 / ps["input_bytes"]
    )


def test_cli_efficiency_flags(tmp_path, capsys):
    out = tmp_path / "r.json"
    args = ["analyze", str(UNKNOWN), "--json", str(out), "--peak-tflops", "fp32=47.9"]
    assert main([*args, "--peak-bandwidth", "1.6", "--batch-size", "8"]) == 0
    r = json.loads(out.read_text())["ranks"][0]
    assert r["efficiency"]["device"]["tflops"] == {"fp32": 47.9}
    assert r["per_sample"]["batch_size"] == 8
    capsys.readouterr()
    assert main(["analyze", str(UNKNOWN), "--device", "no-such-gpu"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown --device" in err
    with pytest.raises(SystemExit):
        main(["analyze", str(UNKNOWN), "--peak-tflops", "fast"])
