"""GPU time by op category (GEMM, convolution, attention, elementwise, reduction,
normalization, communication, memcpy, other), like TraceLens' per-category summary.

Collectives and copies are what the time breakdown says they are (memsets go to ``other``).
A kernel takes the category of the nearest enclosing operator that has one (``aten::addmm``
under ``aten::linear``: GEMM; ``aten::native_layer_norm``: normalization); without such an
operator (graph replays, C++ programs, Triton kernels of ``torch.compile``) its name decides
(``Cijk_``/``cutlass``/``gemm``: GEMM, ``flash``/``fmha``: attention, ``triton_poi_``:
elementwise, ``triton_red_``/``triton_per_``: reduction...).
"""

from __future__ import annotations

import re

import numpy as np

from aiflame.analysis.schema import Category
from aiflame.model.trace import Kind, TraceData
from aiflame.transforms.correlate import nearest_enclosing

NAMES = (
    "gemm",
    "convolution",
    "attention",
    "elementwise",
    "reduction",
    "normalization",
    "communication",
    "memcpy",
    "other",
)
GEMM, CONV, ATTENTION, ELEMENTWISE, REDUCTION, NORM, COMM, MEMCPY, OTHER = range(len(NAMES))


def _any(words: str, whole: bool = False, suffix: str = "") -> re.Pattern[str]:
    """A pattern matching any of the space-separated ``words`` (regexes), anywhere in a
    name or, with ``whole``, as the whole name (followed by ``suffix``)."""
    alt = "|".join(words.split())
    return re.compile(f"^({alt}){suffix}$" if whole else alt, 0 if whole else re.I)


_GEMM_OPS = (
    "mm addmm bmm baddbmm addbmm matmul linear _scaled_mm _int_mm addmv mv dot _grouped_mm einsum"
)
_REDUCTION_OPS = (
    r"_?(log_)?_?softmax sum mean amax amin max min argmax argmin cumsum topk sort var std "
    r"var_mean std_mean prod all any logsumexp norm linalg_vector_norm nll_loss\w* "
    r"cross_entropy\w*"
)
_ELEMENTWISE_OPS = (
    r"add sub rsub mul div neg relu gelu silu sigmoid tanh exp log pow sqrt rsqrt reciprocal "
    r"where masked_fill clamp clamp_min clamp_max threshold hardtanh leaky_relu elu erf abs "
    r"sign maximum minimum lt le gt ge eq ne logical_\w+ bitwise_\w+ copy fill zero to "
    r"_to_copy dropout native_dropout fused_dropout sin cos floor ceil round trunc lerp "
    r"addcmul addcdiv _foreach_\w+ mish softplus hardswish hardsigmoid "
    # fused activations and rotary embeddings of inference engines (vLLM, SGLang, aiter)
    r"\w+_and_mul \w*rotary\w* \w*rope"
)
# Operator names (without the ``aten::`` namespace), first match wins.
_OP = (
    # with the KV-cache writes of inference engines (reshape_and_cache, store_cache)
    (ATTENTION, re.compile(r"attention|flash_attn|fmha|mha_|_and_cache|store_cache", re.I)),
    (CONV, re.compile(r"^(cudnn_|miopen_|mkldnn_|_)?conv")),
    (GEMM, _any(_GEMM_OPS, whole=True)),
    (REDUCTION, _any(_REDUCTION_OPS, whole=True, suffix=r"_?(_backward|_data)*")),
    (NORM, re.compile("norm")),
    (ELEMENTWISE, _any(_ELEMENTWISE_OPS, whole=True, suffix=r"_?(_backward)?")),
)
# Kernel names (any case), first match wins.
_KERNEL = (
    (ATTENTION, _any("flash fmha attention attn_ _attn mha _and_cache store_cache")),
    (CONV, _any("conv implicit_gemm dgrad wgrad fprop winograd miopen")),
    (GEMM, _any("gemm cutlass cublas Cijk_ nvjet xmma wgmma matmul _mm_ triton_tem_ triton_mm")),
    (NORM, _any("norm")),
    (REDUCTION, _any("reduce softmax triton_red_ triton_per_ argmax topk sort cumsum nll_loss")),
    (
        ELEMENTWISE,
        _any(
            "elementwise vectorized unrolled pointwise triton_poi_ copy_kernel fill _and_mul rotary"
        ),
    ),
)


def _table(names: list[str], rules: tuple, strip: bool, used: np.ndarray) -> np.ndarray:
    """Category of each name in ``used`` (name ids; -1 for the others and no match)."""
    out = np.full(len(names), -1, dtype=np.int8)
    for i in np.unique(used).tolist():
        n = names[i]
        text = n.split("::", 1)[1] if strip and "::" in n else n
        for cat, pattern in rules:
            if pattern.search(text):
                out[i] = cat
                break
    return out


def classify(t: TraceData, op_of: np.ndarray | None = None) -> np.ndarray:
    """The category of each GPU activity (index into NAMES).

    ``op_of``: the launching slice of each activity to look up operators from (default: the
    launch; a replayed graph's kernels use their captured launch).
    """
    out = np.full(t.gpu_ts.size, OTHER, dtype=np.int8)
    if t.gpu_ts.size == 0:
        return out
    by_kernel = _table(t.names, _KERNEL, False, t.gpu_name)[t.gpu_name]
    known = by_kernel >= 0
    out[known] = by_kernel[known]
    start = t.gpu_launch if op_of is None else op_of
    if t.cpu_ts.size and np.any(start >= 0):
        op_table = _table(t.names, _OP, True, t.cpu_name[t.cpu_is_op])
        has_cat = t.cpu_is_op & (op_table[t.cpu_name] >= 0)
        op = nearest_enclosing(t.cpu_parent, has_cat, start)
        found = op >= 0
        out[found] = op_table[t.cpu_name[op[found]]]
    out[t.gpu_kind == Kind.MEMSET] = OTHER
    out[t.gpu_kind == Kind.MEMCPY] = MEMCPY
    out[t.gpu_kind == Kind.COMM] = COMM
    return out


def summary(t: TraceData, cat: np.ndarray, top: int = 3) -> list[Category]:
    """Time per category (largest first), with the ops (else kernels) that hold most of it."""
    total = float(t.gpu_dur.sum())
    rows = []
    is_op = t.cpu_is_op if t.cpu_ts.size else np.zeros(0, dtype=bool)
    for k, name in enumerate(NAMES):
        m = cat == k
        if not np.any(m):
            continue
        dur = t.gpu_dur[m].astype(np.float64)
        op = t.gpu_op[m]
        key = np.where(op >= 0, t.cpu_name[np.maximum(op, 0)], -1) if is_op.size else op
        key = np.where(key >= 0, key, t.gpu_name[m])  # no op: the kernel's name
        uniq, inv = np.unique(key, return_inverse=True)
        by = np.bincount(inv, weights=dur)
        names = [t.names[int(uniq[i])] for i in np.argsort(-by)[:top]]
        rows.append(
            Category(
                category=name,
                time_us=float(dur.sum()) / 1e3,
                share=float(dur.sum()) / total if total else 0.0,
                count=int(m.sum()),
                top=names,
            )
        )
    rows.sort(key=lambda r: -r.time_us)
    return rows


__all__ = ["NAMES", "classify", "summary"]
