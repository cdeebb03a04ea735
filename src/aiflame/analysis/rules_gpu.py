"""Rules for the GPU's own time: exposed communication, eager attention, chains of small
elementwise kernels, and GEMM/convolution/attention shapes far below their roofline.

Costs are GPU time a fix removes or shortens: communication no kernel overlaps, the
kernels a fused attention or a fused elementwise kernel makes unnecessary, the time shapes
would save at their roofline. Each kernel is at most one of these rules' (attention chains
first, then elementwise chains; the roofline rule counts GEMM/conv/attention kernels only).
"""

from __future__ import annotations

import re

import numpy as np

from aiflame.analysis import categories as cats
from aiflame.analysis import comm as comm_kinds
from aiflame.analysis.rule_context import Context, Draft, count, share, us, worth
from aiflame.analysis.schema import Figure, FlameView, Item
from aiflame.analysis.stacks import top_stacks
from aiflame.analysis.timeline import covered
from aiflame.analysis.words import duration, shape_params
from aiflame.analysis.workload import pick
from aiflame.model.trace import Kind

ROOFLINE_LOW = 0.3  # below_roofline: shapes under this share of their roofline
CHAIN_REACH = 6  # eager attention: kernels between a softmax and the GEMMs around it
FUSIBLE_SHARE = 0.2  # elementwise_fusion: of all GPU activity time, at least
_SOFTMAX = re.compile(r"softmax", re.I)


_COMM_FIXES = {
    "default": "overlap communication with computation: with DDP tune bucket_cap_mb (smaller "
    "buckets start the all-reduce earlier in backward) and set gradient_as_bucket_view=True; "
    "with FSDP prefetch (backward_prefetch=BACKWARD_PRE, forward_prefetch=True) and "
    "limit_all_gathers; and check for a straggler rank the others wait for",
    "serving": "overlap the tensor-parallel collectives with computation (custom all-reduce, "
    "fused all-reduce + norm), or use fewer tensor-parallel ranks for this model size",
    "app": "overlap communication with GPU work: run collectives on their own stream beside "
    "independent kernels, use non-blocking MPI (MPI_Isend/MPI_Irecv, then MPI_Wait late) with "
    "CUDA-aware MPI, and merge small messages into fewer, larger ones",
    "jax": "let XLA overlap collectives with computation (async collectives, the "
    "latency-hiding scheduler)",
}
# Expert-parallel all-to-all (dispatch/combine): overlapped by micro-batching, not buckets.
_EP_FIX = (
    "overlap the expert-parallel all-to-all with computation: split each step into two "
    "micro-batches so one's dispatch and combine run under the other's attention and experts "
    "(DualPipe-style scheduling; DeepEP's low-latency kernels with the receive hook take no "
    "SMs while they wait), give communication fewer SMs, and balance the experts' load: every "
    "rank's all-to-all waits for the busiest one"
)
_EP_ITEMS = re.compile(r"dispatch|combine|notify", re.I)


def exposed_communication(c: Context) -> Draft | None:
    """Collectives (NCCL/RCCL, expert-parallel dispatch/combine, any kernel :mod:`comm`
    recognises) that no computation overlaps, and the CPU waiting
    in collectives while the GPU idles.

    Cost: the breakdown's exposed communication (if fully overlapped, it is won) plus the
    idle time :mod:`causes` charges to CPU-side collectives. Evidence: which collectives,
    their exposed time. Fix: bucket sizes, overlap, FSDP prefetch; stragglers.
    """
    t, b = c.t, c.breakdown
    comm = np.nonzero(t.gpu_kind == Kind.COMM)[0]
    waiting = c.idle_of("collective")
    if comm.size == 0 and not waiting:
        return None
    cost = b.exposed_communication + waiting
    if not worth(c, cost):
        return None
    compute = (t.gpu_kind == Kind.COMPUTE) | (t.gpu_kind == Kind.MEMSET)
    bare = t.gpu_dur[comm] - covered(
        t.gpu_ts[comm], t.gpu_dur[comm], t.gpu_ts[compute], t.gpu_dur[compute]
    )
    kinds = np.array(
        [comm_kinds.collective(t.names[int(n)]) for n in t.gpu_name[comm]], dtype=object
    )
    scale = b.exposed_communication / bare.sum() if bare.sum() else 0.0
    items = []
    for k in np.unique(kinds).tolist() if comm.size else []:
        m = kinds == k
        items.append(
            Item(
                name=k,
                cost_us=float(bare[m].sum()) * scale / 1e3,
                detail=f"{int(m.sum()):,} kernels, {duration(float(t.gpu_dur[comm[m]].sum()))} "
                f"in all",
            )
        )
    items.sort(key=lambda i: -(i.cost_us or 0))
    total = c.total_ns
    overlapped = 1 - b.exposed_communication / b.communication if b.communication else None
    top = f", mostly {items[0].name}" if items else ""
    return Draft(
        rule="exposed_communication",
        title="communication the GPU waits for (not overlapped with computation)",
        parts={"exposed_communication": float(b.exposed_communication), "idle": waiting},
        summary=(
            f"Collectives run {duration(b.exposed_communication)} with no computation beside "
            f"them ({b.exposed_communication / total:.1%} of the timeline){top}"
            + (
                f"; the GPU also idles {duration(waiting)} while the CPU waits in collectives"
                if waiting
                else ""
            )
            + "."
        ),
        assumption="assumes the exposed communication could run under computation (bucketing, "
        "prefetch, overlap): wins its time; a rank waiting for a slower one wins only when "
        "the straggler is fixed",
        fix=_EP_FIX if items and _EP_ITEMS.search(items[0].name) else pick(_COMM_FIXES, c.workload),
        figures=[
            us("exposed communication", b.exposed_communication),
            us("communication in all", b.communication),
            share("overlapped with computation", overlapped),
            us("GPU idle while the CPU waits in collectives", waiting),
        ],
        items=items[:5],
        top_stacks=c.idle_stacks("collective")
        or top_stacks(t, t.gpu_launch[comm], bare.astype(np.float64)),
        flame=FlameView(
            metric="gpu-time",
            search=comm_kinds.search(t.names[i] for i in np.unique(t.gpu_name[comm]).tolist()),
        ),
    )


def _stream_sequences(c: Context) -> list[np.ndarray]:
    """The kernels (no copies or memsets) of each stream, in start order."""
    t = c.t
    kernels = np.nonzero((t.gpu_kind == Kind.COMPUTE) | (t.gpu_kind == Kind.COMM))[0]
    stream = t.gpu_stream[kernels] if t.gpu_stream is not None else np.zeros(kernels.size, int)
    order = np.lexsort((t.gpu_ts[kernels], stream))
    kernels, stream = kernels[order], stream[order]
    cut = np.flatnonzero(np.diff(stream)) + 1
    return np.split(kernels, cut) if kernels.size else []


def _softmax_mask(c: Context) -> np.ndarray:
    """Per GPU activity: is it a softmax (its kernel's name or its operator's)?"""
    t = c.t
    by_kernel = np.fromiter((bool(_SOFTMAX.search(n)) for n in t.names), bool, len(t.names))
    out = by_kernel[t.gpu_name]
    op = t.gpu_op
    if t.cpu_ts.size:
        has = op >= 0
        out[has] |= by_kernel[t.cpu_name[op[has]]]
    return out


def _attention_shaped(c: Context, j: int) -> bool:
    """A softmax over scores (3-D or more input), when its shapes are recorded."""
    op = int(c.t.gpu_op[j])
    dims = c.t.op_shapes.get(op, (None, None))[0] if op >= 0 else None
    if not isinstance(dims, list) or not dims or not isinstance(dims[0], list):
        return True  # not recorded: the kernel sequence decides
    return len(dims[0]) >= 3


def attention_chains(c: Context) -> tuple[list[np.ndarray], np.ndarray]:
    """Eager attention: softmax kernels between two GEMMs with only elementwise and
    reduction kernels (scale, mask, dropout) around them; per chain the kernels between
    the GEMMs, and the softmax kernels."""
    found: tuple[list[np.ndarray], np.ndarray] | None = c.__dict__.get("_attention")
    if found is not None:
        return found
    cat, soft = c.category, _softmax_mask(c)
    glue = (cat == cats.ELEMENTWISE) | (cat == cats.REDUCTION)
    chains, softmaxes = [], []
    for seq in _stream_sequences(c):
        kind = cat[seq]
        taken = 0  # positions before this are in a chain already
        for p in np.nonzero(soft[seq])[0].tolist():
            if p < taken or not _attention_shaped(c, int(seq[p])):
                continue
            lo, hi = p - 1, p + 1
            while lo >= 0 and p - lo <= CHAIN_REACH and glue[seq[lo]]:
                lo -= 1
            while hi < seq.size and hi - p <= CHAIN_REACH and glue[seq[hi]]:
                hi += 1
            if lo < taken - 1 or hi >= seq.size or kind[lo] != cats.GEMM or kind[hi] != cats.GEMM:
                continue
            chains.append(seq[lo + 1 : hi])
            softmaxes.append(seq[p])
            taken = hi
    found = (chains, np.asarray(softmaxes, dtype=np.int64))
    c.__dict__["_attention"] = found
    return found


_ATTENTION_FIXES = {
    "default": "use a fused attention kernel: torch.nn.functional.scaled_dot_product_attention "
    "in the model, or attn_implementation='sdpa' (or 'flash_attention_2') when loading a "
    "transformers model",
    "app": "use a fused attention kernel (FlashAttention, cuDNN fused attention) instead of "
    "GEMM, softmax, GEMM",
    "jax": "use jax.nn.dot_product_attention (cuDNN flash attention) instead of an explicit "
    "softmax between two einsums",
}


def eager_attention(c: Context) -> Draft | None:
    """Attention computed eagerly: GEMM (Q K^T), softmax with scale/mask/dropout kernels,
    GEMM (P V), where SDPA / FlashAttention would run one fused kernel.

    Cost: the GPU time of the kernels between the two GEMMs (softmax, scaling, masking,
    dropout), which a fused kernel removes; the GEMMs themselves are kept. Fix:
    ``F.scaled_dot_product_attention``, ``attn_implementation="sdpa"``.
    """
    chains, softmaxes = attention_chains(c)
    if len(chains) < 2:
        return None
    t = c.t
    inside = np.concatenate(chains)
    cost = float(t.gpu_dur[inside].sum())
    if not worth(c, cost):
        return None
    per_chain = np.array([float(t.gpu_dur[ch].sum()) for ch in chains])
    launch = t.op_launch()[softmaxes]
    return Draft(
        rule="eager_attention",
        title="attention runs as separate GEMM, softmax and elementwise kernels",
        parts={"computation": cost},
        summary=(
            f"{len(chains):,} attention blocks run GEMM, softmax, GEMM as separate kernels; "
            f"the {inside.size:,} softmax, scaling and masking kernels between the GEMMs take "
            f"{duration(cost)} ({cost / c.total_ns:.1%} of the timeline)."
        ),
        assumption="assumes a fused attention kernel removes the kernels between the two "
        "GEMMs (softmax, scale, mask, dropout) and keeps the GEMMs' time",
        fix=pick(_ATTENTION_FIXES, c.workload),
        figures=[
            us("softmax, scale and mask kernels", cost),
            count("attention blocks", len(chains)),
            count("kernels between the GEMMs", inside.size),
            us("per block (median)", float(np.median(per_chain))),
        ],
        top_stacks=top_stacks(t, launch, per_chain, include_self=False),
        flame=FlameView(metric="gpu-time", search="softmax"),
    )


_FUSION_FIXES = {
    "default": "fuse the chains: torch.compile (Inductor turns each chain into one Triton "
    "kernel), fused normalization and activation layers (fused LayerNorm/RMSNorm, fused "
    "rotary embeddings), and fused or foreach optimizers (torch.optim.AdamW(fused=True))",
    "app": "fuse consecutive elementwise kernels into one kernel: one pass over memory "
    "instead of several",
    "jax": "keep these ops inside one jit so XLA fuses them",
}


def elementwise_fusion(c: Context) -> Draft | None:
    """GPU time dominated by chains of small elementwise (and reduction) kernels.

    Pattern: elementwise and reduction kernels are at least ``FUSIBLE_SHARE`` of the GPU
    activity time, in runs of two or more back to back on a stream (Triton kernels of
    ``torch.compile`` and attention chains excluded). Cost: a run of k memory-bound kernels
    fused into one makes one pass over memory instead of k: (k-1)/k of the run's time.
    """
    t = c.t
    total_act = float(t.gpu_dur.sum())
    cat = c.category
    fusible = (cat == cats.ELEMENTWISE) | (cat == cats.REDUCTION)
    if not total_act or float(t.gpu_dur[fusible].sum()) < FUSIBLE_SHARE * total_act:
        return None
    triton = np.fromiter((n.startswith("triton_") for n in t.names), bool, len(t.names))
    fusible &= ~triton[t.gpu_name]
    chains, _ = attention_chains(c)
    if chains:
        fusible[np.concatenate(chains)] = False
    runs, kernels = 0, 0
    saved = np.zeros(t.gpu_ts.size)
    for seq in _stream_sequences(c):
        f = fusible[seq]
        if not np.any(f):
            continue
        edges = np.diff(np.r_[0, f.astype(np.int8), 0])
        for a, b in zip(np.nonzero(edges == 1)[0], np.nonzero(edges == -1)[0], strict=True):
            k = int(b - a)
            if k < 2:
                continue
            run = seq[a:b]
            saved[run] = t.gpu_dur[run] * (k - 1) / k
            runs += 1
            kernels += k
    cost = float(saved.sum())
    if not worth(c, cost):
        return None
    hit = np.nonzero(saved > 0)[0]
    ops = t.gpu_op[hit]
    names = t.gpu_name[hit]
    if t.cpu_ts.size:
        names = np.where(ops >= 0, t.cpu_name[np.maximum(ops, 0)], names)
    uniq, inv = np.unique(names, return_inverse=True)
    by = np.bincount(inv, weights=saved[hit])
    items = [
        Item(name=t.names[int(uniq[i])], cost_us=float(by[i]) / 1e3, detail="")
        for i in np.argsort(-by)[:5]
    ]
    elementwise = float(t.gpu_dur[(cat == cats.ELEMENTWISE) | (cat == cats.REDUCTION)].sum())
    return Draft(
        rule="elementwise_fusion",
        title="GPU time goes to chains of small elementwise kernels",
        parts={"computation": cost},
        summary=(
            f"Elementwise and reduction kernels take {elementwise / total_act:.0%} of the GPU "
            f"time; {kernels:,} of them run in {runs:,} back-to-back chains, and fusing each "
            f"chain would save about {duration(cost)} ({cost / c.total_ns:.1%} of the "
            f"timeline)."
        ),
        assumption="assumes these kernels are memory-bound, so a chain of k fused into one "
        "runs in about 1/k of their time",
        fix=pick(_FUSION_FIXES, c.workload),
        figures=[
            us("time fusion saves", cost),
            share("elementwise and reduction share of GPU time", elementwise / total_act),
            count("chains", runs),
            count("kernels in them", kernels),
        ],
        items=items,
        top_stacks=top_stacks(t, t.op_launch()[hit], saved[hit]),
        flame=FlameView(metric="gpu-time", search="elementwise|vectorized|reduce"),
    )


_ROOFLINE_FIXES = {
    "default": "memory-bound shapes: fuse with neighbours (torch.compile), larger batch or "
    "sequence, lower precision; compute-bound: tensor cores (bf16, "
    "torch.backends.cuda.matmul.allow_tf32), dimensions multiple of 8/16, "
    "torch.compile(mode='max-autotune')",
    "app": "use tensor-core GEMM libraries (cuBLASLt/hipBLASLt) in bf16/fp16 with dimensions "
    "multiple of 8/16; batch small GEMMs (grouped or batched GEMM)",
}


def below_roofline(c: Context) -> Draft | None:
    """Modelled ops (GEMM, convolution, attention) far below their roofline; low MFU.

    Pattern: shapes whose achieved TFLOP/s is under ``ROOFLINE_LOW`` of the roofline at
    their arithmetic intensity (needs the device's peaks). Cost: the time they would save
    at their roofline, ``kernel time x (1 - achieved / roofline)``. A captured op that N
    graph replays run is N calls (its FLOPs each time); replays whose capture match is not
    certain are left out.
    """
    e = c.trusted_efficiency
    low = [r for r in e.ops if r.pct_of_roofline is not None and r.pct_of_roofline < ROOFLINE_LOW]
    cost = 1e3 * sum(r.kernel_time_us.sum * (1 - (r.pct_of_roofline or 0)) for r in low)
    if not low or not worth(c, cost):
        return None
    low.sort(key=lambda r: -r.kernel_time_us.sum * (1 - (r.pct_of_roofline or 0)))
    items = [
        Item(
            name=f"{r.op} {shape_params(r.params)}".strip(),
            cost_us=r.kernel_time_us.sum * (1 - (r.pct_of_roofline or 0)),
            detail=f"{r.calls:,} calls, {r.tflops_per_s or 0:.1f} TFLOP/s, "
            f"{(r.pct_of_roofline or 0):.0%} of its roofline ({r.bound}-bound)",
        )
        for r in low[:5]
    ]
    memory = 1e3 * sum(r.kernel_time_us.sum for r in low if r.bound == "memory")
    ops = sorted({r.op for r in low})
    return Draft(
        rule="below_roofline",
        title="GEMM/convolution/attention shapes run far below the device's roofline",
        parts={"computation": cost},
        summary=(
            f"{len(low)} shapes run under {ROOFLINE_LOW:.0%} of their roofline on "
            f"{e.device.name if e.device else 'the device'} (MFU "
            f"{(e.mfu or 0):.1%}); at their roofline they would save {duration(cost)}."
        ),
        assumption="assumes each shape could reach its roofline (the lower of peak compute "
        "and intensity x bandwidth); no kernel gets there, so this is an upper bound",
        fix=pick(_ROOFLINE_FIXES, c.workload),
        figures=[
            us("time saved at the roofline", cost),
            share("MFU", e.mfu),
            count("shapes below", len(low)),
            us("their kernel time", 1e3 * sum(r.kernel_time_us.sum for r in low)),
            us("of it memory-bound", memory),
            Figure(label="device", value=e.device.name if e.device else None, unit="text"),
        ],
        items=items,
        flame=FlameView(
            metric="gpu-time", search="^(" + "|".join(re.escape(o) for o in ops) + ")$"
        ),
    )


RULES = [exposed_communication, eager_attention, elementwise_fusion, below_roofline]
