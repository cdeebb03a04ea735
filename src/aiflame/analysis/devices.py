"""Peak compute (TFLOP/s by precision) and memory bandwidth (TB/s) of known GPUs.

Dense (no structured sparsity) peaks from the vendors' datasheets, at boost clocks, per
device as PyTorch sees it (one GCD of an MI250X). ``fp32`` is the non-tensor-core rate
(``matrix_fp32`` on AMD where it differs), ``tf32`` the tensor-core rate used when TF32 is
enabled. Achieved fractions of these peaks are what MFU and % of roofline mean here; a
device not in the table gives no MFU unless ``--device`` or ``--peak-tflops``/
``--peak-bandwidth`` say what to use.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from aiflame.analysis.schema import Device
from aiflame.model.devices import alias_by_properties, describe


@dataclass(frozen=True)
class DeviceSpec:
    name: str
    tflops: dict[str, float]  # precision -> dense peak TFLOP/s
    tb_per_s: float | None
    source: str = "table"
    memory_gb: float | None = None  # to tell variants apart (A100 40/80 GB)
    aliases: tuple[str, ...] = field(default=())

    def peak(self, precision: str | None) -> float | None:
        if precision is None:
            return None
        return self.tflops.get(precision) or self.tflops.get("*")

    def record(self) -> Device:
        return Device(name=self.name, tflops=self.tflops, tb_per_s=self.tb_per_s,
                      source=self.source)  # fmt: skip


def _spec(
    name: str, tb: float | None, mem: float | None, aliases: tuple[str, ...], **tf: float
) -> DeviceSpec:
    return DeviceSpec(name, dict(tf), tb, "table", mem, aliases)


KNOWN = [
    _spec("NVIDIA B200", 8.0, 180, ("b200",), fp64=37, fp32=75, tf32=1125, bf16=2250,
          fp16=2250, fp8=4500, int8=4500),
    _spec("NVIDIA H200", 4.8, 141, ("h200", "h200 sxm"), fp64=34, fp32=67, tf32=494.7,
          bf16=989.4, fp16=989.4, fp8=1978.9, int8=1978.9),
    # Grace Hopper: an H100's compute with 96 GB of HBM3 (4.0 TB/s) or 144 GB of HBM3e
    _spec("NVIDIA GH200 96GB", 4.0, 96, ("gh200", "gh200 96gb"), fp64=34, fp32=67,
          tf32=494.7, bf16=989.4, fp16=989.4, fp8=1978.9, int8=1978.9),
    _spec("NVIDIA GH200 144GB", 4.9, 144, ("gh200 144gb",), fp64=34, fp32=67, tf32=494.7,
          bf16=989.4, fp16=989.4, fp8=1978.9, int8=1978.9),
    _spec("NVIDIA H100 SXM", 3.35, 80, ("h100", "h100 sxm", "h100 80gb hbm3"), fp64=34,
          fp32=67, tf32=494.7, bf16=989.4, fp16=989.4, fp8=1978.9, int8=1978.9),
    _spec("NVIDIA H100 PCIe", 2.0, 80, ("h100 pcie",), fp64=26, fp32=51, tf32=378,
          bf16=756.5, fp16=756.5, fp8=1513, int8=1513),
    _spec("NVIDIA H100 NVL", 3.9, 94, ("h100 nvl",), fp64=30, fp32=60, tf32=417.5,
          bf16=835.5, fp16=835.5, fp8=1670.5, int8=1670.5),
    _spec("NVIDIA A100 80GB", 2.039, 80, ("a100", "a100 80gb", "a100 sxm"), fp64=9.7,
          fp32=19.5, tf32=156, bf16=312, fp16=312, int8=624),
    _spec("NVIDIA A100 40GB", 1.555, 40, ("a100 40gb",), fp64=9.7, fp32=19.5, tf32=156,
          bf16=312, fp16=312, int8=624),
    _spec("NVIDIA L40S", 0.864, 48, ("l40s",), fp32=91.6, tf32=183, bf16=362, fp16=362,
          fp8=733, int8=733),
    _spec("NVIDIA L4", 0.3, 24, ("l4",), fp32=30.3, tf32=60, bf16=121, fp16=121, fp8=242.5,
          int8=242.5),
    _spec("NVIDIA A10", 0.6, 24, ("a10",), fp32=31.2, tf32=62.5, bf16=125, fp16=125, int8=250),
    _spec("NVIDIA V100", 0.9, None, ("v100", "v100 sxm2"), fp64=7.8, fp32=15.7, fp16=125),
    _spec("NVIDIA T4", 0.32, 16, ("t4",), fp32=8.1, fp16=65, int8=130),
    _spec("NVIDIA GeForce RTX 2080 Ti", 0.616, 11, ("rtx 2080 ti", "2080 ti"), fp32=13.4,
          fp16=53.8),
    _spec("AMD Instinct MI300X", 5.3, 192, ("mi300x",), fp64=81.7, fp32=163.4, tf32=653.7,
          bf16=1307.4, fp16=1307.4, fp8=2614.9, int8=2614.9),
    _spec("AMD Instinct MI250X (one GCD)", 1.6, 64, ("mi250x",), fp64=23.9, fp32=47.9,
          bf16=191.5, fp16=191.5, int8=191.5),
    _spec("AMD Instinct MI210", 1.6, 64, ("mi210",), fp64=22.6, fp32=45.3, bf16=181,
          fp16=181, int8=181),
]  # fmt: skip
_BY_ALIAS = {a: s for s in KNOWN for a in (s.name.lower(), *s.aliases)}


def by_name(name: str) -> DeviceSpec | None:
    """A table entry by its name or alias (``--device``), any case."""
    return _BY_ALIAS.get(name.strip().lower())


def by_properties(props: dict[str, Any]) -> DeviceSpec | None:
    """The table entry whose chip has these properties (warp size, compute capability or
    gfx version, SM/CU count, memory), or None when they match none."""
    alias = alias_by_properties(props)
    return _BY_ALIAS.get(alias) if alias else None


def identify(props: dict[str, Any]) -> DeviceSpec | None:
    """The table entry for a trace's ``deviceProperties`` entry, or None when unsure."""
    name = str(props.get("name", "")).lower()
    if not name.strip():
        return by_properties(props)
    mem = props.get("totalGlobalMem")
    gb = mem / 1e9 if isinstance(mem, (int, float)) else None
    sms = props.get("numSms")

    def pick(key: str) -> DeviceSpec | None:
        return _BY_ALIAS.get(key)

    if "gh200" in name:  # before "h200": GH200 is no H200 (less and slower memory)
        return pick("gh200 144gb") if gb is not None and gb > 120 else pick("gh200")
    if "h100" in name:
        if "pcie" in name or sms == 114:
            return pick("h100 pcie")
        if "nvl" in name:
            return pick("h100 nvl")
        return pick("h100")
    if "h200" in name:
        return pick("h200")
    if "b200" in name:
        return pick("b200")
    if "a100" in name:
        if gb is not None:
            return pick("a100 40gb") if gb < 60 else pick("a100")
        return pick("a100 40gb") if "40gb" in name else pick("a100") if "80gb" in name else None
    if "v100" in name:
        return pick("v100")
    for key in ("l40s", "mi300x", "mi250x", "mi210", "2080 ti", "t4"):
        if key in name:
            return pick(key)
    if re.search(r"\bl4\b", name):
        return pick("l4")
    if re.search(r"\ba10\b", name):
        return pick("a10")
    return None


def device_name(props: dict[str, Any]) -> str:
    """The device's name, or for an unnamed one what its properties identify."""
    name = str(props.get("name") or "").strip()
    if name:
        return name
    spec = by_properties(props)
    return f"{spec.name} (by its properties)" if spec else f"unnamed GPU ({describe(props)})"


def parse_peaks(text: str) -> dict[str, float]:
    """``--peak-tflops``: ``400`` (every precision) or ``bf16=989,fp32=67``."""
    out: dict[str, float] = {}
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        key, _, val = part.rpartition("=")
        out[key.strip().lower() or "*"] = float(val)
    if not out or any(v <= 0 for v in out.values()):
        raise ValueError(text)
    return out


def resolve(
    props: list[dict[str, Any]],
    device: str | None = None,
    peak_tflops: dict[str, float] | None = None,
    peak_tb_per_s: float | None = None,
) -> tuple[DeviceSpec | None, str | None]:
    """The spec to measure against and, when there is none, why (for ``unavailable``)."""
    base = None
    why = None
    if device:
        base = by_name(device)
        if base is None:
            why = f"--device '{device}' is not in the table of known GPUs"
    elif props:
        base = identify(props[0])
        if base is None:
            named = props[0].get("name")
            what = (
                f"device '{named}' is not"
                if named
                else f"the trace names no device, and its properties ({describe(props[0])}) are not"
            )
            why = (
                f"{what} in the table of known GPUs; "
                "give --device or --peak-tflops/--peak-bandwidth"
            )
        elif not str(props[0].get("name") or "").strip():
            base = DeviceSpec(
                base.name, base.tflops, base.tb_per_s,
                f"table, identified by its properties ({describe(props[0])})",
                base.memory_gb, base.aliases,
            )  # fmt: skip
    else:
        why = "the trace has no deviceProperties; give --device or --peak-tflops"
    if peak_tflops is None and peak_tb_per_s is None:
        return base, why
    tflops = dict(base.tflops) if base else {}
    if peak_tflops:
        tflops = {**({} if "*" in peak_tflops else tflops), **peak_tflops}
    name = base.name if base else (props[0].get("name", "?") if props else "?")
    source = "table + command line" if base else "command line"
    bw = peak_tb_per_s if peak_tb_per_s is not None else (base.tb_per_s if base else None)
    return DeviceSpec(str(name), tflops, bw, source), None
