"""Parse the text dump of pprof's ``Profile.String()`` (``go tool pprof -raw``).

The dump lists samples as values and location ids, then every location (address, mapping,
and one ``name file:line[:column] s=start`` entry per line, innermost first), then the
mappings. :func:`resolved_samples` turns it into stacks of frames, so that a profile can be
compared with the dump whatever ids a writer chose.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

_LOCATION = re.compile(r"^\s*(\d+): (0x[0-9a-f]+) (?:M=(\d+) )?(?:\[F\] )?(.*)$")
_LINE = re.compile(
    r"^(?P<name>.*) (?P<file>\S*?):(?P<line>-?\d+)(?::(?P<col>-?\d+))? s=(?P<start>-?\d+)"
    r"(?:\((?P<system>.*)\))?$"
)
_MAPPING = re.compile(r"^(\d+): (0x[0-9a-f]+)/(0x[0-9a-f]+)/(0x[0-9a-f]+) ?(\S*)")
_LABEL = re.compile(r"(\S+?):\[(.*?)\]")


@dataclass
class Dump:
    period_type: tuple[str, str] | None = None
    period: int = 0
    time_line: str = ""
    sample_types: list[tuple[str, str]] = field(default_factory=list)
    default_index: int | None = None  # the type marked [dflt]
    samples: list[tuple[list[int], list[int], dict[str, str]]] = field(default_factory=list)
    locations: dict[int, tuple[int, int, list[tuple[str, str, int]]]] = field(default_factory=dict)
    mappings: dict[int, str] = field(default_factory=dict)


def parse(text: str) -> Dump:
    d = Dump()
    section = "head"
    last_loc: int | None = None
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("PeriodType: "):
            words = line.split()[1:3]
            d.period_type = (words[0], words[1]) if len(words) == 2 else ("", "")
        elif line.startswith("Period: "):
            d.period = int(line.split()[1])
        elif line.startswith("Time: "):
            d.time_line = line[6:]
        elif line == "Samples:":
            section = "types"
        elif line == "Locations":
            section = "locations"
        elif line == "Mappings":
            section = "mappings"
        elif section == "types":
            for j, word in enumerate(line.split()):
                if word.endswith("[dflt]"):
                    d.default_index = j
                    word = word[: -len("[dflt]")]
                kind, unit = word.split("/")
                d.sample_types.append((kind, unit))
            section = "samples"
        elif section == "samples":
            if line.startswith(" " * 16) and not re.match(r"^\s+-?\d+", line):
                labels = d.samples[-1][2]
                for key, values in _LABEL.findall(line):
                    # Several values of one key: aiflame joins them with ",". (Numeric
                    # labels with units, "[4096 bytes]", do not occur in these dumps.)
                    labels[key] = ",".join(values.split())
            else:
                values, _, ids = line.partition(":")
                d.samples.append(
                    ([int(v) for v in values.split()], [int(x) for x in ids.split()], {})
                )
        elif section == "locations":
            m = _LOCATION.match(line)
            if m and not line.startswith(" " * 13):
                last_loc = int(m.group(1))
                entries = [_line(m.group(4))] if m.group(4).strip() else []
                d.locations[last_loc] = (int(m.group(2), 16), int(m.group(3) or 0), entries)
            else:
                assert last_loc is not None, f"line {i + 1}: continuation before a location"
                d.locations[last_loc][2].append(_line(line.strip()))
        elif section == "mappings":
            m = _MAPPING.match(line)
            if m:
                d.mappings[int(m.group(1))] = m.group(5)
    return d


def _line(text: str) -> tuple[str, str, int]:
    m = _LINE.match(text)
    assert m, f"cannot parse location line {text!r}"
    return m.group("name"), m.group("file"), int(m.group("line"))


Frame = tuple[str, str, int, str, int]  # name, file, line, module, address


def resolved_samples(d: Dump) -> dict[tuple[tuple[Frame, ...], tuple], list[int]]:
    """(root-first frames, sorted labels) -> summed values; all-zero entries dropped."""
    out: dict[tuple[tuple[Frame, ...], tuple], list[int]] = defaultdict(
        lambda: [0] * len(d.sample_types)
    )
    for values, ids, labels in d.samples:
        frames: list[Frame] = []
        for loc in reversed(ids):  # the dump lists the leaf first
            address, mapping, entries = d.locations[loc]
            module = d.mappings.get(mapping, "")
            if not entries:
                frames.append((f"0x{address:x}", "", 0, module, address))
            for name, file, line in reversed(entries):  # innermost first in the dump
                frames.append((name, file, line, module, address))
        key = (tuple(frames), tuple(sorted(labels.items())))
        acc = out[key]
        for j, v in enumerate(values):
            acc[j] += v
    return {k: v for k, v in out.items() if any(v)}
