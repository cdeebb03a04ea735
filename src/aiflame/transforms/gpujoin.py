"""Put GPU PC samples under the CPU stacks that launched their kernels.

PC-sampling sources (Nsight Compute, CUPTI dumps, rocprofv3) know the kernel, not who
launched it; a trace of the same run (Kineto, Nsight Systems, the eBPF probes) knows the
launch stacks: ``CPU frames ; runtime call ; - ; kernel`` weighted by GPU time. Given both,
each GPU sample stack ``kernel ; lines ; instruction ; stall`` is re-rooted:

* by correlation id, where the samples carry one (label ``correlation``) and the trace
  lists the launch of that id (``meta["gpu_launches"]``): the exact launch stack;
* otherwise by kernel: the same kernel name (or, failing that, the same identifier without
  template and function arguments), its samples spread over its launch stacks in
  proportion to the GPU time of the launches from each stack.

Samples of kernels that no trace launched keep their stacks. ``meta["gpu_samples_join"]``
and the subtitle say which join was used, for how many kernels.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from aiflame.model import Frame, FrameKind, Profile, ProfileBuilder, gpu
from aiflame.model.gpu import LAUNCHES
from aiflame.model.stacks import EMPTY_STACK

DELIMITER = "-"

_SPACES = re.compile(r"\s+")


def kernel_key(name: str) -> str:
    """Kernel names as tools print them differ in spacing and a leading ``void``."""
    return _SPACES.sub(" ", name).strip().removeprefix("void ")


def short_key(name: str) -> str:
    """The kernel's identifier without template and function arguments."""
    key = kernel_key(name)
    depth, out = 0, []
    for ch in key:
        if ch in "<(":
            if depth == 0 and ch == "(":
                break
            depth += 1
            continue
        if ch in ">)":
            depth = max(0, depth - 1)
            continue
        if depth == 0:
            out.append(ch)
    return "".join(out).strip().rsplit(" ", 1)[-1]


def is_sample_profile(p: Profile) -> bool:
    """GPU PC samples whose stacks start at the kernel (no CPU part yet)."""
    if gpu.GPU_SAMPLES.name not in {t.name for t in p.sample_types} or not len(p):
        return False
    roots = {p.stacks.frames_of(int(s))[0] for s in np.unique(p.sample_stack) if s >= 0}
    return bool(roots) and all(p.frames.kind[int(f)] == FrameKind.GPU_KERNEL for f in roots)


class _Launches:
    """Launch stacks per kernel, from the profiles that have them."""

    def __init__(self, profiles: Sequence[Profile]) -> None:
        self.by_name: dict[str, dict[tuple, float]] = defaultdict(lambda: defaultdict(float))
        self.by_short: dict[str, dict[tuple, float]] = defaultdict(lambda: defaultdict(float))
        self.by_corr: dict[int, tuple] = {}
        for p in profiles:
            self._add(p)

    def _add(self, p: Profile) -> None:
        names = [t.name for t in p.sample_types]
        if "gpu-time" not in names or not len(p):
            return
        col = names.index("gpu-time")
        per_stack = np.bincount(
            p.sample_stack + 1, weights=p.values[:, col], minlength=len(p.stacks) + 1
        )[1:]
        kinds = p.frames.kind
        for s in np.flatnonzero(per_stack > 0):
            frames = p.stacks.frames_of(int(s))
            if len(frames) < 2 or kinds[frames[-1]] != FrameKind.GPU_KERNEL:
                continue
            if kinds[frames[-2]] != FrameKind.DELIMITER:
                continue
            prefix = tuple(p.frames.get(f) for f in frames[:-1])  # down to and with '-'
            name = p.frames.name_of(frames[-1])
            self.by_name[kernel_key(name)][prefix] += float(per_stack[s])
            self.by_short[short_key(name)][prefix] += float(per_stack[s])
        table = p.meta.get(LAUNCHES)
        if isinstance(table, dict) and "correlation" in table and "stack" in table:
            delim = Frame(DELIMITER, FrameKind.DELIMITER)
            cpu: dict[int, tuple] = {}
            for corr, s in zip(table["correlation"].tolist(), table["stack"].tolist(), strict=True):
                if s < 0:
                    continue
                found = cpu.get(s)
                if found is None:
                    frames = p.stacks.frames_of(int(s))
                    found = cpu[s] = (*(p.frames.get(f) for f in frames), delim)
                self.by_corr[int(corr)] = found

    def __bool__(self) -> bool:
        return bool(self.by_name or self.by_corr)


def join_gpu_samples(profiles: Sequence[Profile]) -> list[Profile]:
    """``profiles`` with the GPU-sample ones re-rooted under the others' launch stacks."""
    samplers = [i for i, p in enumerate(profiles) if is_sample_profile(p)]
    if not samplers or len(samplers) == len(profiles):
        return list(profiles)
    launches = _Launches([p for i, p in enumerate(profiles) if i not in samplers])
    if not launches:
        return list(profiles)
    out = list(profiles)
    for i in samplers:
        out[i] = _join(profiles[i], launches)
    return out


def _join(p: Profile, launches: _Launches) -> Profile:
    b = ProfileBuilder(list(p.sample_types))
    frame_map = [b.frames.intern_frame(p.frames.get(f)) for f in range(len(p.frames))]
    prefix_stack: dict[tuple, int] = {}

    def rooted(prefix: tuple) -> int:
        sid = prefix_stack.get(prefix)
        if sid is None:
            sid = EMPTY_STACK
            for fr in prefix:
                sid = b.stacks.intern((b.frames.intern_frame(fr),), sid)
            prefix_stack[prefix] = sid
        return sid

    corr_label = _label_values(p, "correlation")
    counts = {"correlation id": 0, "kernel name": 0, "kernel short name": 0, "none": 0}
    kernels_by: dict[str, set[str]] = defaultdict(set)
    rows_stack, rows_weight, rows_sample = [], [], []
    cache: dict[tuple[int, int], list[tuple[int, float]]] = {}
    for s in range(len(p)):
        old = int(p.sample_stack[s])
        lab = int(p.sample_labels[s])
        corr = corr_label.get(lab)
        key = (old, corr if corr in launches.by_corr else -1)
        targets = cache.get(key)
        if targets is None:
            frames = p.stacks.frames_of(old)
            kernel = p.frames.name_of(frames[0])
            how, spread = _launch_stacks(kernel, corr, launches)
            kernels_by[how].add(kernel)
            tail = [frame_map[f] for f in frames]
            targets = []
            for prefix, weight in spread:
                base = rooted(prefix)
                targets.append((b.stacks.intern(tail, base), weight))
            cache[key] = targets
        for sid, w in targets:
            rows_stack.append(sid)
            rows_weight.append(w)
            rows_sample.append(s)
    for how, names in kernels_by.items():
        counts[how] = len(names)
    idx = np.asarray(rows_sample, dtype=np.int64)
    values = p.values[idx] * np.asarray(rows_weight)[:, None]
    label_map = np.asarray([b.labels(dict(ls)) for ls in p.label_sets], dtype=np.int64)
    b.add_many(np.asarray(rows_stack, dtype=np.int64), values, label_map[p.sample_labels[idx]])
    joined = b.build()
    joined.meta = dict(p.meta)
    used = [h for h in ("correlation id", "kernel name", "kernel short name") if counts[h]]
    total = sum(counts.values())
    if used:
        text = "GPU samples joined to launch stacks by " + " and ".join(
            f"{h} ({counts[h]} of {total} kernels)" for h in used
        )
        if "kernel name" in used or "kernel short name" in used:
            text += ", spread in proportion to the GPU time of each launch stack"
    else:
        text = "GPU samples not joined: no kernel of theirs is launched in the trace"
    joined.meta[gpu.META_JOIN] = text
    joined.meta["info:gpu join"] = text
    joined.meta.setdefault("subtitle", text)
    return joined


def _label_values(p: Profile, key: str) -> dict[int, int]:
    out = {}
    for i, ls in enumerate(p.label_sets):
        for k, v in ls:
            if k == key and v.isdigit():
                out[i] = int(v)
    return out


def _launch_stacks(
    kernel: str, corr: int | None, launches: _Launches
) -> tuple[str, list[tuple[tuple, float]]]:
    if corr is not None and corr in launches.by_corr:
        return "correlation id", [(launches.by_corr[corr], 1.0)]
    for how, table, key in (
        ("kernel name", launches.by_name, kernel_key(kernel)),
        ("kernel short name", launches.by_short, short_key(kernel)),
    ):
        stacks = table.get(key)
        if stacks:
            total = sum(stacks.values())
            return how, [(prefix, t / total) for prefix, t in sorted(stacks.items(), key=_order)]
    return "none", [((), 1.0)]


def _order(item: tuple[tuple, float]) -> tuple:
    return tuple(f.name for f in item[0])
