"""FLOPs and bytes of one operator call from its recorded shapes, dtypes and scalar inputs.

Families (the operators that dominate the FLOPs of most models):

- ``gemm``: :mod:`gemm` (``aten::mm``/``addmm``/``bmm``/``baddbmm``).
- ``conv``: ``aten::convolution``/``_convolution``/``cudnn_convolution``/
  ``miopen_convolution``/``mkldnn_convolution``. With input N x C x spatial and weight
  Cout x C/groups x kernel: ``flops = 2 * |output| * |weight[1:]|`` (``2 * |input| *
  |weight[1:]|`` for a transposed convolution) ``+ |output|`` with a bias;
  ``bytes = (|input| + |weight| + Cout if bias + |output|) * element size``. Output sizes
  follow from stride, padding and dilation in the ``Concrete Inputs`` (traces recorded
  before PyTorch wrote them cannot be modelled).
- ``attention``: ``aten::_scaled_dot_product_{flash,efficient,cudnn}_attention`` (q, k, v
  laid out B x H x N x d) and ``aten::_flash_attention_forward``/
  ``aten::_efficient_attention_forward`` (B x N x H x d): ``flops = 2 * B * Hq * P *
  (d_qk + d_v)`` where P is the number of (query, key) pairs computed: Nq * Nkv, or with
  ``is_causal`` the pairs under PyTorch's top-left aligned causal mask (sum over queries i
  of min(i + 1, Nkv); Nq(Nq + 1)/2 when Nq = Nkv); ``bytes = (|q| + |k| + |v| + |out|) *
  element size`` (softmax FLOPs and the log-sum-exp are not counted, as in TraceLens and
  PyTorch's flop counter). Variable-length (packed) calls are not modelled.

These are forward-pass models; backward operators are not modelled yet.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from aiflame.analysis import gemm

BYTES_PER_ELEMENT = gemm._BYTES_PER_ELEMENT
DTYPES = {
    "double": "fp64", "float": "fp32", "c10::half": "fp16", "c10::bfloat16": "bf16",
    "c10::float8_e4m3fn": "fp8", "c10::float8_e4m3fnuz": "fp8", "c10::float8_e5m2": "fp8",
    "c10::float8_e5m2fnuz": "fp8", "signed char": "int8", "unsigned char": "int8",
}  # fmt: skip

# op -> (positions of bias, stride, padding, dilation, transposed, output_padding, groups);
# None where the op has no such input.
_CONV = {
    "aten::convolution": (2, 3, 4, 5, 6, 7, 8),
    "aten::_convolution": (2, 3, 4, 5, 6, 7, 8),
    "aten::convolution_overrideable": (2, 3, 4, 5, 6, 7, 8),
    "aten::cudnn_convolution": (None, 3, 2, 4, None, None, 5),
    "aten::miopen_convolution": (2, 4, 3, 5, None, None, 6),
    "aten::mkldnn_convolution": (2, 4, 3, 5, None, None, 6),
}
# op -> (layout "bhnd" or "bnhd", position of is_causal / custom_mask_type)
_ATTENTION = {
    "aten::_scaled_dot_product_flash_attention": ("bhnd", 4),
    "aten::_scaled_dot_product_efficient_attention": ("bhnd", 6),
    "aten::_scaled_dot_product_cudnn_attention": ("bhnd", 6),
    "aten::_flash_attention_forward": ("bnhd", 8),
    "aten::_efficient_attention_forward": ("bnhd", 9),
}
MODELLED = frozenset(gemm.GEMM_OPS) | frozenset(_CONV) | frozenset(_ATTENTION)


@dataclass(frozen=True)
class OpCost:
    family: str  # gemm, conv, attention
    op: str
    params: tuple[tuple[str, Any], ...]  # hashable, to group calls of one shape
    dtype: str  # as recorded (Input type)
    flops: int
    bytes: int | None

    @property
    def precision(self) -> str | None:
        """fp32, tf32, bf16, fp16, fp8... (the key of a device's peak table)."""
        return DTYPES.get(self.dtype.lower())


def _prod(xs: Any) -> int:
    return math.prod(int(x) for x in xs)


def _ints(text: Any, n: int, default: int) -> tuple[int, ...]:
    """A ``Concrete Inputs`` list such as ``'[2, 2]'`` or ``'1'``, broadcast to ``n``."""
    if text is None or text == "":
        return (default,) * n
    vals = tuple(int(v) for v in str(text).strip("[]()").split(",") if v.strip())
    if len(vals) == 1:
        return vals * n
    if len(vals) != n:
        raise ValueError(text)
    return vals


def _bpe(dtype: str) -> int | None:
    return BYTES_PER_ELEMENT.get(dtype.lower())


def conv_cost(op: str, dims: list, types: list, concrete: list | None) -> OpCost | None:
    pos = _CONV[op]
    if concrete is None:
        return None
    x, w = tuple(int(v) for v in dims[0]), tuple(int(v) for v in dims[1])
    nd = len(x) - 2
    if nd < 1 or len(w) != len(x):
        return None
    b_at, s_at, p_at, d_at, t_at, op_at, g_at = pos
    stride = _ints(concrete[s_at], nd, 1)
    pad = _ints(concrete[p_at], nd, 0)
    dil = _ints(concrete[d_at], nd, 1)
    transposed = t_at is not None and str(concrete[t_at]).lower() == "true"
    out_pad = _ints(concrete[op_at], nd, 0) if op_at is not None else (0,) * nd
    groups = _ints(concrete[g_at], 1, 1)[0] if g_at is not None else 1
    bias = b_at is not None and len(dims) > b_at and bool(dims[b_at])
    k = w[2:]
    if transposed:
        cout = w[1] * groups
        sp = [
            (x[2 + i] - 1) * stride[i] - 2 * pad[i] + dil[i] * (k[i] - 1) + out_pad[i] + 1
            for i in range(nd)
        ]
    else:
        cout = w[0]
        sp = [(x[2 + i] + 2 * pad[i] - dil[i] * (k[i] - 1) - 1) // stride[i] + 1 for i in range(nd)]
    if min(sp) <= 0:
        return None
    out = (x[0], cout, *sp)
    per = 2 * _prod(w[1:])
    flops = (_prod(x) if transposed else _prod(out)) * per + (_prod(out) if bias else 0)
    dtype = str(types[0])
    bpe = _bpe(dtype)
    moved = (_prod(x) + _prod(w) + (cout if bias else 0) + _prod(out)) * bpe if bpe else None
    params = (
        ("input", x), ("weight", w), ("stride", stride), ("padding", pad), ("dilation", dil),
        ("groups", groups), ("transposed", transposed), ("bias", bias),
    )  # fmt: skip
    return OpCost("conv", op, params, dtype, flops, moved)


def causal_pairs(nq: int, nkv: int) -> int:
    """(query, key) pairs under a top-left aligned causal mask: sum of min(i + 1, nkv)."""
    full = min(nq, nkv)  # queries 0..full-1 see i + 1 keys, the rest see all nkv
    return full * (full + 1) // 2 + (nq - full) * nkv


def attention_cost(op: str, dims: list, types: list, concrete: list | None) -> OpCost | None:
    layout, causal_at = _ATTENTION[op]
    q, k, v = (tuple(int(x) for x in d) for d in dims[:3])
    if len(q) != 4 or len(k) != 4 or len(v) != 4:
        return None  # packed variable-length batches: sequence lengths are not recorded
    if layout == "bhnd":
        (b, hq, nq, dqk), (_, hkv, nkv, _), dv = q, k, v[3]
    else:
        (b, nq, hq, dqk), (_, nkv, hkv, _), dv = q, k, v[3]
    flag = concrete[causal_at] if concrete and len(concrete) > causal_at else ""
    if op == "aten::_efficient_attention_forward":
        causal = str(flag) not in ("", "0")
    else:
        causal = str(flag).lower() == "true"
    pairs = causal_pairs(nq, nkv) if causal else nq * nkv
    flops = 2 * b * hq * pairs * (dqk + dv)
    dtype = str(types[0])
    bpe = _bpe(dtype)
    elems = b * hq * nq * dqk + b * hkv * nkv * (dqk + dv) + b * hq * nq * dv
    params = (
        ("B", b), ("H_q", hq), ("H_kv", hkv), ("N_q", nq), ("N_kv", nkv), ("d_qk", dqk),
        ("d_v", dv), ("causal", causal),
    )  # fmt: skip
    return OpCost("attention", op, params, dtype, flops, elems * bpe if bpe else None)


def op_cost(op: str, dims: Any, types: Any, concrete: Any = None) -> OpCost | None:
    """The model of one call, or None (not a modelled op, or shapes not recorded)."""
    cost = _op_cost(op, dims, types, concrete)
    # Shapes of damaged traces (dims of 2**64, 1e300) give counts no operator does.
    if cost is None or not all(0 <= _size(v) < _MOST for v in (cost.flops, cost.bytes)):
        return None
    return cost


_MOST = 2.0**63  # FLOPs or bytes of one call beyond this: shapes that are not real


def _size(v: float | int | None) -> float:
    try:
        return float(v or 0)
    except OverflowError:
        return math.inf


def _op_cost(op: str, dims: Any, types: Any, concrete: Any) -> OpCost | None:
    if not isinstance(dims, list) or not isinstance(types, list):
        return None
    try:
        if op in gemm.GEMM_OPS:
            s = gemm.gemm_shape(op, dims, types)
            if s is None:
                return None
            params = (("B", s.b), ("M", s.m), ("N", s.n), ("K", s.k), ("bias", s.bias))
            return OpCost("gemm", op, params, s.dtype, s.flops, s.bytes)
        concrete = concrete if isinstance(concrete, list) else None
        if op in _CONV:
            return conv_cost(op, dims, types, concrete)
        if op in _ATTENTION:
            return attention_cost(op, dims, types, concrete)
    except (IndexError, TypeError, ValueError, ZeroDivisionError, OverflowError):
        return None  # an unexpected layout: better no number than a wrong one
    return None
