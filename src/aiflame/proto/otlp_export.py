"""pprof profiles -> one OpenTelemetry ``ExportProfilesServiceRequest`` (OTLP profiles).

What aiflame's agent sends to an OpenTelemetry collector: each spooled pprof (one process
and profile type of one period) becomes a ``ResourceProfiles`` whose resource attributes are
its workload labels by the semantic conventions (proto/otlp_conventions.py), with one
``Profile`` per pprof sample type (OTLP profiles have one each). Everything is interned in
the request's one dictionary, whose tables start with their zero value as the protocol
requires: functions, mappings and locations keep what pprof had (names, files, lines,
addresses, inlined lines), each location carries ``profile.frame.type`` from the frame's
kind (``cpython``, ``kernel``, ``native``, ``cuda`` for GPU frames) and each function its
aiflame kind in ``system_name`` as in pprof, so an aiflame server reads back the exact kind.

A profile's ``profile_id`` is derived from the spool entry's id and the sample type, so an
export retried after a lost answer carries the same ids and a receiver stores it once.
"""

from __future__ import annotations

import gzip
import hashlib
from dataclasses import dataclass

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as svc
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.profiles.v1development import profiles_pb2 as otel

from aiflame.model import FrameKind
from aiflame.proto import conventions as conv
from aiflame.proto import otlp_conventions as oc
from aiflame.proto.pyroscope.google.v1.profile_pb2 import Profile as Pprof

SCHEMA_URL = "https://opentelemetry.io/schemas/1.37.0"
SCOPE_NAME = "aiflame-agent"


@dataclass
class Item:
    """One spooled profile: its pprof (gzipped or not), labels and spool id."""

    pprof: bytes
    labels: dict[str, str]
    entry_id: str


def profile_id(entry_id: str, sample_type: int) -> bytes:
    """The 16-byte id of a pprof's ``sample_type``-th profile (the same on every retry)."""
    return hashlib.blake2b(f"{entry_id}\x00{sample_type}".encode(), digest_size=16).digest()


class _Dictionary:
    """The request's tables, each interned by value (the protocol wants no duplicates)."""

    def __init__(self, d: otel.ProfilesDictionary) -> None:
        self.d = d
        d.string_table.append("")
        d.mapping_table.add()
        d.location_table.add()
        d.function_table.add()
        d.link_table.add()
        d.attribute_table.add()
        d.stack_table.add()
        self._strings: dict[str, int] = {"": 0}
        self._seen: dict[tuple, int] = {}
        self.frame_types: dict[int, str] = {}  # function index -> its profile.frame.type

    def string(self, s: str) -> int:
        i = self._strings.get(s)
        if i is None:
            i = self._strings[s] = len(self.d.string_table)
            self.d.string_table.append(s)
        return i

    def attribute(self, key: str, value: common_pb2.AnyValue) -> int:
        k = ("a", key, value.SerializeToString(deterministic=True))
        i = self._seen.get(k)
        if i is None:
            i = self._seen[k] = len(self.d.attribute_table)
            self.d.attribute_table.add(key_strindex=self.string(key), value=value)
        return i

    def mapping(self, start: int, limit: int, offset: int, filename: str, build_id: str) -> int:
        k = ("m", start, limit, offset, filename, build_id)
        i = self._seen.get(k)
        if i is None:
            i = self._seen[k] = len(self.d.mapping_table)
            mp = self.d.mapping_table.add(
                memory_start=start,
                memory_limit=limit,
                file_offset=offset,
                filename_strindex=self.string(filename),
            )
            if build_id:
                value = common_pb2.AnyValue(string_value=build_id)
                mp.attribute_indices.append(
                    self.attribute("process.executable.build_id.gnu", value)
                )
        return i

    def function(self, name: str, system_name: str, filename: str, start_line: int) -> int:
        k = ("f", name, system_name, filename, start_line)
        i = self._seen.get(k)
        if i is None:
            i = self._seen[k] = len(self.d.function_table)
            self.d.function_table.add(
                name_strindex=self.string(name),
                system_name_strindex=self.string(system_name),
                filename_strindex=self.string(filename),
                start_line=start_line,
            )
            self.frame_types[i] = _frame_type(name, system_name)
        return i

    def location(
        self, mapping: int, address: int, lines: tuple[tuple[int, int], ...], frame_type: str
    ) -> int:
        k = ("l", mapping, address, lines, frame_type)
        i = self._seen.get(k)
        if i is None:
            i = self._seen[k] = len(self.d.location_table)
            loc = self.d.location_table.add(mapping_index=mapping, address=address)
            for fn, line in lines:
                loc.lines.add(function_index=fn, line=line)
            if frame_type:
                value = common_pb2.AnyValue(string_value=frame_type)
                loc.attribute_indices.append(self.attribute(oc.FRAME_TYPE_KEY, value))
        return i

    def stack(self, locations: tuple[int, ...]) -> int:
        k = ("s", locations)
        i = self._seen.get(k)
        if i is None:
            i = self._seen[k] = len(self.d.stack_table)
            self.d.stack_table.add(location_indices=locations)
        return i


def _attribute_value(attribute: str, text: str) -> common_pb2.AnyValue:
    if attribute in oc.INT_ATTRIBUTES and text.lstrip("-").isdigit():
        return common_pb2.AnyValue(int_value=int(text))
    return common_pb2.AnyValue(string_value=text)


def resource_attributes(labels: dict[str, str]) -> list[common_pb2.KeyValue]:
    """A profile's workload labels as resource attributes (semantic conventions' names)."""
    out = []
    for label in sorted(labels):
        if label.startswith("__"):
            continue
        attribute = oc.attribute_name(label)
        out.append(
            common_pb2.KeyValue(key=attribute, value=_attribute_value(attribute, labels[label]))
        )
    return out


def _frame_type(name: str, system_name: str) -> str:
    kind = conv.kind_from_system_name(name, system_name)
    return oc.KIND_FRAME_TYPES.get(kind if kind is not None else FrameKind.UNKNOWN, "native")


def _add_pprof(
    dic: _Dictionary, rp: otel.ResourceProfiles, raw: bytes, entry_id: str, version: str
) -> None:
    data = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    p = Pprof.FromString(data)
    S = list(p.string_table)
    sp = rp.scope_profiles.add(schema_url=SCHEMA_URL)
    sp.scope.name, sp.scope.version = SCOPE_NAME, version
    if 0 < p.default_sample_type < len(S):
        value = common_pb2.AnyValue(string_value=S[p.default_sample_type])
        sp.scope.attributes.add(key="pprof.scope.default_sample_type", value=value)
    mappings = {
        m.id: dic.mapping(
            m.memory_start, m.memory_limit, m.file_offset, S[m.filename], S[m.build_id]
        )
        for m in p.mapping
    }
    functions = {
        f.id: (S[f.name], S[f.system_name], S[f.filename], f.start_line) for f in p.function
    }
    locations: dict[int, int] = {}
    for loc in p.location:
        lines = tuple((dic.function(*functions[line.function_id]), line.line) for line in loc.line)
        # the innermost line is the code that ran
        frame_type = dic.frame_types[lines[0][0]] if lines else "native"
        locations[loc.id] = dic.location(
            mappings.get(loc.mapping_id, 0), loc.address, lines, frame_type
        )
    stacks = [dic.stack(tuple(locations[x] for x in s.location_id)) for s in p.sample]
    labels = [
        [
            dic.attribute(oc.attribute_name(S[lb.key]), common_pb2.AnyValue(string_value=S[lb.str]))
            for lb in s.label
            if lb.str
        ]
        for s in p.sample
    ]
    comments = [S[c] for c in p.comment]
    comment_attr = None
    if comments:
        array = common_pb2.ArrayValue(
            values=[common_pb2.AnyValue(string_value=c) for c in comments]
        )
        comment_attr = dic.attribute(
            "pprof.profile.comment", common_pb2.AnyValue(array_value=array)
        )
    for t, vt in enumerate(p.sample_type):
        prof = sp.profiles.add(
            time_unix_nano=max(p.time_nanos, 0),
            duration_nano=max(p.duration_nanos, 0),
            period=p.period,
            profile_id=profile_id(entry_id, t),
        )
        prof.sample_type.type_strindex = dic.string(S[vt.type])
        prof.sample_type.unit_strindex = dic.string(S[vt.unit])
        prof.period_type.type_strindex = dic.string(S[p.period_type.type])
        prof.period_type.unit_strindex = dic.string(S[p.period_type.unit])
        if comment_attr is not None:
            prof.attribute_indices.append(comment_attr)
        for s, stack, attrs in zip(p.sample, stacks, labels, strict=True):
            v = s.value[t] if t < len(s.value) else 0
            if v:
                prof.samples.add(stack_index=stack, values=[v], attribute_indices=attrs)


def export_request(items: list[Item], version: str) -> svc.ExportProfilesServiceRequest:
    """One request of the spooled profiles ``items`` (ValueError if a pprof is corrupt)."""
    req = svc.ExportProfilesServiceRequest()
    dic = _Dictionary(req.dictionary)
    for item in items:
        rp = req.resource_profiles.add(schema_url=SCHEMA_URL)
        rp.resource.attributes.extend(resource_attributes(item.labels))
        try:
            _add_pprof(dic, rp, item.pprof, item.entry_id, version)
        except (DecodeError, KeyError, IndexError, OSError, EOFError) as e:
            raise ValueError(f"spooled profile {item.entry_id} is not valid pprof: {e}") from None
    return req
