"""Samples of a Kineto trace: self time of CPU slices per stack, GPU activity per launch stack.

Samples are aggregated per distinct (stack, labels) before they reach the profile, so a
trace of millions of events gives a profile the size of its distinct stacks.
"""

from __future__ import annotations

import numpy as np

from aiflame.model import FrameKind, ProfileBuilder, SampleType
from aiflame.model.stacks import EMPTY_STACK
from aiflame.sources.gpu_idle_samples import GPU_IDLE
from aiflame.sources.kineto.events import Columns
from aiflame.transforms import correlate

SAMPLE_TYPES = (
    SampleType("gpu-time", "nanoseconds"),
    SampleType("kernel-count", "count"),
    SampleType("wall-time", "nanoseconds"),  # of CPU slices: wall clock, not CPU
    GPU_IDLE,  # the GPU's idle time on the CPU stacks that kept it waiting
)
GPU_TIME, KERNEL_COUNT, WALL_TIME, GPU_IDLE_TIME = 0, 1, 2, 3
UNLINKED_ROOT = "[launch not in trace]"
DELIMITER = "-"
_DENSE_KEYS = 1 << 22  # (stack, labels) pairs counted in a table up to this many


class Labels:
    """Label-set ids: per CPU thread (pid, tid, rank) and per GPU (device, stream) x thread."""

    def __init__(self, builder: ProfileBuilder, cols: Columns, rank: str | None) -> None:
        self.b, self.cols, self.rank = builder, cols, rank
        self._cache: dict[tuple[int, int, int], int] = {}

    def ids(self, thread: np.ndarray, device: np.ndarray, stream: np.ndarray) -> np.ndarray:
        """Label ids for rows of (launch thread or -1, device name id or -1, stream or -1)."""
        uniq, inverse = unique_rows(thread, device, stream)
        out = np.empty(uniq.shape[0], dtype=np.int64)
        names, threads = self.cols.names, self.cols.threads
        for k, (t, d, s) in enumerate(uniq.tolist()):
            labels: dict[str, str] = {}
            if self.rank is not None:
                labels["rank"] = self.rank
            if t >= 0:
                labels["pid"], labels["tid"] = (str(x) for x in threads[t])
            if d >= 0:
                labels["device"] = names[d]
            if s >= 0:
                labels["stream"] = names[s]
            out[k] = self.b.labels(labels)
        return out[inverse]


def unique_rows(*columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct rows of int columns (values >= -1) and each row's index among them.

    Packs the columns into one int64 key when they fit (much faster than ``axis=0``).
    """
    spans = [int(c.max()) + 2 if c.size else 1 for c in columns]
    if np.prod([float(x) for x in spans]) < 2.0**62:
        key = np.zeros(columns[0].shape[0], dtype=np.int64)
        for c, span in zip(columns, spans, strict=True):
            key = key * span + (c + 1)
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        rows = np.stack([c[first] for c in columns], axis=1)
        return rows, inverse.reshape(-1)
    rows, inverse = np.unique(np.stack(columns, axis=1), axis=0, return_inverse=True)
    return rows, inverse.reshape(-1)


def _add_aggregated(
    builder: ProfileBuilder,
    stacks: np.ndarray,
    labels: np.ndarray,
    columns: dict[int, np.ndarray | None],
) -> None:
    """Add one sample per distinct (stack, labels); ``columns``: sample-type column ->
    per-row weights summed into it (None: count the rows)."""
    if stacks.size == 0:
        return
    n_labels = int(labels.max()) + 1
    size = (int(stacks.max()) + 1) * n_labels
    if stacks.min() >= 0 and size <= _DENSE_KEYS:
        # Few distinct (stack, labels) keys: count them in a dense table, no sort.
        key = stacks * n_labels + labels
        present = np.nonzero(np.bincount(key, minlength=size))[0]
        sums = np.zeros((present.shape[0], len(SAMPLE_TYPES)))
        for c, weights in columns.items():
            sums[:, c] = np.bincount(key, weights=weights, minlength=size)[present]
        builder.add_many(present // n_labels, sums, present % n_labels)
        return
    uniq, inverse = unique_rows(stacks, labels)
    sums = np.zeros((uniq.shape[0], len(SAMPLE_TYPES)))
    for c, weights in columns.items():
        sums[:, c] = np.bincount(inverse, weights=weights, minlength=uniq.shape[0])
    builder.add_many(uniq[:, 0], sums, uniq[:, 1])


def add_cpu_samples(
    builder: ProfileBuilder,
    cols: Columns,
    nesting: correlate.Nesting,
    stack_of: np.ndarray,
    labels: Labels,
) -> None:
    self_ns = correlate.self_times(cols.cpu_ts, nesting.dur, nesting.parent)
    keep = np.nonzero(self_ns > 0)[0]
    thread = cols.cpu_thread[keep]
    # Label ids by thread (a lookup table), not by slice: no sort over millions of rows.
    threads = np.nonzero(np.bincount(thread, minlength=len(cols.threads)))[0]
    none = np.full(threads.shape[0], -1, dtype=np.int64)
    per_thread = np.zeros(len(cols.threads), dtype=np.int64)
    per_thread[threads] = labels.ids(threads, none, none)
    lab = per_thread[thread]
    weights = self_ns[keep].astype(np.float64)
    del self_ns
    _add_aggregated(builder, stack_of[keep], lab, {WALL_TIME: weights})


def add_gpu_samples(
    builder: ProfileBuilder,
    kernel: np.ndarray,
    cols: Columns,
    launch: np.ndarray,
    stack_of: np.ndarray,
    labels: Labels,
    graft: np.ndarray | None = None,
) -> np.ndarray:
    """One sample per GPU activity (aggregated); returns the mask of unlinked ones.

    ``kernel`` holds the frame id of each activity, ``launch`` the CPU slice that launched
    it (-1: none), ``stack_of`` the stack id of each CPU slice; ``graft``, per activity, a
    stack to hang it under instead (-1: its launch's), e.g. a replayed graph's capture.
    """
    n = int(cols.gpu_ts.shape[0])
    if n == 0:
        return np.zeros(0, dtype=bool)
    unlinked = launch < 0
    root = EMPTY_STACK
    if unlinked.any():
        root = builder.stacks.child(EMPTY_STACK, builder.frame(UNLINKED_ROOT, FrameKind.LABEL))
    base = np.where(unlinked, root, stack_of[np.maximum(launch, 0)] if stack_of.size else root)
    if graft is not None:
        base = np.where(graft >= 0, graft, base)
    delim = builder.frame(DELIMITER, FrameKind.DELIMITER)
    pairs, inverse = unique_rows(base, kernel)
    child = builder.stacks.child
    leaves = [child(child(b, delim), k) for b, k in pairs.tolist()]
    leaf = np.asarray(leaves, dtype=np.int64)[inverse]
    thread = np.where(unlinked, -1, cols.cpu_thread[np.maximum(launch, 0)] if stack_of.size else -1)
    lab = labels.ids(thread, cols.gpu_device, cols.gpu_stream)
    weights = cols.gpu_dur.astype(np.float64)
    _add_aggregated(builder, leaf, lab, {GPU_TIME: weights, KERNEL_COUNT: None})
    return unlinked
