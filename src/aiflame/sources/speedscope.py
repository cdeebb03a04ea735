"""speedscope's own JSON format (https://www.speedscope.app/file-format-schema.json).

Both profile types are read: "sampled" (stacks of shared-frame indices with weights) and
"evented" (open/close events; the time between two events is a sample of the stack that
was open, stamped with its start). Values in time units become nanoseconds, "bytes"
stays bytes, "none" is a count. A file with several profiles becomes one profile whose
samples carry a ``profile`` label with the profile's name; the file's active profile
decides the default metric.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from aiflame.errors import InputError
from aiflame.model import FrameKind, Profile, ProfileBuilder, SampleType
from aiflame.model.stacks import EMPTY_STACK
from aiflame.sources.inputs import Input, decode_head
from aiflame.symbolize.kinds import KindGuesser

FORMAT = "speedscope"
SCHEMA_URL = "https://www.speedscope.app/file-format-schema.json"

# speedscope unit -> (aiflame sample type, factor to its unit)
_UNITS: dict[str, tuple[SampleType, float]] = {
    "nanoseconds": (SampleType("time", "nanoseconds"), 1.0),
    "microseconds": (SampleType("time", "nanoseconds"), 1e3),
    "milliseconds": (SampleType("time", "nanoseconds"), 1e6),
    "seconds": (SampleType("time", "nanoseconds"), 1e9),
    "bytes": (SampleType("bytes", "bytes"), 1.0),
    "none": (SampleType("samples", "count"), 1.0),
}
_TIME_UNITS = ("nanoseconds", "microseconds", "milliseconds", "seconds")


def sniff(head: bytes, path: str) -> bool:
    text = decode_head(head).lstrip("\ufeff \t\r\n")
    if not text.startswith("{"):
        return False
    if "speedscope.app/file-format-schema" in text:
        return True
    # The schema URL is required but may come late; these keys together are speedscope's.
    return '"shared"' in text and '"profiles"' in text and '"frames"' in text


def load(source: Input, **_: object) -> Profile:
    try:
        doc = json.loads(source.read_text())
    except json.JSONDecodeError as e:
        raise InputError(source.path, f"not valid JSON ({e})") from None
    return _Reader(source.path).read(doc)


GENERIC_NAMES = frozenset({"py-spy profile"})  # a document name that names nothing


class _Reader:
    def __init__(self, path: str) -> None:
        self.path = path
        self.guess = KindGuesser()
        self.names: list[str] = []  # of the shared frames

    def fail(self, why: str) -> InputError:
        return InputError(self.path, f"invalid speedscope file: {why}")

    def read(self, doc: Any) -> Profile:
        if not isinstance(doc, dict) or not isinstance(doc.get("profiles"), list):
            raise self.fail("no 'profiles' list")
        shared = doc.get("shared")
        if not isinstance(shared, dict) or not isinstance(shared.get("frames"), list):
            raise self.fail("no 'shared.frames' list")
        profiles = doc["profiles"]
        if not profiles:
            raise self.fail("no profiles")
        builder = ProfileBuilder([])
        frame_ids = [self.frame(builder, f, i) for i, f in enumerate(shared["frames"])]
        self.names = [f["name"] for f in shared["frames"]]
        names = _distinct_names(profiles)
        # Event times become sample timestamps only when every profile has them.
        timed = all(
            isinstance(p, dict) and p.get("type") == "evented" and p.get("unit") in _TIME_UNITS
            for p in profiles
        )
        columns = []
        for i, prof in enumerate(profiles):
            if not isinstance(prof, dict):
                raise self.fail(f"profile {i} is not an object")
            unit = prof.get("unit", "none")
            if unit not in _UNITS:
                raise self.fail(f"profile {names[i]!r} has unknown unit {unit!r}")
            sample_type, factor = _UNITS[unit]
            part = _Part(
                name=names[i],
                column=builder.add_type(sample_type),
                factor=factor,
                labels=builder.labels({"profile": names[i]}) if len(profiles) > 1 else 0,
                timed=timed,
            )
            columns.append(part.column)
            kind = prof.get("type")
            if kind == "sampled":
                self.sampled(builder, prof, frame_ids, part)
            elif kind == "evented":
                self.evented(builder, prof, frame_ids, part)
            else:
                raise self.fail(f"profile {names[i]!r} has unknown type {kind!r}")
        active = doc.get("activeProfileIndex", 0)
        if isinstance(active, int) and 0 <= active < len(columns):
            builder.meta["default_type"] = columns[active]
            builder.meta["active_profile"] = names[active]
        title = doc.get("name") or (names[0] if len(names) == 1 else "")
        # py-spy names every file "py-spy profile": the page's own title, which names the
        # file (and its process, where known), says more
        if isinstance(title, str) and title and title not in GENERIC_NAMES:
            builder.meta["title"] = title
        if isinstance(doc.get("exporter"), str):
            builder.meta["exporter"] = doc["exporter"]
        return builder.build()

    def frame(self, builder: ProfileBuilder, f: Any, i: int) -> int:
        if not isinstance(f, dict) or not isinstance(f.get("name"), str):
            raise self.fail(f"shared frame {i} has no name")
        name, file, line = f["name"], f.get("file"), f.get("line")
        file = file if isinstance(file, str) else ""
        line = line if isinstance(line, int) else 0
        kind = _written_kind(f.get("aiflameKind"))  # aiflame's own export says it
        if kind is None:
            # A Python file says more than the name (py-spy's "f.<locals>.g" looks like C++).
            python_file = file.endswith((".py", ".pyx", ".pyw")) or file.startswith("<frozen ")
            kind = FrameKind.PYTHON if python_file else self.guess(name)
        return builder.frame(name, kind, file, max(line, 0))

    def sampled(
        self, builder: ProfileBuilder, prof: dict, frame_ids: list[int], part: _Part
    ) -> None:
        samples, weights = prof.get("samples"), prof.get("weights")
        name = part.name
        if not isinstance(samples, list) or not isinstance(weights, list):
            raise self.fail(f"sampled profile {name!r} needs 'samples' and 'weights' lists")
        if len(samples) != len(weights):
            raise self.fail(
                f"profile {name!r} has {len(samples)} samples but {len(weights)} weights"
            )
        stack_of: dict[tuple[int, ...], int] = {}
        intern = builder.stacks.intern
        for stack, weight in zip(samples, weights, strict=True):
            if not isinstance(stack, list):
                raise self.fail(f"profile {name!r}: a sample is not a list of frame indices")
            key = tuple(stack)
            sid = stack_of.get(key)
            if sid is None:
                sid = stack_of[key] = intern(self.frames_at(frame_ids, key, name))
            value = part.scale(self.number(weight, name))
            builder.add_value(sid, part.column, value, part.labels)

    def evented(
        self, builder: ProfileBuilder, prof: dict, frame_ids: list[int], part: _Part
    ) -> None:
        events = prof.get("events")
        name = part.name
        if not isinstance(events, list):
            raise self.fail(f"evented profile {name!r} needs an 'events' list")
        open_frames: list[int] = []  # shared-frame indices, root first
        open_stacks: list[int] = []  # stack id of each open prefix
        last = None
        child = builder.stacks.child
        for ev in events:
            if not isinstance(ev, dict) or ev.get("type") not in ("O", "C"):
                raise self.fail(f"profile {name!r}: an event is not an 'O' or 'C' event")
            at = self.number(ev.get("at"), name)
            index = ev.get("frame")
            self.frames_at(frame_ids, (index,), name)  # an index of a frame, or one clear line
            assert isinstance(index, int)
            if last is not None and at < last:
                raise self.fail(f"profile {name!r}: events go back in time ({at:g} after {last:g})")
            if open_stacks and last is not None and at > last:
                # The stack open since the previous event ran until this one.
                row = [0.0] * len(builder.sample_types)
                row[part.column] = part.scale(at - last)
                ts = round(last * part.factor) if part.timed else None
                builder.add(open_stacks[-1], row, part.labels, ts)
            last = at
            if ev["type"] == "O":
                fid = frame_ids[index]
                parent = open_stacks[-1] if open_stacks else EMPTY_STACK
                open_stacks.append(child(parent, fid))
                open_frames.append(index)
            else:
                if not open_frames or open_frames[-1] != index:
                    top = f'"{self.names[open_frames[-1]]}"' if open_frames else "nothing"
                    raise self.fail(
                        f'profile {name!r}: closing frame "{self.names[index]}" at {at:g}'
                        f" while {top} is open"
                    )
                open_frames.pop()
                open_stacks.pop()
        if open_frames:
            raise self.fail(f"profile {name!r}: {len(open_frames)} frames are never closed")

    def frames_at(self, frame_ids: list[int], indices: tuple, name: str) -> list[int]:
        n = len(frame_ids)
        for i in indices:
            if type(i) is not int or not 0 <= i < n:
                raise self.fail(f"profile {name!r} refers to frame {i!r}, which does not exist")
        return [frame_ids[i] for i in indices]

    def number(self, x: Any, name: str) -> float:
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
            raise self.fail(f"profile {name!r} has a weight or time that is not a number: {x!r}")
        return float(x)


@dataclass(frozen=True)
class _Part:
    """Where one speedscope profile's samples go in the merged profile."""

    name: str
    column: int
    factor: float  # to nanoseconds for time units, else 1
    labels: int
    timed: bool  # stamp samples with their start time

    def scale(self, x: float) -> float:
        # Times become whole nanoseconds: 0.005 s is 5000000 ns, not 5000000.000000001.
        return float(round(x * self.factor)) if self.factor != 1 else x


def _distinct_names(profiles: list) -> list[str]:
    names: list[str] = []
    for i, p in enumerate(profiles):
        name = p.get("name") if isinstance(p, dict) else None
        name = name if isinstance(name, str) and name else f"profile {i + 1}"
        names.append(name if name not in names else f"{name} #{i + 1}")
    return names


def _written_kind(slug: object) -> FrameKind | None:
    """The kind aiflame wrote beside a frame (``"aiflameKind": "gpu-kernel"``), if valid."""
    if not isinstance(slug, str):
        return None
    kind = FrameKind.from_slug(slug)
    return None if kind == FrameKind.UNKNOWN else kind  # unknown: guessed from the name
