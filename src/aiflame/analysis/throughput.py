"""Device time per sample and per input byte, when the batch size is known (``--batch-size``).

Samples = batch size x profiler steps (``ProfilerStep#N`` annotations; one step when the
trace has none). Input bytes are the bytes copied host to device (the batches, when the
data is loaded on the host).
"""

from __future__ import annotations

import numpy as np

from aiflame.analysis.calls import name_mask
from aiflame.analysis.memcpy import copies, parse
from aiflame.analysis.schema import PerSample
from aiflame.model.trace import TraceData


def steps(t: TraceData) -> int:
    """Number of ProfilerStep annotations (at least 1)."""
    if t.cpu_ts.size == 0:
        return 1
    is_step = name_mask(t, lambda n: n.startswith("ProfilerStep#"))[t.cpu_name]
    return max(1, int(np.count_nonzero(is_step)))


def htod_bytes(t: TraceData) -> int | None:
    """Bytes copied host to device, None when a copy's size is not recorded."""
    idx = copies(t)
    htod = np.array([parse(t.names[int(n)])[0] == "HtoD" for n in t.gpu_name[idx]], dtype=bool)
    if t.gpu_bytes is None:
        return None if np.any(htod) else 0
    b = t.gpu_bytes[idx[htod]]
    return None if np.any(b < 0) else int(b.sum())


def per_sample(
    t: TraceData, batch_size: int, total_ns: int, busy_ns: int
) -> tuple[PerSample, str | None]:
    """The per-sample numbers, and why the per-byte ones are missing (or None)."""
    n = steps(t)
    samples = batch_size * n
    out = PerSample(
        batch_size=batch_size, steps=n, samples=samples,
        gpu_time_per_sample_us=total_ns / samples / 1e3,
        busy_time_per_sample_us=busy_ns / samples / 1e3,
        samples_per_s=samples / (total_ns / 1e9) if total_ns else None,
        input_bytes=None, input_bytes_per_sample=None, busy_ns_per_input_byte=None,
    )  # fmt: skip
    moved = htod_bytes(t)
    if not moved:
        why = (
            "no host-to-device copies in the trace: the input size is unknown"
            if moved == 0
            else "host-to-device copies without recorded sizes"
        )
        return out, why
    out.input_bytes = moved
    out.input_bytes_per_sample = moved / samples
    out.busy_ns_per_input_byte = busy_ns / moved
    return out, None
