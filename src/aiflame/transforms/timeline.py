"""Pure functions over timelines: a timed profile's samples as slices, and several
timelines in one."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from aiflame.errors import AiflameError
from aiflame.model import FrameKind, Profile
from aiflame.model.timeline import Timeline, TimelineBuilder

# Labels that name the thread a sample ran on, in the order they make a track.
_THREAD_LABELS = ("pid", "tid")


def sample_timeline(profile: Profile, metric: str | None = None) -> Timeline:
    """The slices that a profile with sample times describes, one track per thread.

    A sample at ``t`` weighted ``v`` of a time metric covers ``[t, t + v)``; for a count
    (sampled stacks) it lasts until the thread's next sample. Each frame of its stack is
    open over it; a frame open in consecutive samples that follow each other without a gap
    is one slice, so the slices nest as the calls did. Category: the frame's kind.
    """
    if profile.timestamps is None:
        raise AiflameError("this profile has no sample times: no timeline to write")
    try:
        col = profile.type_index(metric)
    except KeyError as e:  # a metric the profile lacks: the message names what it has
        raise AiflameError(str(e.args[0])) from None
    sample_type = profile.sample_types[col]
    if sample_type.unit not in ("nanoseconds", "count"):
        raise AiflameError(
            f"{sample_type.name} is measured in {sample_type.unit}, not time: its samples are "
            "not slices of a timeline"
        )
    values = profile.values[:, col]
    keep = np.nonzero(values > 0)[0]
    b = TimelineBuilder()
    kinds = [FrameKind(int(k)).slug for k in profile.frames.kind]
    cats = [b.string(k) for k in kinds]
    frame_names = [b.string(profile.strings.strings[n]) for n in profile.frames.name]
    track_of = _tracks(b, profile)[profile.sample_labels[keep]]
    start = profile.timestamps[keep]
    order = np.lexsort((start, track_of))
    timed = sample_type.unit == "nanoseconds"
    for t in np.unique(track_of).tolist():
        rows = order[track_of[order] == t]
        begin = start[rows]
        if timed:
            end = begin + np.rint(values[keep][rows]).astype(np.int64)
        else:
            gaps = np.diff(begin)
            last = int(np.median(gaps)) if gaps.size else 1
            end = np.append(begin[1:], begin[-1] + max(last, 1))
        _slices(b, profile, t, keep[rows], begin, end, frame_names, cats)
    b.meta["format"] = str(profile.meta.get("format", ""))
    return b.build()


def _tracks(b: TimelineBuilder, profile: Profile) -> np.ndarray:
    """Track id of every label set: its thread (pid, tid) when labelled, else one per
    distinct set (a speedscope file's profiles)."""
    out = np.zeros(len(profile.label_sets), dtype=np.int64)
    for i, label_set in enumerate(profile.label_sets):
        labels = dict(label_set)
        if all(k in labels for k in _THREAD_LABELS):
            out[i] = b.track(
                _id(labels["pid"]), _id(labels["tid"]), thread=labels.get("thread", "")
            )
        else:
            name = labels.get("profile") or labels.get("thread") or ""
            out[i] = b.track(1, i, process=str(profile.meta.get("title", "") or ""), thread=name)
    return out


def _id(value: str) -> int | str:
    return int(value) if value.lstrip("-").isdigit() else value


def _slices(
    b: TimelineBuilder,
    profile: Profile,
    track: int,
    samples: np.ndarray,
    begin: np.ndarray,
    end: np.ndarray,
    names: list[int],
    cats: list[int],
) -> None:
    """Slices of one track's samples (in time order): open frames carried while contiguous."""
    frames_of = profile.stacks.frames_of
    stacks = profile.sample_stack[samples].tolist()
    # Slices in the order they open (an enclosing slice before what it encloses, which
    # viewers rely on when both start and end together); each ends when it closes.
    out: list[list[int]] = []  # [frame, start, end]
    opened: list[int] = []  # indices into out of the open frames, outermost first
    last_end = None
    for stack, t0, t1 in zip(stacks, begin.tolist(), end.tolist(), strict=True):
        frames = list(frames_of(stack)) if stack >= 0 else []
        common = 0
        if last_end is None or t0 <= last_end:  # no gap: frames still open carry on
            for i, f in zip(opened, frames, strict=False):
                if out[i][0] != f:
                    break
                common += 1
        close_at = last_end if last_end is not None else t0
        while len(opened) > common:
            out[opened.pop()][2] = close_at
        for f in frames[common:]:
            opened.append(len(out))
            out.append([f, t0, t0])
        last_end = max(t1, t0)
    for i in opened:
        out[i][2] = int(last_end or 0)
    if not out:
        return
    frame = np.asarray([f for f, _, _ in out], dtype=np.int64)
    s = np.asarray([a for _, a, _ in out], dtype=np.int64)
    e = np.asarray([z for _, _, z in out], dtype=np.int64)
    b.add_many(
        np.full(frame.size, track, dtype=np.int32),
        s,
        e - s,
        np.asarray(names, dtype=np.int32)[frame],
        np.asarray(cats, dtype=np.int32)[frame],
    )


def merge_timelines(timelines: Sequence[Timeline], names: Sequence[str]) -> Timeline:
    """One timeline of several inputs (one per rank, say). A process id already used by an
    earlier input is moved to one of its own (input number x 10,000,000 + pid), so two
    inputs' tracks never mix; with several inputs each process name starts with its
    input's name (``rank0.json: python3``)."""
    if len(timelines) == 1:
        return timelines[0]
    b = TimelineBuilder()
    b.flow_cat = timelines[0].flow_cat
    used: set[object] = set()
    for k, (tl, label) in enumerate(zip(timelines, names, strict=True)):
        pids = {t.pid for t in tl.tracks}
        moved = {p: (k * 10_000_000 + p if isinstance(p, int) else f"{label}: {p}")
                 for p in pids if p in used}  # fmt: skip
        used.update(moved.get(p, p) for p in pids)
        track_ids = np.asarray(
            [
                b.track(
                    moved.get(t.pid, t.pid),
                    t.tid,
                    f"{label}: {t.process}" if t.process else label,
                    t.thread,
                    labels=t.labels,
                    process_sort=t.process_sort,
                    thread_sort=t.thread_sort,
                )
                for t in tl.tracks
            ]
            or [0],
            dtype=np.int32,
        )
        strings = np.asarray([b.string(s) for s in tl.strings] or [0], dtype=np.int32)
        arg_ids = np.asarray([b.add_args(a) for a in tl.args] + [-1], dtype=np.int32)
        first = b.add_many(
            track_ids[tl.slice_track],
            tl.slice_start,
            tl.slice_dur,
            strings[tl.slice_name],
            strings[tl.slice_cat],
            arg_ids[tl.slice_args],  # -1 stays -1: the extra last entry
        )
        b.set_async(first, tl.slice_async)
        b.link(first + tl.flow_from, first + tl.flow_to)
        trace = tl.meta.get("trace")
        if k == 0 and isinstance(trace, dict):
            b.meta["trace"] = dict(trace)
    return b.build()
