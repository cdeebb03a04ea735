"""GEMM efficiency from recorded shapes: FLOPs, bytes moved and achieved TFLOP/s per shape.

The same model as AMD TraceLens (``GEMM.csv``): for ``C = A @ B (+ bias)`` with A M x K
and B K x N, FLOPs = 2 M N K (+ M N for the bias add) and bytes = (M K + K N + M N
(+ N for the bias)) x the element size of A; batched GEMMs multiply both by the batch.
Achieved TFLOP/s of one call = its FLOPs / the busy time of the kernels it launched.

Only the leaf GEMM operators are modelled (``aten::mm``, ``addmm``, ``bmm``, ``baddbmm``):
``aten::linear`` and ``aten::matmul`` dispatch to those, so counting them too would count
each GEMM twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aiflame.analysis.calls import op_calls
from aiflame.analysis.schema import GemmRow, TimeSum
from aiflame.model.trace import TraceData
from aiflame.transforms.correlate import busy_time

# op name -> (index of A in the inputs, has bias, batched)
GEMM_OPS = {
    "aten::mm": (0, False, False),
    "aten::addmm": (1, True, False),
    "aten::bmm": (0, False, True),
    "aten::baddbmm": (1, True, True),
}
_BYTES_PER_ELEMENT = {
    "double": 8, "long int": 8,
    "float": 4, "int": 4, "scalar": 4,
    "c10::half": 2, "c10::bfloat16": 2,
    "c10::float8_e4m3fnuz": 1, "c10::float8_e4m3fn": 1, "c10::float8_e5m2": 1,
    "c10::float8_e8m0fnu": 1, "unsigned char": 1, "signed char": 1,
}  # fmt: skip


@dataclass(frozen=True)
class Shape:
    op: str
    b: int
    m: int
    n: int
    k: int
    dtype: str
    bias: bool

    @property
    def flops(self) -> int:
        return self.b * (2 * self.m * self.n * self.k + (self.m * self.n if self.bias else 0))

    @property
    def bytes(self) -> int | None:
        bpe = _BYTES_PER_ELEMENT.get(self.dtype.lower())
        if bpe is None:
            return None
        m, n, k = self.m, self.n, self.k
        return self.b * (m * k + k * n + m * n + (n if self.bias else 0)) * bpe


def gemm_shape(op: str, dims: Any, types: Any) -> Shape | None:
    """The GEMM shape of one operator call from its ``Input Dims``/``Input type``."""
    spec = GEMM_OPS.get(op)
    if spec is None or not isinstance(dims, list) or not isinstance(types, list):
        return None
    a_at, bias, batched = spec
    try:
        a, b = dims[a_at], dims[a_at + 1]
        dtype = str(types[a_at])
        if batched:
            (bb, m, k), (_, _, n) = a, b
        else:
            (m, k), (_, n) = a, b
            bb = 1
        shape = Shape(op, int(bb), int(m), int(n), int(k), dtype, bias)
    except (IndexError, TypeError, ValueError, OverflowError):
        return None  # shapes not recorded (record_shapes=False) or an unexpected layout
    if not all(0 <= d < _MOST_DIM for d in (shape.b, shape.m, shape.n, shape.k)):
        return None  # a damaged trace's dims (2**64, 1e300): no real GEMM has them
    return shape


_MOST_DIM = 2**31  # a dimension beyond this: FLOPs no float holds exactly, not a real GEMM


@dataclass
class _Calls:
    shape: Shape
    calls: int = 0
    kernel_us: list[float] = field(default_factory=list)  # busy kernel time per call

    def record(self) -> GemmRow:
        s = self.shape
        times = np.asarray(self.kernel_us)
        rates = [s.flops / (u * 1e6) for u in self.kernel_us if u > 0]
        moved = s.bytes
        return GemmRow(
            op=s.op, B=s.b, M=s.m, N=s.n, K=s.k, dtype=s.dtype, bias=s.bias, calls=self.calls,
            flops=s.flops, bytes=moved, flops_per_byte=s.flops / moved if moved else None,
            kernel_time_us=TimeSum(
                sum=float(times.sum()), mean=float(times.mean()) if times.size else 0.0
            ),
            # mean over calls of each call's rate, as TraceLens' TFLOPS/s_mean
            tflops_per_s=float(np.mean(rates)) if rates else None,
            tb_per_s=(
                float(np.mean([moved / (u * 1e6) for u in self.kernel_us if u > 0]))
                if moved and rates else None
            ),
        )  # fmt: skip


def gemm_table(t: TraceData) -> list[GemmRow]:
    """One row per (op, shape, dtype), largest total kernel time first (a captured op
    replayed N times counts N calls: :func:`calls.op_calls`)."""
    launched = t.gpu_op >= 0
    if not t.op_shapes or not np.any(launched):
        return []
    idx = np.nonzero(launched)[0]
    call = op_calls(t, t.gpu_op)[idx]
    order = np.argsort(call, kind="stable")
    idx, call = idx[order], call[order]
    ops = t.gpu_op[idx]
    starts = np.flatnonzero(np.r_[True, call[1:] != call[:-1]])
    rows: dict[Shape, _Calls] = {}
    for lo, hi in zip(starts.tolist(), [*starts[1:].tolist(), ops.size], strict=True):
        op = int(ops[lo])
        name = t.names[int(t.cpu_name[op])]
        if name not in GEMM_OPS or op not in t.op_shapes:
            continue
        shape = gemm_shape(name, *t.op_shapes[op])
        if shape is None:
            continue
        mine = idx[lo:hi]
        row = rows.setdefault(shape, _Calls(shape))
        row.calls += 1
        ns = t.gpu_dur[mine[0]] if mine.size == 1 else busy_time(t.gpu_ts[mine], t.gpu_dur[mine])
        row.kernel_us.append(int(ns) / 1e3)
    return [r.record() for r in sorted(rows.values(), key=lambda r: -sum(r.kernel_us))]
