"""OpenTelemetry profiles (OTLP) -> the profile items a Pyroscope push makes.

An ``ExportProfilesServiceRequest`` of the profiles ``v1development`` protos (what the
OpenTelemetry collector and the OpenTelemetry eBPF profiler send, decoded by the
``opentelemetry-proto`` package's generated classes) holds one dictionary (strings,
functions, mappings, locations, stacks, attributes) shared by every profile in it, and
profiles grouped by resource and instrumentation scope. Each profile has one sample type;
a sample names a stack and carries either values (one per observation, summed) or only
timestamps (one per observation, each counting 1).

The dictionary is turned once into the columns of a pprof dictionary, so the frames of its
locations are hashed once for all the profiles of a request; each profile then becomes a
:class:`ProfileItem` like a pushed pprof: labels from the resource, scope and profile
attributes (proto/otlp_conventions.py), kinds from ``profile.frame.type``, ``__name__`` from
the sample type. ``samples/count`` with a ``cpu/nanoseconds`` period (the eBPF profiler's
CPU profile) also gives ``cpu/nanoseconds`` (count x period), as aiflame's agent writes it,
unless the same scope carries a ``cpu/nanoseconds`` profile of its own.

Identity, for exactly-once storage of a retried export: the profile's ``profile_id`` (16
bytes, what a sender gives for this purpose). A profile without one is named by its sender
and content: the resource's attributes (on a host they tell one process from another), the
scope, the profile's type, time, duration and period, and its samples as resolved (stacks by
content, values, timestamps), so the same export sent again (even re-batched by a collector,
which renumbers the dictionary) is stored once, while profiles of different senders never
share a name.

A profile that cannot be stored (a reference out of range, no sample type, a time outside
the retention) is rejected alone and counted in the answer's ``partial_success``: one bad
process must not cost a collector's batch the profiles of every other one. A request that
cannot be read at all is a 400.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as svc
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.profiles.v1development import profiles_pb2 as otel

from aiflame.model import FrameKind
from aiflame.proto import conventions as conv
from aiflame.proto import otlp_conventions as oc
from aiflame.server.errors import BadRequest
from aiflame.server.ingest.hashing import StringHashes
from aiflame.server.ingest.pprof_columns import PprofColumns
from aiflame.server.ingest.profiles import Dictionary, ProfileItem, dictionary, profile_item
from aiflame.server.ingest.push import Limits, check_time
from aiflame.server.labels import MAX_VALUE_BYTES, NAME_LABEL, SERVICE_LABEL

if TYPE_CHECKING:
    from collections.abc import Iterable

ExportRequest = svc.ExportProfilesServiceRequest
ExportResponse = svc.ExportProfilesServiceResponse
MAX_PROBLEMS = 5  # reasons quoted in one answer
_I64 = np.int64
_MAX_VALUE = 2**63 - 1
# OTLP/JSON writes these byte fields as hex strings (protobuf's JSON mapping: base64).
_HEX_FIELDS = frozenset({"profileId", "profile_id", "traceId", "trace_id", "spanId", "span_id"})
_HEX = re.compile(r"[0-9a-fA-F]*\Z")


@dataclass
class Decoded:
    items: list[ProfileItem] = field(default_factory=list)
    rejected: int = 0
    problems: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        if len(self.problems) < MAX_PROBLEMS and text not in self.problems:
            self.problems.append(text)


# -- the request --------------------------------------------------------------------------
def parse(body: bytes, codec: str) -> svc.ExportProfilesServiceRequest:
    """The request from its protobuf or OTLP/JSON encoding (BadRequest if unreadable)."""
    req = ExportRequest()
    try:
        if codec == "proto":
            req.ParseFromString(body)
        else:
            doc = json.loads(body.decode("utf-8") if body else "{}")
            json_format.ParseDict(_hex_ids_to_base64(doc), req, ignore_unknown_fields=True)
    except RecursionError:  # JSON nested thousands deep: Python's parsers recurse
        raise BadRequest("the body is nested too deeply for an OTLP/JSON request") from None
    except (DecodeError, json_format.ParseError, UnicodeDecodeError, ValueError) as e:
        what = "protobuf" if codec == "proto" else "OTLP/JSON"
        raise BadRequest(
            f"the body is not a valid {what} ExportProfilesServiceRequest: {e}"
        ) from None
    return req


def _hex_ids_to_base64(node: Any) -> Any:
    """OTLP/JSON's hex ids as protobuf's JSON mapping wants bytes (base64)."""
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if k in _HEX_FIELDS and isinstance(v, str) and len(v) % 2 == 0 and _HEX.match(v):
                out[k] = base64.b64encode(bytes.fromhex(v)).decode()
            else:
                out[k] = _hex_ids_to_base64(v)
        return out
    if isinstance(node, list):
        return [_hex_ids_to_base64(v) for v in node]
    return node


def any_text(v: common_pb2.AnyValue) -> str | None:
    """An attribute value as label text (scalars only)."""
    kind = v.WhichOneof("value")
    if kind == "string_value":
        return v.string_value
    if kind == "int_value":
        return str(v.int_value)
    if kind == "bool_value":
        return "true" if v.bool_value else "false"
    if kind == "double_value":
        return repr(v.double_value)
    return None


# -- the dictionary -----------------------------------------------------------------------
class Tables:
    """The request's dictionary as pprof columns and the frames of its locations."""

    def __init__(self, d: otel.ProfilesDictionary, hashes: StringHashes) -> None:
        self.hashes = hashes
        self.strings: list[str] = list(d.string_table) or [""]
        self._extra: dict[str, int] = {}
        ns = len(self.strings)
        self.attr_keys = [a.key_strindex for a in d.attribute_table]
        _check_range(self.attr_keys, ns, "attribute_table", "string")
        self.attributes = d.attribute_table
        self._sample_labels: dict[int, tuple[int, int] | None] = {}
        self.stack_off, self.stack_len, self.stack_locs = self._stacks(d)
        self.cols = self._columns(d)
        self.frames: Dictionary = dictionary(self.cols, hashes)

    def string(self, text: str) -> int:
        """The index of ``text``, appended to the string table if new to it."""
        i = self._extra.get(text)
        if i is None:
            i = self._extra[text] = len(self.strings)
            self.strings.append(text)
        return i

    def attribute(self, index: int) -> tuple[str, common_pb2.AnyValue]:
        if not 0 <= index < len(self.attributes):
            raise BadRequest(f"attribute index {index} out of range")
        a = self.attributes[index]
        return self.strings[a.key_strindex], a.value

    def sample_label(self, index: int) -> tuple[int, int] | None:
        """(name, value) string indices of a sample attribute that names a series."""
        if index in self._sample_labels:
            return self._sample_labels[index]
        key, value = self.attribute(index)
        name, text = oc.label_name(key), any_text(value)
        out = None
        if name and text is not None and len(text.encode()) <= MAX_VALUE_BYTES:
            out = (self.string(name), self.string(text))
        self._sample_labels[index] = out
        return out

    def _stacks(self, d: otel.ProfilesDictionary) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        lists = [s.location_indices for s in d.stack_table]
        lengths = np.fromiter(map(len, lists), dtype=_I64, count=len(lists))
        flat = np.fromiter((i for s in lists for i in s), dtype=_I64, count=int(lengths.sum()))
        _check_range(flat, len(d.location_table), "stack_table", "location")
        real = flat != 0  # location 0 is the table's zero value: no frame
        owner = np.repeat(np.arange(lengths.size), lengths)
        lengths = np.bincount(owner[real], minlength=lengths.size).astype(_I64)
        return np.cumsum(lengths) - lengths, lengths, flat[real]  # pprof ids: the index

    def _columns(self, d: otel.ProfilesDictionary) -> PprofColumns:
        ns = len(self.strings)
        fns = d.function_table
        fn_cols = np.array(
            [(f.name_strindex, f.system_name_strindex, f.filename_strindex) for f in fns],
            dtype=_I64,
        ).reshape(-1, 3)
        _check_range(fn_cols.ravel(), ns, "function_table", "string")
        map_file = np.fromiter((m.filename_strindex for m in d.mapping_table), dtype=_I64)
        _check_range(map_file, ns, "mapping_table", "string")
        nf, nm = len(fns), map_file.size
        # pprof functions: one per (function, kind the location's frame type gives)
        fn_ids: dict[tuple[int, int], int] = {}
        fn_name: list[int] = []
        fn_system: list[int] = []
        fn_file: list[int] = []
        loc_mapping: list[int] = []
        loc_address: list[int] = []
        loc_nlines: list[int] = []
        line_function: list[int] = []
        line_line: list[int] = []
        for loc in d.location_table[1:]:  # the first is the zero value, named by nothing
            m = loc.mapping_index
            if not 0 <= m < max(nm, 1):
                raise BadRequest(f"invalid dictionary: a location names mapping {m} of {nm}")
            kind = self._location_kind(loc.attribute_indices)
            n = 0
            for line in loc.lines:
                fi = line.function_index
                if not 0 <= fi < nf:
                    raise BadRequest(f"invalid dictionary: a line names function {fi} of {nf}")
                name, system, file = (int(x) for x in fn_cols[fi])
                if not name:  # a frame named only by its system (e.g. mangled) name
                    name = system
                if not name and not file:
                    continue  # nothing names it: the location's address will
                key = (fi, -1 if kind is None else int(kind))
                fid = fn_ids.get(key)
                if fid is None:
                    fid = fn_ids[key] = len(fn_ids) + 1
                    fn_name.append(name)
                    fn_system.append(self._system_name(name, system, kind))
                    fn_file.append(file)
                line_function.append(fid)
                line_line.append(line.line)
                n += 1
            loc_mapping.append(m)  # pprof mapping ids: index (0: none)
            loc_address.append(loc.address)
            loc_nlines.append(n)
        nl = len(loc_nlines)
        z = np.zeros(0, dtype=_I64)
        return PprofColumns(
            strings=self.strings,
            sample_types=[],
            period_type=(0, 0),
            period=0,
            time_nanos=0,
            duration_nanos=0,
            fn_id=np.arange(1, len(fn_name) + 1, dtype=np.uint64),
            fn_name=np.array(fn_name, dtype=_I64),
            fn_system_name=np.array(fn_system, dtype=_I64),
            fn_filename=np.array(fn_file, dtype=_I64),
            map_id=np.arange(1, nm, dtype=np.uint64),
            map_filename=map_file[1:],
            loc_id=np.arange(1, nl + 1, dtype=np.uint64),  # location index i has id i
            loc_mapping=np.array(loc_mapping, dtype=np.uint64),
            loc_address=np.array(loc_address, dtype=np.uint64),
            loc_nlines=np.array(loc_nlines, dtype=_I64),
            line_function=np.array(line_function, dtype=np.uint64),
            line_line=np.array(line_line, dtype=_I64),
            sample_nlocs=z,
            sample_locs=z.astype(np.uint64),
            values=np.zeros((0, 0), dtype=_I64),
            label_sample=z,
            label_key=z,
            label_str=z,
        )

    def _location_kind(self, indices: Iterable[int]) -> FrameKind | None:
        for i in indices:
            key, value = self.attribute(i)
            if key == oc.FRAME_TYPE_KEY:
                return oc.frame_type_kind(value.string_value)
        return None

    def _system_name(self, name: int, system: int, kind: FrameKind | None) -> int:
        """The system name that carries the frame type's kind (aiflame's marker), unless
        the sender's own system name carries one (aiflame's agent: the exact kind)."""
        if kind is None or conv.kind_from_system_name(self.strings[name], self.strings[system]):
            return system
        return self.string(conv.system_name_for(self.strings[name], kind))


def _check_range(values: Any, size: int, table: str, what: str) -> None:
    a = np.asarray(values, dtype=_I64)
    if a.size and (int(a.min()) < 0 or int(a.max()) >= size):
        bad = int(a[(a < 0) | (a >= size)][0])
        raise BadRequest(f"invalid dictionary: {table} names {what} {bad} of {size}")


# -- profiles -----------------------------------------------------------------------------
def decode(
    req: svc.ExportProfilesServiceRequest,
    *,
    tenant: str,
    received_ms: int,
    limits: Limits,
    hashes: StringHashes,
    min_time_ms: int,
) -> Decoded:
    """Every profile of the request as a profile item, or counted as rejected."""
    out = Decoded()
    if not any(sp.profiles for rp in req.resource_profiles for sp in rp.scope_profiles):
        return out
    tables = Tables(req.dictionary, hashes)
    count = sum(len(sp.profiles) for rp in req.resource_profiles for sp in rp.scope_profiles)
    if count > limits.max_series_per_push:
        raise BadRequest(f"{count} profiles in one export; at most {limits.max_series_per_push}")
    for rp in req.resource_profiles:
        resource = _attribute_labels(((kv.key, kv.value) for kv in rp.resource.attributes), out)
        sender = _identity_text(rp.resource.attributes)
        for sp in rp.scope_profiles:
            scope = _attribute_labels(((kv.key, kv.value) for kv in sp.scope.attributes), out)
            with_cpu_ns = _scopes_cpu_times(sp.profiles, tables.strings)
            who = f"{sender}\x02{sp.scope.name}\x02{sp.scope.version}"
            for p in sp.profiles:
                try:
                    own = _attribute_labels((tables.attribute(i) for i in p.attribute_indices), out)
                    labels = _series_labels({**resource, **scope, **own}, limits, out)
                    item, stamps = _profile(
                        p, tables, labels, with_cpu_ns, tenant, received_ms, limits
                    )
                    item.profile_id = _profile_id(p, item, stamps, who)
                    check_time(item, min_time_ms, received_ms)
                except BadRequest as e:
                    out.rejected += 1
                    out.note(e.message)
                    continue
                out.items.append(item)
    return out


def _attribute_labels(
    pairs: Iterable[tuple[str, common_pb2.AnyValue]], out: Decoded
) -> dict[str, str]:
    labels: dict[str, str] = {}
    for key, value in pairs:
        name, text = oc.label_name(key), any_text(value)
        if name is None or text is None:
            continue
        if len(text.encode()) > MAX_VALUE_BYTES:
            out.note(f"attribute {key[:80]} longer than {MAX_VALUE_BYTES} bytes: not a label")
            continue
        labels[name] = text
    return labels


def _series_labels(labels: dict[str, str], limits: Limits, out: Decoded) -> dict[str, str]:
    """The labels of a series: the workload's name, and at most ``max_labels`` in all."""
    if not labels.get(SERVICE_LABEL):
        labels[SERVICE_LABEL] = _service_name(labels)
    room = limits.max_labels - 1  # __name__
    if len(labels) > room:
        mapped = set(oc.ATTRIBUTE_LABELS.values())
        order = sorted(labels, key=lambda k: (k not in mapped, k))
        out.note(f"{len(labels) - room} attribute(s) beyond {room} labels dropped")
        labels = {k: labels[k] for k in order[:room]}
    return labels


def _service_name(labels: dict[str, str]) -> str:
    """No service.name: a pod's namespace/owner (as the agent names it), else the program."""
    ns = labels.get("namespace")
    for attr in oc.K8S_OWNERS:
        owner = labels.get(oc.label_name(attr) or "")
        if ns and owner:
            return f"{ns}/{owner}"
    return labels.get("comm") or "unknown_service"


def _identity_text(attrs: Iterable[common_pb2.KeyValue]) -> str:
    """Every resource attribute (labels or not: process.pid tells processes apart)."""
    return "\x01".join(sorted(f"{kv.key}\x00{kv.value.SerializeToString().hex()}" for kv in attrs))


def _scopes_cpu_times(profiles: Iterable[otel.Profile], strings: list[str]) -> set[int]:
    """Times of the scope's own cpu/nanoseconds profiles (no second one is derived)."""
    out = set()
    for p in profiles:
        t, u = p.sample_type.type_strindex, p.sample_type.unit_strindex
        known = 0 <= t < len(strings) and 0 <= u < len(strings)
        if known and (strings[t], strings[u]) == ("cpu", "nanoseconds"):
            out.add(p.time_unix_nano)
    return out


def _profile(
    p: otel.Profile,
    tables: Tables,
    labels: dict[str, str],
    with_cpu_ns: set[int],
    tenant: str,
    received_ms: int,
    limits: Limits,
) -> tuple[ProfileItem, list[int]]:
    """The item of one profile, and its samples' timestamps."""
    S = tables.strings
    if not p.HasField("sample_type"):
        raise BadRequest("a profile without sample_type")
    t, u = p.sample_type.type_strindex, p.sample_type.unit_strindex
    pt, pu = p.period_type.type_strindex, p.period_type.unit_strindex
    _check_range([t, u, pt, pu], len(S), "a profile's sample or period type", "string")
    stype, unit = S[t], S[u]
    if not stype:
        raise BadRequest("a profile whose sample type has no name")
    n = len(p.samples)
    if n > limits.max_samples_per_profile:
        raise BadRequest(
            f"a profile has {n:,} samples; at most {limits.max_samples_per_profile:,} are accepted"
        )
    stacks = np.empty(n, dtype=_I64)
    values = np.empty(n, dtype=_I64)
    label_sample: list[int] = []
    label_key: list[int] = []
    label_str: list[int] = []
    stamps: list[int] = []
    for i, s in enumerate(p.samples):
        stacks[i] = s.stack_index
        total = sum(s.values) if s.values else len(s.timestamps_unix_nano)
        if not -_MAX_VALUE <= total <= _MAX_VALUE:
            raise BadRequest(f"a sample's value {total} does not fit 63 bits")
        values[i] = total
        stamps.extend(s.timestamps_unix_nano)
        for a in s.attribute_indices:
            pair = tables.sample_label(a)
            if pair is not None:
                label_sample.append(i)
                label_key.append(pair[0])
                label_str.append(pair[1])
    _check_range(stacks, tables.stack_len.size, "a sample", "stack")
    nlocs = tables.stack_len[stacks]
    offs = tables.stack_off[stacks]
    within = np.arange(int(nlocs.sum()), dtype=_I64) - np.repeat(np.cumsum(nlocs) - nlocs, nlocs)
    sample_locs = tables.stack_locs[np.repeat(offs, nlocs) + within].astype(np.uint64)
    sample_types = [(t, u)]
    matrix = values.reshape(-1, 1)
    derive = (stype, unit, S[pt], S[pu]) == ("samples", "count", "cpu", "nanoseconds")
    if derive and p.period > 0 and p.time_unix_nano not in with_cpu_ns:
        if n and int(np.abs(values).max()) > _MAX_VALUE // p.period:
            raise BadRequest("samples x period do not fit 63 bits")
        sample_types.append((tables.string("cpu"), tables.string("nanoseconds")))
        matrix = np.stack((values, values * p.period), axis=1)
    cols = tables.cols
    sample_cols = PprofColumns(
        strings=S,
        sample_types=sample_types,
        period_type=(pt, pu),
        period=int(p.period),
        time_nanos=min(int(p.time_unix_nano), 2**63 - 1),
        duration_nanos=min(int(p.duration_nano), 2**63 - 1),
        fn_id=cols.fn_id,
        fn_name=cols.fn_name,
        fn_system_name=cols.fn_system_name,
        fn_filename=cols.fn_filename,
        map_id=cols.map_id,
        map_filename=cols.map_filename,
        loc_id=cols.loc_id,
        loc_mapping=cols.loc_mapping,
        loc_address=cols.loc_address,
        loc_nlines=cols.loc_nlines,
        line_function=cols.line_function,
        line_line=cols.line_line,
        sample_nlocs=nlocs,
        sample_locs=sample_locs,
        values=matrix,
        label_sample=np.array(label_sample, dtype=_I64),
        label_key=np.array(label_key, dtype=_I64),
        label_str=np.array(label_str, dtype=_I64),
    )
    item = profile_item(
        sample_cols,
        {**labels, NAME_LABEL: oc.profile_name(stype, unit)},
        tenant=tenant,
        profile_id="",
        received_ms=received_ms,
        pprof_bytes=p.ByteSize(),
        strings=tables.hashes,
        known=tables.frames,
    )
    return item, stamps


def _profile_id(p: otel.Profile, item: ProfileItem, stamps: list[int], who: str) -> str:
    """The sender's profile_id; else a name of the sender and the profile's content."""
    pid = p.profile_id
    if pid:
        if len(pid) != 16:
            raise BadRequest(f"profile_id has {len(pid)} bytes; it must have 16")
        if any(pid):
            return "otlp-" + pid.hex()
    h = hashlib.blake2b(digest_size=16)
    h.update(who.encode("utf-8", "surrogatepass"))
    h.update(
        f"\x02{item.name}\x02{','.join(item.type_ids)}\x02{p.time_unix_nano}"
        f"\x02{p.duration_nano}\x02{p.period}\x02".encode()
    )
    for lb in item.series_labels:
        h.update(json.dumps(lb, sort_keys=True).encode())
    order = np.lexsort((item.row_type, item.row_series, item.row_stack))
    for column in (item.row_series, item.row_type, item.row_stack, item.row_value):
        h.update(np.ascontiguousarray(column[order]).astype(np.int64).tobytes())
    h.update(np.sort(np.array(stamps, dtype=np.uint64)).tobytes())
    return "otlp-content-" + h.hexdigest()


def response(decoded: Decoded) -> svc.ExportProfilesServiceResponse:
    """The answer: a partial success names the rejected profiles and why."""
    resp = ExportResponse()
    if decoded.rejected or decoded.problems:
        resp.partial_success.rejected_profiles = decoded.rejected
        resp.partial_success.error_message = "; ".join(decoded.problems)[:2000]
    return resp
