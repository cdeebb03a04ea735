"""The stack frame filter of Grafana's Profiles Drilldown app: only the stacks that contain
every included function (by name, or a frame matching each included regex) and no excluded
one, as Pyroscope's ``FrameMatcher`` (pkg/phlaredb/symdb) keeps them.

It is ``StackTraceSelector.frame_filter`` (field 3: ``include_function_names`` 1,
``exclude_function_names`` 2, ``include_function_name_regexes`` 3,
``exclude_function_name_regexes`` 4), newer than the Pyroscope protos this server is built
from: it is read from the message's unknown fields (protobuf) or from the JSON body.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from google.protobuf import unknown_fields
from google.protobuf.message import Message

from aiflame.server.errors import BadRequest
from aiflame.server.query.flame import Merged, Symbols

FRAME_FILTER_FIELD = 3
MAX_PATTERNS = 64
MAX_PATTERN_BYTES = 1024
_KEYS = (
    ("includeFunctionNames", "include_function_names"),
    ("excludeFunctionNames", "exclude_function_names"),
    ("includeFunctionNameRegexes", "include_function_name_regexes"),
    ("excludeFunctionNameRegexes", "exclude_function_name_regexes"),
)


@dataclass
class FrameFilter:
    include: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    include_re: list[str] = field(default_factory=list)
    exclude_re: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.include or self.exclude or self.include_re or self.exclude_re)

    def check(self) -> None:
        lists = (self.include, self.exclude, self.include_re, self.exclude_re)
        if sum(len(x) for x in lists) > MAX_PATTERNS:
            raise BadRequest(f"a frame filter has at most {MAX_PATTERNS} names and regexes")
        if any(len(p.encode()) > MAX_PATTERN_BYTES for x in lists for p in x):
            raise BadRequest(f"a frame filter's names are at most {MAX_PATTERN_BYTES} bytes")


def _strings(data: bytes) -> dict[int, list[str]]:
    """The length-delimited fields of a message (its strings), by field number."""
    out: dict[int, list[str]] = {}
    pos = 0

    def varint() -> int:
        nonlocal pos
        shift = value = 0
        while True:
            if pos >= len(data) or shift > 63:
                raise BadRequest("invalid frame filter: truncated protobuf")
            b = data[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return value

    while pos < len(data):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 2:
            n = varint()
            if pos + n > len(data):
                raise BadRequest("invalid frame filter: truncated protobuf")
            try:
                out.setdefault(number, []).append(data[pos : pos + n].decode("utf-8"))
            except UnicodeDecodeError:
                raise BadRequest("invalid frame filter: a name is not UTF-8") from None
            pos += n
        elif wire == 0:
            varint()
        else:
            raise BadRequest("invalid frame filter: unexpected protobuf field")
    return out


def from_proto(selector: Message) -> FrameFilter:
    """The frame filter of a ``StackTraceSelector`` read from protobuf."""
    f = FrameFilter()
    for u in unknown_fields.UnknownFieldSet(selector):
        if u.field_number == FRAME_FILTER_FIELD and u.wire_type == 2:
            found = _strings(bytes(u.data))
            f.include += found.get(1, [])
            f.exclude += found.get(2, [])
            f.include_re += found.get(3, [])
            f.exclude_re += found.get(4, [])
    f.check()
    return f


def from_json(body: bytes) -> FrameFilter:
    """The frame filter of a JSON request's stack trace selector."""
    try:
        doc = json.loads(body or b"{}")
    except ValueError:
        return FrameFilter()
    selector: Any = doc.get("stackTraceSelector") or doc.get("stack_trace_selector") or {}
    raw: Any = selector.get("frameFilter") or selector.get("frame_filter") or {}
    if not isinstance(raw, dict):
        raise BadRequest("invalid frame filter: an object is expected")
    lists = []
    for camel, snake in _KEYS:
        value = raw.get(camel, raw.get(snake)) or []
        if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
            raise BadRequest(f"invalid frame filter: {camel} is a list of strings")
        lists.append(list(value))
    f = FrameFilter(*lists)
    f.check()
    return f


def _regex_matches(symbols: Symbols, patterns: list[str], names: list[str]) -> list[set[int]]:
    """For each pattern, the indexes of the names it finds (unanchored): matched by the
    store's RE2 engine, in linear time whatever the pattern (as Go's regexp does for
    Pyroscope), so a pathological pattern costs no more than a plain one."""
    for p in patterns:
        try:
            re.compile(p)
        except re.error as e:
            raise BadRequest(f"invalid function name regex {p[:80]!r}: {e}") from None
    if not patterns:
        return []
    try:
        rows = symbols.store.rows(
            "SELECT arrayMap(p -> arrayFilter(i -> match({names:Array(String)}[i], p), "
            "range(1, length({names:Array(String)}) + 1)), {patterns:Array(String)})",
            {"names": names, "patterns": patterns},
        )
    except Exception as e:  # a pattern RE2 does not take (a back-reference...)
        raise BadRequest(f"invalid function name regex (RE2 syntax): {str(e)[:200]}") from None
    return [{int(i) - 1 for i in found} for found in rows[0][0]]


def select(merged: Merged, symbols: Symbols, f: FrameFilter) -> Merged:
    """Only the stacks that the filter keeps."""
    if not f or merged.ids is None:
        return merged
    flat, lengths = symbols.name_paths(merged.ids, merged.seqs or [])
    ids = np.unique(flat).tolist()
    text = [symbols.names[i] for i in ids]
    by_regex = _regex_matches(symbols, [*f.include_re, *f.exclude_re], text)
    include_re, exclude_re = by_regex[: len(f.include_re)], by_regex[len(f.include_re) :]
    excluded = {ids[k] for k, n in enumerate(text) if n in f.exclude}
    excluded |= {ids[k] for found in exclude_re for k in found}
    wanted = [{ids[k] for k, n in enumerate(text) if n == name} for name in f.include]
    wanted += [{ids[k] for k in found} for found in include_re]
    keep = np.zeros(lengths.size, dtype=bool)
    starts = np.cumsum(lengths) - lengths
    for k, (a, n) in enumerate(zip(starts.tolist(), lengths.tolist(), strict=True)):
        if n == 0:
            continue
        seen = set(flat[a : a + n].tolist())
        keep[k] = not (seen & excluded) and all(seen & w for w in wanted)
    rows = np.flatnonzero(keep)
    seqs = [merged.seqs[i] for i in rows.tolist()] if merged.seqs is not None else None
    frames = np.concatenate(seqs) if seqs else np.zeros(0, dtype=np.uint64)
    return Merged(frames, merged.lengths[rows], merged.values[rows], merged.ids[rows], seqs)
