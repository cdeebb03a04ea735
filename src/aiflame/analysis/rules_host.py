"""Rules for GPU idle time the host causes: what the CPU did while the GPU waited.

Each rule takes the idle time :mod:`causes` charges to its causes: the win of a fix is that
idle time (the GPU would have had work queued), so these costs never overlap.
"""

from __future__ import annotations

import re

import numpy as np

from aiflame.analysis import causes, coldstart
from aiflame.analysis.launch import OVERHEAD_CAUSES
from aiflame.analysis.rule_context import (
    PIN_MEMORY_FIX_KEY,
    Context,
    Draft,
    count,
    share,
    us,
    worth,
)
from aiflame.analysis.rules_copies import copy_idle, copy_parts, synchronous_directions
from aiflame.analysis.schema import FlameView, Item, SyncStat
from aiflame.analysis.sync import TO_PAGEABLE
from aiflame.analysis.words import duration, frames
from aiflame.analysis.workload import pick

IDLE_ASSUMPTION = (
    "assumes the GPU would have been busy during the idle time this CPU work explains, "
    "had that work run ahead of the GPU or not at all"
)


def _gaps_of(c: Context, *keys: str) -> tuple[int, float]:
    """Gaps mostly explained by these causes, and the longest of them (ns)."""
    e = c.explained
    main = causes.dominant(e, c.gaps.start.size)
    want = np.isin(main, [causes.INDEX[k] for k in keys])
    n = int(want.sum())
    return n, float(c.gaps.length[want].max()) if n else 0.0


def _idle_draft(
    c: Context,
    rule: str,
    keys: tuple[str, ...],
    title: str,
    doing: str,
    fixes: dict[str, str],
    metric: str = "gpu-idle",
    ns: float | None = None,
    assumption: str = IDLE_ASSUMPTION,
) -> Draft | None:
    cost = c.idle_of(*keys) if ns is None else ns
    if not worth(c, cost):
        return None
    n, longest = _gaps_of(c, *keys)
    stacks = c.idle_stacks(*keys)
    where = f", mostly in {frames(stacks[0].stack)}" if stacks else ""
    total = c.total_ns
    summary = (
        f"The GPU sits idle {duration(cost)} ({cost / total:.1%} of the timeline) while "
        f"the CPU is {doing}{where}"
        + (f"; {n:,} gap{'s' if n != 1 else ''}, the longest {duration(longest)}." if n else ".")
    )
    return Draft(
        rule=rule,
        title=title,
        parts={"idle": cost},
        summary=summary,
        assumption=assumption,
        fix=pick(fixes, c.workload),
        figures=[
            us("GPU idle it explains", cost),
            share("of the idle time", cost / c.breakdown.idle if c.breakdown.idle else None),
            count("gaps where it is the main cause", n),
            us("longest such gap", longest),
        ],
        top_stacks=stacks,
        flame=FlameView(metric=metric),
    )


def data_loading(c: Context) -> Draft | None:
    """The GPU waits while the launching thread loads data (DataLoader, ``torch.utils.data``).

    Cost: the idle time charged to ``data_loading``. Fix: load in worker processes ahead
    of the GPU (``num_workers``, ``pin_memory``, ``prefetch_factor``, persistent workers).
    """
    return _idle_draft(
        c, "data_loading", ("data_loading",), "the GPU waits for the next batch from the "
        "DataLoader", "loading data", {
            "default": "load batches ahead of the GPU in worker processes: DataLoader("
            "num_workers=N, pin_memory=True, prefetch_factor=2 or more, persistent_workers="
            "True); move per-sample decoding and transforms into the Dataset so the "
            "workers run them",
        },
    )  # fmt: skip


def preprocessing(c: Context) -> Draft | None:
    """The GPU waits while the launching thread preprocesses inputs (image/feature
    processors, tokenizers, transforms, PIL, OpenCV, SciPy ndimage).

    Cost: the idle time charged to ``preprocessing``. Fix: run it ahead of the GPU (worker
    processes, a thread pool preparing the next input) or on the GPU.
    """
    return _idle_draft(
        c, "preprocessing", ("preprocessing",), "the GPU waits while the CPU preprocesses "
        "inputs", "preprocessing inputs", {
            "default": "prepare the next inputs while the GPU runs the current ones: "
            "preprocess in DataLoader workers (num_workers=N) or a thread/process pool, or "
            "on the GPU (torchvision.transforms.v2 on CUDA tensors, a fast/GPU image "
            "processor such as use_fast=True); with a transformers pipeline pass a "
            "dataset and num_workers so preprocessing overlaps inference",
            "serving": "take input processing off the step: cache processed multimodal "
            "inputs, use the fast (GPU) processor, and give the processor its own workers "
            "so the engine never waits on it",
        },
    )  # fmt: skip


def cpu_ops(c: Context) -> Draft | None:
    """The GPU waits while operators compute on the CPU (ops that launch no GPU work).

    Cost: the idle time charged to ``cpu_ops``. Fix: move those tensors to the GPU, or
    do that work once, outside the step.
    """
    return _idle_draft(
        c, "cpu_ops", ("cpu_ops",), "the GPU waits while operators run on the CPU",
        "running operators on CPU tensors", {
            "default": "move those tensors to the GPU (create them there: device='cuda'), "
            "or compute them once outside the step",
        },
    )  # fmt: skip


# launch_bound and host_overhead: the same fix (fewer launches, less host work between
# them), so one finding when both fire.
LAUNCH_FIX_KEY = "launch and dispatch overhead"
_LAUNCH_FIXES = {
    "default": "capture the step in CUDA graphs (torch.compile(mode='reduce-overhead') or "
    "torch.cuda.graphs), fuse small ops with torch.compile, or raise the batch size so each "
    "kernel does more work",
    "torch.compile": "compile with mode='reduce-overhead' so the step replays as one CUDA "
    "graph, and remove graph breaks (TORCH_LOGS=graph_breaks) that cut it into many small "
    "launches",
    "serving": "run these steps under CUDA/HIP graphs (vLLM: do not set enforce_eager and "
    "include these batch sizes in the cudagraph capture sizes; SGLang: raise "
    "--cuda-graph-max-bs), and keep per-step Python (sampling, scheduling) light",
    "app": "capture the kernel sequence in a CUDA graph (cudaStreamBeginCapture/"
    "cudaStreamEndCapture, cudaGraphInstantiate, cudaGraphLaunch) or fuse small kernels, so "
    "launch calls stop pacing the GPU",
    "jax": "jit larger functions so XLA fuses the work into fewer, larger kernels",
}


def launch_bound(c: Context) -> Draft | None:
    """Launch-bound phases: the CPU launches back to back yet cannot keep up with the GPU.

    Pattern: :func:`launch.launch_bound_phases` (most launches outlast their kernel, the
    GPU 5-50% busy, launch calls within 100 us of each other and no stall). Cost: the idle
    time in the phases that :mod:`causes` charges to launch calls and dispatch, not the
    phases' whole idle time. Fix: CUDA graphs, fusion, larger batches.
    """
    L = c.launch
    if L is None or not L.launch_bound.phases:
        return None
    cost = L.launch_bound.overhead_idle_us * 1e3
    if not worth(c, cost):
        return None
    p = L.launch_bound_phases[0]
    total = c.total_ns
    span = duration(L.launch_bound.time_us * 1e3)
    phases = f"{L.launch_bound.phases} launch-bound phase" + (
        "s" if L.launch_bound.phases > 1 else ""
    )
    return Draft(
        rule="launch_bound",
        title="launch-bound: the CPU cannot launch kernels as fast as the GPU runs them",
        parts={"idle": cost},
        summary=(
            f"In {phases} ({span}) "
            f"launches follow each other every {p.median_interval_us:.1f} us (median) while "
            f"kernels take {p.median_gpu_us:.1f} us, keeping the GPU {p.gpu_busy_share:.0%} "
            f"busy; launching and dispatch leave it idle {duration(cost)} "
            f"({cost / total:.1%} of the timeline)."
        ),
        assumption="assumes CUDA graphs or fusion remove the launch and dispatch time "
        "between these kernels, so the GPU runs them back to back",
        fix=pick(_LAUNCH_FIXES, c.workload),
        figures=[
            us("GPU idle while launching", cost),
            count("launch-bound phases", L.launch_bound.phases),
            us("time in them", L.launch_bound.time_us * 1e3),
            us("median launch call", p.median_launch_us * 1e3),
            us("median kernel", p.median_gpu_us * 1e3),
            share("GPU busy in the longest phase", p.gpu_busy_share),
        ],
        # where the idle of launching and dispatch in the phases is, as the gpu-idle
        # flame graph shows it (else, the stacks that launch most in the longest phase)
        top_stacks=c.idle_stacks(*OVERHEAD_CAUSES, where=c.in_launch_bound_phases) or p.top_stacks,
        flame=FlameView(metric="gpu-idle", search=r"^(cuda|hip)(Graph)?Launch|^cuLaunch"),
        fix_key=LAUNCH_FIX_KEY,
    )


def host_overhead(c: Context) -> Draft | None:
    """Python and dispatch overhead between kernels, outside launch-bound phases.

    Cost: the idle time :mod:`causes` charges to launch calls and to Python/operator
    dispatch, less what ``launch_bound`` already claims. Fix: fewer, larger ops
    (``torch.compile``), CUDA graphs, less Python in the step.
    """
    in_phases = c.launch.launch_bound.overhead_idle_us * 1e3 if c.launch else 0.0
    cost = c.idle_of(*OVERHEAD_CAUSES) - in_phases
    draft = _idle_draft(
        c, "host_overhead", OVERHEAD_CAUSES, "the GPU waits on Python and operator dispatch "
        "between kernels", "running Python and dispatching operators between launches",
        {**_LAUNCH_FIXES, "default": "cut the host work between kernels: torch.compile fuses "
         "ops and removes Python and dispatch overhead, CUDA graphs (mode='reduce-overhead') "
         "replay the step without it; move logging and bookkeeping out of the step"},
        ns=cost,
    )  # fmt: skip
    if draft is not None:
        draft.fix_key = LAUNCH_FIX_KEY  # launch_bound's fix: one finding with it
        # its idle outside the launch-bound phases, whose stacks are launch_bound's
        outside = c.idle_stacks(*OVERHEAD_CAUSES, where=~c.in_launch_bound_phases)
        draft.top_stacks = outside or draft.top_stacks
    return draft


_SYNC_FIXES = {
    "default": "keep values on the GPU between steps: no .item(), .cpu(), .tolist(), print() "
    "of GPU tensors or torch.cuda.synchronize() in the loop (accumulate metrics as tensors, "
    "read them every N steps); copy results with non_blocking=True into pinned memory",
    "app": "drop the cudaDeviceSynchronize/cudaStreamSynchronize after each kernel: order "
    "work with streams and events (cudaEventRecord, cudaStreamWaitEvent) and synchronize "
    "once, where the host needs the results",
}
_UPLOAD_SYNC_FIXES = {
    "default": "create inputs where they are used: torch.tensor(data, device=...) and .to(device) "
    "of a pageable CPU tensor copy, then wait for the GPU; build constant tensors on the GPU "
    "once, outside the step, or pin the host tensors (pin_memory()) and copy them with "
    ".to(device, non_blocking=True) ahead of use",
    "app": "copy from pinned host memory (cudaMallocHost/cudaHostRegister) with cudaMemcpyAsync "
    "and synchronize once, where the results are needed",
}
_DIRECTION_WORDS = {"download": "downloads", "upload": "uploads", "device copy": "device copies"}


def _waits_on(by_copy: dict[str, SyncStat]) -> str:
    """`` (3 downloads, 1 upload)``: the copies the blocking calls wait on."""
    parts = [
        f"{v.count:,} {_DIRECTION_WORDS[k] if v.count != 1 else k}"
        for k, v in by_copy.items()
        if k in _DIRECTION_WORDS
    ]
    return f" (waiting on {', '.join(parts)})" if parts else ""


def _copy_examples(c: Context) -> str:
    """What the synchronous copies are, by their direction."""
    found = synchronous_directions(c)
    app = c.workload.kind in ("cuda-app", "hip-app")
    words = {
        "download": "downloads" if app else "downloads such as .cpu() and .item()",
        "upload": "uploads" if app else "uploads such as torch.tensor(..., device=...)",
        "device copy": "device-to-device copies",
    }
    named = [words[k] for k in sorted(found, key=lambda k: -found[k]) if k in words]
    return ", ".join(named) or "cudaMemcpy"


# The calls blocked with no GPU work in the trace: what they waited on is elsewhere.
_UNSEEN_WAIT_FIX = (
    "first find what the calls waited on, since the GPU ran none of this trace's work "
    "meanwhile: trace every process and stream on the device (nsys/rocprofv3 system-wide), "
    "start the trace earlier (work submitted before it began), or look for work on "
    "another stream or rank the call waits for; then: "
)
WAITED_ON_UNSEEN = 0.5  # share of the blocked time the GPU idled: the calls waited elsewhere


def sync_stalls(c: Context) -> Draft | None:
    """The CPU blocks in synchronizing calls and cannot queue work ahead of the GPU.

    Pattern: ``sync_wait`` gaps (the launching thread was in a device/stream/event
    synchronize, or a synchronous copy, when the GPU ran dry). Cost: only the part of each
    gap the call is to blame for: at most the time it blocked before the GPU ran dry,
    during which the CPU could have prepared the next work; the rest of the gap is what
    the CPU did afterwards (other rules). Plus the idle while the CPU sat in synchronous
    copies (downloads, copy calls without Async) that are not pageable uploads.
    """
    s = c.sync
    other_copies = copy_idle(c)["synchronous"]
    cost = c.idle_of("sync") + other_copies
    if s is None and not other_copies:
        return None
    if not worth(c, cost):
        return None
    items = []
    if s is not None:
        items = [
            Item(
                name=name,
                cost_us=v.gpu_idle_caused_us,
                detail=f"{v.count:,} calls blocked {duration(v.blocked_us * 1e3)}",
            )
            for name, v in list(s.by_cause.items())[:5]
        ]
    blocked = s.blocked_us * 1e3 if s is not None else 0.0
    inside = s.gpu_idle_inside_us * 1e3 if s is not None else 0.0
    unseen = blocked > 0 and inside >= WAITED_ON_UNSEEN * blocked
    total = c.total_ns
    names = {re.escape(k.removesuffix(TO_PAGEABLE)) for k in s.by_call} if s else set()
    calls = "|".join(sorted(names))
    # the upload fix where the calls that cost most wait on uploads (torch.tensor(..., device=))
    caused = {k: v.gpu_idle_caused_us for k, v in s.by_copy.items()} if s is not None else {}
    uploads = caused.get("upload", 0.0) > 0.5 * sum(caused.values())
    in_copies = (
        f"the GPU idles {duration(other_copies)} while the CPU waits in synchronous copies "
        f"({_copy_examples(c)})"
    )
    n_calls = s.calls if s else 0
    if n_calls:
        said = f"The CPU blocks {duration(blocked)} in {n_calls:,} synchronizing call"
        said += "s" if n_calls != 1 else ""
        said += _waits_on(s.by_copy) if s is not None else ""
        said += f", and {in_copies}" if other_copies else ""
    else:
        said = in_copies[0].upper() + in_copies[1:]
    waited = (
        f" For {duration(inside)} of the time they blocked the GPU ran nothing this trace "
        "shows: they waited on work it does not record."
        if unseen
        else ""
    )
    fix = pick(_UPLOAD_SYNC_FIXES if uploads else _SYNC_FIXES, c.workload)
    return Draft(
        rule="sync_stalls",
        title="synchronizing calls stop the CPU from queuing work ahead of the GPU",
        parts={"idle": cost},
        summary=(
            f"{said}; in all they cost the GPU {duration(cost)} of idle "
            f"({cost / total:.1%} of the timeline).{waited}"
        ),
        assumption="assumes that without the call the CPU would have prepared the next work "
        "while it waited: the cost per gap is at most the time the call blocked before the "
        "GPU ran dry",
        fix=_UNSEEN_WAIT_FIX + fix if unseen else fix,
        figures=[
            us("GPU idle caused", cost),
            us("of it in synchronous copies", other_copies),
            *(
                [
                    us("CPU blocked in the calls", blocked),
                    us("GPU idle while they blocked", inside),
                    us("idle of the gaps after them", s.gpu_idle_after_us * 1e3),
                    count("calls", n_calls),
                ]
                if s is not None and n_calls
                else []
            ),
        ],
        items=items,
        # the idle they cost, as the gpu-idle flame graph has it; else where they blocked
        top_stacks=c.stacks_of(c.explained.of("sync") | copy_parts(c, "synchronous"))
        or (s.top_stacks if s else []),
        flame=FlameView(metric="gpu-idle", search=f"^({calls})(_v\\d+)?$" if calls else None),
    )


def allocation(c: Context) -> Draft | None:
    """The GPU waits while the CPU allocates or frees device memory (``cudaMalloc``,
    ``cudaFree``: they synchronize the device). Cost: their idle time. Fix: keep the
    caching allocator warm, no ``empty_cache()`` in the loop; allocate once in C++.
    """
    return _idle_draft(
        c, "allocation", ("allocation",), "the GPU waits while device memory is allocated "
        "or freed", "allocating or freeing device memory (cudaMalloc/cudaFree synchronize "
        "the device)", {
            "default": "keep the caching allocator warm: no torch.cuda.empty_cache() in the "
            "loop, the same tensor sizes every step (PYTORCH_CUDA_ALLOC_CONF="
            "expandable_segments:True against fragmentation); with cuDNN use fixed input "
            "sizes and torch.backends.cudnn.benchmark=True so workspaces are reused",
            "app": "allocate device memory once up front or from a stream-ordered pool "
            "(cudaMallocAsync/cudaMemPool) instead of cudaMalloc/cudaFree in the loop",
        },
    )  # fmt: skip


def _calls(n: int) -> str:
    return f"{n:,} call{'s' if n != 1 else ''}"


def initialization(c: Context) -> Draft | None:
    """The trace records a cold start: one-time setup while the GPU idles (:mod:`coldstart`:
    runtime calls of 50 ms or more, slow first launches of kernels while their modules
    load, module loading and library handles, and in such a trace the first allocations
    and the first calls of operators). Cost: their idle time, which a warm process does
    not pay. Fix: profile after a warm-up; load modules eagerly where every run pays it."""
    cost = c.idle_of("initialization")
    if not worth(c, cost):
        return None
    e = c.explained
    m = e.of("initialization") & (e.slice >= 0)
    kind = coldstart.one_time(c.t, causes.launching(c.t))[e.slice[m]]
    by_kind = np.bincount(kind, weights=e.ns[m], minlength=len(coldstart.KINDS))
    order = [k for k in np.argsort(-by_kind).tolist() if k and by_kind[k] > 0]
    items = [
        Item(
            name=coldstart.KINDS[k],
            cost_us=float(by_kind[k]) / 1e3,
            detail=_calls(np.unique(e.slice[m][kind == k]).size),
        )
        for k in order
    ]
    named = ", ".join(coldstart.KINDS[k].split(" (")[0] for k in order[:3]) or "setup"
    draft = _idle_draft(
        c, "initialization", ("initialization",), "the trace records a cold start: one-time "
        "initialization, not the steady state", f"setting up what a warm process already has "
        f"({named})", {
            "default": "profile after a warm-up: run a step (or a request) first, or profile "
            "steady-state steps with torch.profiler.profile(schedule=torch.profiler.schedule("
            "wait=1, warmup=2, active=3)); where every run pays it (serving, short jobs), load "
            "the kernels' modules eagerly (CUDA_MODULE_LOADING=EAGER) and warm up before the "
            "first request",
            "app": "time and profile after a warm-up: create the context early (cudaFree(0) "
            "or cudaSetDevice), run each kernel once (or set CUDA_MODULE_LOADING=EAGER), "
            "allocate buffers up front, and record with nsys --capture-range=cudaProfilerApi "
            "around the steady-state loop",
        },
        assumption="assumes the calls are one-time setup, so a steady-state step pays none "
        "of this idle (a process that runs only this step pays all of it)",
    )  # fmt: skip
    if draft is not None:
        draft.items = items
        launches = np.unique(e.slice[m][kind == coldstart.FIRST_LAUNCH]).size
        draft.figures.append(count("slow first launches of kernels", launches))
    return draft


def host_code(c: Context) -> Draft | None:
    """The GPU waits while the program's own CPU code runs between GPU calls (native
    frames of an Nsight Systems backtrace, no runtime call inside them). Cost: that idle
    time. Fix: do that work while the GPU runs, or on the GPU."""
    return _idle_draft(
        c, "host_code", ("host_code",), "the GPU waits while the program's CPU code runs",
        "running the program's own code between GPU calls", {
            "default": "do the CPU work while the GPU runs: queue the GPU work first and "
            "compute on the CPU meanwhile (or on another thread), move the computation to the "
            "GPU, and sample the CPU side (aiflame record) to see what the code does",
            "app": "overlap the CPU work with the GPU's: launch the kernels and asynchronous "
            "copies first, then do the CPU work while they run (or on another thread, with "
            "streams and events), move it to the GPU, and sample it (nsys profile "
            "--sample=cpu, aiflame record) to make it faster",
        },
    )  # fmt: skip


_DATALOADER = re.compile(r"DataLoader|torch/utils/data/")
# The DataLoader's pin-memory thread takes the batches off the training thread: one fix
# for uploads from pageable memory and for freeing the workers' batches (PIN_MEMORY_FIX_KEY).
PIN_MEMORY_FIX = (
    "pin the batches: DataLoader(pin_memory=True) copies each batch out of the workers' "
    "shared memory into pinned memory on its own thread (which then frees it, not the "
    "training thread) and the pinned batch uploads asynchronously with .to(device, "
    "non_blocking=True); or tensor.pin_memory() for tensors made outside a DataLoader"
)


def host_memory(c: Context) -> Draft | None:
    """The GPU waits while the CPU frees large host memory: after a ``[memory]`` free of a
    megabyte or more (``profile_memory=True``) the launching thread runs no operator until
    the next work (the training loop dropping the last batch; the DataLoader's workers
    passed it in shared memory, which the main thread unmaps). Cost: that idle time.
    Fix: with a DataLoader, ``pin_memory=True`` (its thread frees the shared batches; the
    same fix as ``pageable_copies``, so one finding), else reuse host buffers."""
    if not c.idle_of("host_free"):
        return None
    names = c.t.names
    loader = any(_DATALOADER.search(names[int(i)]) for i in np.unique(c.t.cpu_name).tolist())
    draft = _idle_draft(
        c, "host_memory", ("host_free",), "the GPU waits while the CPU frees large host "
        "memory", "freeing large host tensors (the last batch)", {
            "default": "reuse host buffers instead of making new large CPU tensors every "
            "step (preallocate, pin and copy_ into them), and let the last batch go while "
            "the GPU still runs (del it once the step is queued)",
        },
    )  # fmt: skip
    if draft is not None and loader:
        draft.fix, draft.fix_key = PIN_MEMORY_FIX, PIN_MEMORY_FIX_KEY
    return draft


def unexplained_idle(c: Context) -> Draft | None:
    """The GPU waits while the launching thread has no slice open: the trace does not show
    what the CPU did. Cost: that idle time. Fix: record the CPU side (Python stacks)."""
    return _idle_draft(
        c, "unexplained_idle", ("untraced",), "the GPU waits on CPU work the trace does not "
        "show", "doing something the trace does not record (no operator, Python function or "
        "runtime call running on the launching thread)", {
            "default": "record what the CPU does there: torch.profiler with with_stack=True "
            "(Python frames), or sample the process (aiflame record)",
            "app": "record the CPU side: nsys profile --sample=cpu --cudabacktrace=all, or "
            "aiflame record",
        },
    )  # fmt: skip


def dependency_waits(c: Context) -> Draft | None:
    """Work was queued before the GPU ran dry yet started much later: it waited on a
    dependency (an event of another stream or the host, a peer). Cost: those gaps."""
    return _idle_draft(
        c, "dependency_waits", ("dependency",), "queued work waits on a dependency",
        "done queuing; the queued work waits on an event from another stream, the host or a "
        "peer", {
            "default": "look at what the waiting kernels depend on: cross-stream waits "
            "(cudaStreamWaitEvent, torch.cuda.Stream.wait_stream), events recorded late, or "
            "collectives waiting for another rank",
        },
    )  # fmt: skip


def launch_gaps(c: Context) -> Draft | None:
    """Short gaps between back-to-back kernels (``kernel_wait``): the GPU's own launch
    latency. Cost: those gaps. Fix: fewer, larger kernels; CUDA graphs."""
    return _idle_draft(
        c, "launch_gaps", ("launch_latency",), "short gaps between back-to-back kernels",
        "done queuing; each kernel still waits a few microseconds to start after the "
        "previous one", {
            "default": "fewer, larger kernels (fusion with torch.compile) and CUDA graphs cut "
            "the per-kernel launch latency",
            "app": "fuse small kernels, or launch them as a CUDA graph",
        },
    )  # fmt: skip


RULES = [
    data_loading,
    preprocessing,
    cpu_ops,
    launch_bound,
    host_overhead,
    sync_stalls,
    allocation,
    initialization,
    host_code,
    host_memory,
    unexplained_idle,
    dependency_waits,
    launch_gaps,
]
