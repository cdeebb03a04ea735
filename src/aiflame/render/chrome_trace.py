"""A timeline as a Chrome / Perfetto trace: the Trace Event Format's JSON object form.

What Perfetto (ui.perfetto.dev, trace_processor), chrome://tracing, HTA and TraceLens read:

- ``M`` metadata events name each process and thread (``process_name``, ``thread_name``,
  ``process_labels``, ``*_sort_index``);
- every slice is a complete event (``ph: "X"``, ``ts``/``dur`` in microseconds, written with
  three decimals so nanoseconds survive), with its category and ``args``; an async slice
  (overlapping its thread's others) is a ``b``/``e`` pair with an id of its own;
- every flow is the pair Kineto writes for a launch and its GPU work: ``ph: "s"`` at the
  launching slice's start on its thread and ``ph: "f"`` with ``bp: "e"`` (bind to the
  enclosing slice) at the target slice's start, both with the flow's id and category.

Events are written in time order, in chunks, so a large trace is never one big string.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from aiflame.model.timeline import Timeline, Track
from aiflame.version import __version__

CHUNK_EVENTS = 20_000  # events per chunk of output


def us(ns: int) -> str:
    """Nanoseconds as a JSON number of microseconds, exact to the nanosecond."""
    sign = "-" if ns < 0 else ""
    whole, frac = divmod(abs(ns), 1000)
    return f"{sign}{whole}.{frac:03d}"


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _metadata(tracks: list[Track]) -> list[str]:
    out: list[str] = []
    processes: set[Any] = set()
    for t in tracks:
        pid = _json(t.pid)
        if t.pid not in processes:
            processes.add(t.pid)
            for name, key, value in (
                ("process_name", "name", t.process),
                ("process_labels", "labels", t.labels),
                ("process_sort_index", "sort_index", t.process_sort),
            ):
                if value not in ("", None):
                    event = {"ph": "M", "name": name, "pid": t.pid, "tid": 0, "args": {key: value}}
                    out.append(_json(event))
        for name, key, value in (
            ("thread_name", "name", t.thread),
            ("thread_sort_index", "sort_index", t.thread_sort),
        ):
            if value not in ("", None):
                args = _json({key: value})
                out.append(
                    f'{{"ph":"M","name":"{name}","pid":{pid},"tid":{_json(t.tid)},"args":{args}}}'
                )
    return out


def events(timeline: Timeline) -> Iterator[str]:
    """Every event of the trace as one JSON object text, metadata first, then by time."""
    yield from _metadata(timeline.tracks)
    strings = [_json(s) for s in timeline.strings]
    places = [f'"pid":{_json(t.pid)},"tid":{_json(t.tid)}' for t in timeline.tracks]
    args = [_json(a) for a in timeline.args]
    start, dur = timeline.slice_start, timeline.slice_dur
    # One time order for slices, async begin/ends and both ends of flows.
    n, nf = len(timeline), int(timeline.flow_from.shape[0])
    async_ids = np.nonzero(timeline.slice_async)[0]
    times = np.concatenate(
        [
            start,
            start[async_ids] + dur[async_ids],
            start[timeline.flow_from],
            start[timeline.flow_to],
        ]
    )
    # What each entry is: 0 a slice (or an async begin), 1 an async end, 2 / 3 a flow's ends.
    what = np.concatenate(
        [np.zeros(n, np.int8), np.ones(async_ids.size, np.int8), np.full(nf, 2, np.int8),
         np.full(nf, 3, np.int8)]
    )  # fmt: skip
    index = np.concatenate([np.arange(n), async_ids, np.arange(nf), np.arange(nf)])
    # At one time: longer slices first (they enclose), then as the timeline lists them.
    length = np.concatenate([dur, np.zeros(async_ids.size + 2 * nf, np.int64)])
    order = np.lexsort((index, what, -length, times))
    track, name, cat = timeline.slice_track, timeline.slice_name, timeline.slice_cat
    slice_args, is_async = timeline.slice_args, timeline.slice_async
    flow_cat = _json(timeline.flow_cat)
    for lo in range(0, order.size, CHUNK_EVENTS):
        sel = order[lo : lo + CHUNK_EVENTS]
        for w, i, t in zip(
            what[sel].tolist(), index[sel].tolist(), times[sel].tolist(), strict=True
        ):
            if w >= 2:
                s = int(timeline.flow_from[i] if w == 2 else timeline.flow_to[i])
                ph = '"s"' if w == 2 else '"f","bp":"e"'
                yield (
                    f'{{"ph":{ph},"id":{i},"cat":{flow_cat},"name":{flow_cat},'
                    f'{places[track[s]]},"ts":{us(t)}}}'
                )
                continue
            a = int(slice_args[i])
            tail = f',"args":{args[a]}' if a >= 0 else ""
            head = f'"cat":{strings[cat[i]]},"name":{strings[name[i]]},{places[track[i]]}'
            if not is_async[i]:
                yield f'{{"ph":"X",{head},"ts":{us(t)},"dur":{us(int(dur[i]))}{tail}}}'
            elif w == 0:
                yield f'{{"ph":"b",{head},"id":{i},"ts":{us(t)}{tail}}}'
            else:
                yield f'{{"ph":"e",{head},"id":{i},"ts":{us(t)}}}'


def render_chrome_trace(timeline: Timeline, compress: bool = False) -> Iterator[bytes]:
    """The trace as chunks of UTF-8 JSON (gzip-compressed when ``compress``)."""
    top: dict[str, Any] = {}
    trace = timeline.meta.get("trace")
    if isinstance(trace, dict):
        top.update(trace)
    top.setdefault("displayTimeUnit", "ms")
    top["otherData"] = {**dict(top.get("otherData") or {}), "generator": f"aiflame {__version__}"}
    tail = "".join(f",{_json(k)}:{_json(v)}" for k, v in top.items())

    def text() -> Iterator[str]:
        yield '{"traceEvents":[\n'
        batch: list[str] = []
        first = True
        for event in events(timeline):
            batch.append(event)
            if len(batch) >= CHUNK_EVENTS:
                yield ("" if first else ",\n") + ",\n".join(batch)
                first, batch = False, []
        if batch:
            yield ("" if first else ",\n") + ",\n".join(batch)
        yield "\n]" + tail + "}\n"

    if not compress:
        for part in text():
            yield part.encode("utf-8", "replace")  # a lone surrogate (JSON escape): "?"
        return
    gz = zlib.compressobj(6, zlib.DEFLATED, 31)  # gzip framing, no timestamp: reproducible
    for part in text():
        chunk = gz.compress(part.encode("utf-8", "replace"))
        if chunk:
            yield chunk
    yield gz.flush()
