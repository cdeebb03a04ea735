"""A timeline: what ran when, as slices on tracks, and flows that link two slices.

The flame graph's :class:`~aiflame.model.Profile` keeps how much each stack cost; a
timeline keeps the order and overlap in time that traces carry (PyTorch profiler, Nsight
Systems, Chrome traces), for exporters such as the Chrome/Perfetto trace writer. Slices are
columns (numpy), as in a profile: a trace of millions of events stays compact.

- A :class:`Track` is one thread of a process (a CPU thread, or a GPU stream of a device),
  named as the trace names it.
- A slice has a track, a start and a duration (integer nanoseconds on the trace's clock), a
  name and a category (ids into ``strings``) and optional arguments (an id into ``args``,
  -1 for none). Slices of one track nest by time, except *async* ones (``slice_async``),
  which may overlap anything (NVTX start/end ranges) and are drawn on a track of their own.
- A flow links slice ``flow_from[i]`` to slice ``flow_to[i]``: a CPU launch to the GPU
  work it started.
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Track:
    pid: int | str  # process id as the trace writes it (Kineto: the device for GPU work)
    tid: int | str  # thread id (GPU work: the stream)
    process: str = ""  # process name, "" when the trace names none
    thread: str = ""  # thread name
    labels: str = ""  # process labels (Kineto: "GPU 0")
    process_sort: int | None = None  # the order of processes and threads in a viewer
    thread_sort: int | None = None


@dataclass(repr=False)
class Timeline:
    tracks: list[Track]
    strings: list[str]
    slice_track: np.ndarray  # int32, index into tracks
    slice_start: np.ndarray  # int64 ns
    slice_dur: np.ndarray  # int64 ns
    slice_name: np.ndarray  # int32, index into strings
    slice_cat: np.ndarray  # int32, index into strings
    slice_args: np.ndarray  # int32, index into args, -1: none
    slice_async: np.ndarray  # bool
    args: list[dict[str, Any]]
    flow_from: np.ndarray  # int64 slice index
    flow_to: np.ndarray  # int64 slice index
    flow_cat: str = "flow"  # the flows' category (Kineto: "ac2g")
    meta: dict[str, object] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.slice_start.shape[0])

    def __repr__(self) -> str:
        return (
            f"<Timeline: {len(self):,} slices on {len(self.tracks):,} tracks, "
            f"{self.flow_from.shape[0]:,} flows>"
        )


class TimelineBuilder:
    """Collects tracks, slices and flows cheaply, then freezes a :class:`Timeline`."""

    def __init__(self) -> None:
        self.tracks: list[Track] = []
        self._track_ids: dict[tuple[Any, Any], int] = {}
        self.strings: list[str] = []
        self._string_ids: dict[str, int] = {}
        self.args: list[dict[str, Any]] = []
        self._cols: dict[str, array] = {
            "track": array("i"),
            "start": array("q"),
            "dur": array("q"),
            "name": array("i"),
            "cat": array("i"),
            "args": array("i"),
            "async": array("b"),
        }
        self._flow_from = array("q")
        self._flow_to = array("q")
        self.flow_cat = "flow"
        self.meta: dict[str, object] = {}

    def string(self, s: str) -> int:
        i = self._string_ids.get(s)
        if i is None:
            i = self._string_ids[s] = len(self.strings)
            self.strings.append(s)
        return i

    def track(
        self, pid: int | str, tid: int | str, process: str = "", thread: str = "", **info: Any
    ) -> int:
        """Id of the track (pid, tid); its names (and the other :class:`Track` fields in
        ``info``) are those given first."""
        key = (pid, tid)
        i = self._track_ids.get(key)
        if i is None:
            i = self._track_ids[key] = len(self.tracks)
            self.tracks.append(Track(pid, tid, process, thread, **info))
        return i

    def add_args(self, args: Mapping[str, Any]) -> int:
        self.args.append(dict(args))
        return len(self.args) - 1

    def add(
        self,
        track: int,
        start: int,
        dur: int,
        name: str,
        cat: str = "",
        args: Mapping[str, Any] | None = None,
        is_async: bool = False,
    ) -> int:
        """Add one slice; returns its index."""
        c = self._cols
        c["track"].append(track)
        c["start"].append(start)
        c["dur"].append(max(dur, 0))
        c["name"].append(self.string(name))
        c["cat"].append(self.string(cat))
        c["args"].append(self.add_args(args) if args else -1)
        c["async"].append(is_async)
        return len(c["start"]) - 1

    def add_many(
        self,
        track: np.ndarray,
        start: np.ndarray,
        dur: np.ndarray,
        name: np.ndarray,
        cat: np.ndarray,
        args: np.ndarray | None = None,
    ) -> int:
        """Add slices in bulk (``name``/``cat``: ids from :meth:`string`, ``args``: ids from
        :meth:`add_args` or -1); returns the index of the first one."""
        first = len(self._cols["start"])
        n = int(start.shape[0])
        columns = {
            "track": track,
            "start": start,
            "dur": np.maximum(dur, 0),
            "name": name,
            "cat": cat,
            "args": np.full(n, -1) if args is None else args,
            "async": np.zeros(n, dtype=np.int8),
        }
        for key, values in columns.items():
            col = self._cols[key]
            dtype = {"q": np.int64, "i": np.int32, "b": np.int8}[col.typecode]
            col.frombytes(np.ascontiguousarray(values, dtype=dtype).tobytes())
        return first

    def set_async(self, first: int, flags: np.ndarray) -> None:
        """Mark slices ``first``, ``first + 1``... async where ``flags`` is true."""
        col = self._cols["async"]
        for i in np.nonzero(flags)[0].tolist():
            col[first + i] = 1

    def link(
        self, sources: Sequence[int] | np.ndarray, targets: Sequence[int] | np.ndarray
    ) -> None:
        """Flows from slices ``sources[i]`` to slices ``targets[i]``."""
        self._flow_from.frombytes(np.asarray(sources, dtype=np.int64).tobytes())
        self._flow_to.frombytes(np.asarray(targets, dtype=np.int64).tobytes())

    def __len__(self) -> int:
        return len(self._cols["start"])

    def build(self) -> Timeline:
        def col(key: str, dtype: type) -> np.ndarray:
            a = self._cols[key]
            return np.frombuffer(a, dtype=dtype).copy() if len(a) else np.zeros(0, dtype)

        return Timeline(
            tracks=list(self.tracks),
            strings=list(self.strings),
            slice_track=col("track", np.int32),
            slice_start=col("start", np.int64),
            slice_dur=col("dur", np.int64),
            slice_name=col("name", np.int32),
            slice_cat=col("cat", np.int32),
            slice_args=col("args", np.int32),
            slice_async=col("async", np.int8).astype(bool),
            args=list(self.args),
            flow_from=np.frombuffer(self._flow_from, dtype=np.int64).copy(),
            flow_to=np.frombuffer(self._flow_to, dtype=np.int64).copy(),
            flow_cat=self.flow_cat,
            meta=dict(self.meta),
        )
