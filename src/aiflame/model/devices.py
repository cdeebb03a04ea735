"""What a trace's ``deviceProperties`` entry says about a GPU when its name is empty (ROCm
builds of PyTorch write ``""``): the model its properties identify, or a description of
them. Shared by the importers (titles, ``aiflame info``) and the analysis (peaks)."""

from __future__ import annotations

from typing import Any

# (warp size, compute major, minor, SM/CU count) -> the model's alias (analysis/devices.py
# has its peaks); the memory size tells apart the variants that share a chip.
_BY_PROPERTIES = {
    (64, 9, 4, 304): "mi300x",  # gfx942
    (64, 9, 0, 110): "mi250x",  # gfx90a, one GCD
    (64, 9, 0, 104): "mi210",
    (32, 10, 0, 148): "b200",
    (32, 9, 0, 132): "h100",  # an H200 has the same SMs and 141 GB
    (32, 9, 0, 114): "h100 pcie",
    (32, 8, 0, 108): "a100",
    (32, 8, 9, 142): "l40s",
    (32, 8, 9, 58): "l4",
    (32, 8, 6, 72): "a10",
    (32, 7, 0, 80): "v100",
    (32, 7, 5, 40): "t4",
    (32, 7, 5, 68): "2080 ti",
}


def alias_by_properties(props: dict[str, Any]) -> str | None:
    """The alias of the model whose chip has these properties (warp size, compute
    capability or gfx version, SM/CU count, memory), or None when they match none."""
    key = tuple(props.get(k) for k in ("warpSize", "computeMajor", "computeMinor", "numSms"))
    alias = _BY_PROPERTIES.get(key)  # type: ignore[arg-type]
    if alias is None:
        return None
    mem = props.get("totalGlobalMem")
    gb = mem / 1e9 if isinstance(mem, int | float) else None
    if gb is not None:
        if alias == "h100" and gb > 100:
            return "h200"
        if alias == "a100" and gb < 60:
            return "a100 40gb"
        if alias == "mi300x" and gb > 220:
            return None  # an MI325X (256 GB): not in the table
    return alias


def model_by_properties(props: dict[str, Any]) -> str | None:
    """``MI300X`` for an unnamed device with an MI300X's properties, for titles."""
    alias = alias_by_properties(props)
    return alias.upper().replace(" TI", " Ti") if alias else None


def describe(props: dict[str, Any]) -> str:
    """``304 CUs, 206 GB, gfx94x``: what the trace says about an unnamed device."""
    parts = []
    amd = props.get("warpSize") == 64
    if isinstance(props.get("numSms"), int):
        parts.append(f"{props['numSms']} {'CUs' if amd else 'SMs'}")
    mem = props.get("totalGlobalMem")
    if isinstance(mem, int | float):
        parts.append(f"{mem / 1e9:.0f} GB")
    major, minor = props.get("computeMajor"), props.get("computeMinor")
    if isinstance(major, int) and isinstance(minor, int):
        parts.append(f"gfx{major}{minor}x" if amd else f"compute capability {major}.{minor}")
    return ", ".join(parts) or "no name"
