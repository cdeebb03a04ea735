"""A pprof ``Profile`` decoded into numpy columns, for ingest at fleet rates.

A server that stores every profile cannot afford a Python object per sample, location and
function. The top level of the message is parsed by the protobuf runtime with the samples,
locations, functions and mappings declared as ``bytes`` (so they stay opaque byte strings);
those sub-messages hold nothing but varints and length-delimited runs of varints, so the
concatenation of each kind is decoded in one vectorised pass and walked field by field for
all messages at once. A profile's dictionary (its functions, locations, mappings and string
table) can be decoded apart from its samples: an agent that pushes the same program every
period may send the same dictionary again, and then the server decodes only the samples of
the push (see ``parse_samples`` and dictionaries.py). Anything that does not fit (unknown
wire types, a corrupt varint) goes through the protobuf runtime's full decoder instead,
which gives the same columns or a clear error. Both paths are compared in
tests/server/test_units.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import blake3
import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from aiflame.proto.pyroscope.google.v1.profile_pb2 import Profile as FullProfile
from aiflame.server.errors import BadRequest

U64 = np.uint64


class Malformed(Exception):
    """The fast path cannot read this message (the full decoder decides)."""


@dataclass
class PprofColumns:
    strings: list[str]
    sample_types: list[tuple[int, int]]  # (type, unit) string indices
    period_type: tuple[int, int]
    period: int
    time_nanos: int
    duration_nanos: int
    # functions
    fn_id: np.ndarray
    fn_name: np.ndarray
    fn_system_name: np.ndarray
    fn_filename: np.ndarray
    # mappings
    map_id: np.ndarray
    map_filename: np.ndarray
    # locations, and their lines flattened (innermost first within a location, as in pprof)
    loc_id: np.ndarray
    loc_mapping: np.ndarray
    loc_address: np.ndarray
    loc_nlines: np.ndarray
    line_function: np.ndarray
    line_line: np.ndarray
    # samples: location ids (leaf first) flattened, values (n x types), string labels
    sample_nlocs: np.ndarray
    sample_locs: np.ndarray
    values: np.ndarray
    label_sample: np.ndarray
    label_key: np.ndarray
    label_str: np.ndarray

    @property
    def num_samples(self) -> int:
        return int(self.values.shape[0])


# -- the top level, with sub-messages left as bytes ----------------------------------------
_F = descriptor_pb2.FieldDescriptorProto
_REP, _OPT = _F.LABEL_REPEATED, _F.LABEL_OPTIONAL
_HEADER = (
    (1, "sample_type", _F.TYPE_MESSAGE, _REP),
    (2, "sample", _F.TYPE_BYTES, _REP),
    (9, "time_nanos", _F.TYPE_INT64, _OPT),
    (10, "duration_nanos", _F.TYPE_INT64, _OPT),
    (11, "period_type", _F.TYPE_MESSAGE, _OPT),
    (12, "period", _F.TYPE_INT64, _OPT),
)


def _profile_class(package: str, fields: tuple[tuple[int, str, int, int], ...]) -> Any:
    """A pprof ``Profile`` class that declares only ``fields`` (number, name, type, label):
    sub-messages declared as bytes stay opaque byte strings, and fields not declared are
    kept as they are encoded (unknown fields)."""
    fd = descriptor_pb2.FileDescriptorProto(
        name=f"aiflame_server_{package}_pprof.proto", package=f"aiflame.{package}", syntax="proto3"
    )
    vt = fd.message_type.add(name="ValueType")
    vt.field.add(name="type", number=1, type=_F.TYPE_INT64, label=_OPT)
    vt.field.add(name="unit", number=2, type=_F.TYPE_INT64, label=_OPT)
    # Mappings are few and have many fields: parsed as messages, not walked.
    mp = fd.message_type.add(name="Mapping")
    mp.field.add(name="id", number=1, type=_F.TYPE_UINT64, label=_OPT)
    mp.field.add(name="filename", number=5, type=_F.TYPE_INT64, label=_OPT)
    p = fd.message_type.add(name="Profile")
    for number, name, typ, label in fields:
        f = p.field.add(name=name, number=number, type=typ, label=label)
        if typ == _F.TYPE_MESSAGE:
            kind = "Mapping" if name == "mapping" else "ValueType"
            f.type_name = f".aiflame.{package}.{kind}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"aiflame.{package}.Profile"))


# Everything a profile's columns come from.
_LeanProfile = _profile_class(
    "lean",
    (
        *_HEADER,
        (3, "mapping", _F.TYPE_MESSAGE, _REP),
        (4, "location", _F.TYPE_BYTES, _REP),
        (5, "function", _F.TYPE_BYTES, _REP),
        # bytes, not string: a dictionary already seen is never decoded to text again
        (6, "string_table", _F.TYPE_BYTES, _REP),
    ),
)
# The samples and the scalars; the dictionary (fields 3-6) is not declared.
_SamplesProfile = _profile_class(
    "samples",
    (
        *_HEADER,
        (7, "drop_frames", _F.TYPE_INT64, _OPT),
        (8, "keep_frames", _F.TYPE_INT64, _OPT),
        (13, "comment", _F.TYPE_INT64, _REP),
        (14, "default_sample_type", _F.TYPE_INT64, _OPT),
    ),
)


def decode(data: bytes) -> PprofColumns:
    """The columns of an (uncompressed) pprof message; BadRequest if it is not one."""
    return columns(parse(data), data)


def parse(data: bytes) -> Any:
    """The top level of a pprof message, its repeated sub-messages left as bytes."""
    try:
        return _LeanProfile.FromString(data)
    except DecodeError as e:
        raise BadRequest(f"corrupt or truncated pprof data ({e})") from None


def columns(top: Any, data: bytes, strings: list[str] | None = None) -> PprofColumns:
    """The columns of a parsed message. With ``strings`` (its string table, decoded before:
    the caller knows this dictionary), only the samples are decoded and the function,
    location and mapping columns are left empty."""
    try:
        cols = _fast(top, strings)
    except Malformed:
        cols = _slow(data)
    _check(cols)
    return cols


class ValueType(NamedTuple):
    type: int
    unit: int


@dataclass
class SamplesOnly:
    """A pprof message parsed for its samples alone, with the digest of its dictionary (its
    functions, locations, mappings and string table, exactly as encoded: two profiles with
    the same digest have the same locations and frames, ids included). It reads like the
    parsed message where :func:`columns` reads it, with an empty dictionary."""

    sample: list[bytes]
    sample_type: list[ValueType]
    period_type: ValueType
    period: int
    time_nanos: int
    duration_nanos: int
    dictionary_key: bytes
    function: tuple = ()
    location: tuple = ()
    mapping: tuple = ()
    string_table: tuple = ()


_NOT_DICTIONARY = (
    "sample",
    "sample_type",
    "time_nanos",
    "duration_nanos",
    "period_type",
    "period",
    "drop_frames",
    "keep_frames",
    "comment",
    "default_sample_type",
)


def parse_samples(data: bytes) -> SamplesOnly:
    """The samples of a pprof message and the digest of its dictionary, in one parse: the
    dictionary's fields are not declared, so the protobuf runtime keeps them as they are
    encoded (unknown fields) and writes them out again for the digest."""
    try:
        m = _SamplesProfile.FromString(data)
    except DecodeError as e:
        raise BadRequest(f"corrupt or truncated pprof data ({e})") from None
    pt = m.period_type
    out = SamplesOnly(
        sample=list(m.sample),
        sample_type=[ValueType(t.type, t.unit) for t in m.sample_type],
        period_type=ValueType(pt.type, pt.unit),
        period=m.period,
        time_nanos=m.time_nanos,
        duration_nanos=m.duration_nanos,
        dictionary_key=b"",
    )
    for name in _NOT_DICTIONARY:
        m.ClearField(name)
    # BLAKE3: a cryptographic digest (no crafted collision passes one dictionary off as
    # another) at 3x the speed of SHA-256 with the CPU's SHA extensions.
    out.dictionary_key = blake3.blake3(m.SerializeToString()).digest()
    return out


def _text(table: Any) -> list[str]:
    try:
        return [b.decode("utf-8") for b in table]
    except UnicodeDecodeError:
        raise BadRequest("corrupt pprof data: a string is not valid UTF-8") from None


# -- vectorised varints ---------------------------------------------------------------------
class _Varints:
    """Every varint of a buffer made only of varints: value, start and end offsets."""

    def __init__(self, buf: bytes) -> None:
        a = np.frombuffer(buf, dtype=np.uint8)
        if a.size == 0:
            z = np.zeros(0, dtype=np.int64)
            self.vals, self.start, self.end, self.index = z.astype(U64), z, z, z
            return
        if a[-1] >= 0x80:
            raise Malformed("unterminated varint")
        term = a < 0x80
        end = np.flatnonzero(term) + 1
        start = np.empty_like(end)
        start[0] = 0
        start[1:] = end[:-1]
        size = end - start
        if int(size.max()) > 10:
            raise Malformed("varint longer than 10 bytes")
        low = (a & 0x7F).astype(U64)
        vals = low[start]
        idx = np.flatnonzero(size > 1)
        k = 1
        while idx.size:  # most varints are one or two bytes: the rest shrinks fast
            vals[idx] |= low[start[idx] + k] << U64(7 * k)
            k += 1
            idx = idx[size[idx] > k]
        self.vals, self.start, self.end = vals, start, end
        self.index = np.cumsum(term) - term  # byte offset -> the varint that contains it

    def at(self, pos: np.ndarray) -> np.ndarray:
        """Index of the varint starting at each byte offset (Malformed if one does not)."""
        i = self.index[pos]
        if np.any(self.start[i] != pos):
            raise Malformed("field does not start on a varint")
        return i


@dataclass
class _Fields:
    """One row per field of every message walked: which message, field number, wire type;
    a = the value (varint) or content start (length-delimited), b = the content end."""

    msg: np.ndarray
    field: np.ndarray
    wire: np.ndarray
    a: np.ndarray
    b: np.ndarray
    seq: np.ndarray  # order of the field within its message


def _walk(v: _Varints, start: np.ndarray, end: np.ndarray) -> _Fields:
    """Walk the fields of many messages ``[start, end)`` at once, one field per step."""
    live = start < end
    msg = np.flatnonzero(live)
    pos, lim = start[live].astype(np.int64), end[live].astype(np.int64)
    out: list[tuple[np.ndarray, ...]] = []
    last = v.vals.size - 1
    step = 0
    while msg.size:
        i = v.at(pos)
        if int(i.max()) >= last:
            raise Malformed("a tag without a value")
        tag, value = v.vals[i], v.vals[i + 1]
        wire = (tag & U64(7)).astype(np.int8)
        is_len = wire == 2
        if np.any((wire != 0) & ~is_len) or np.any(tag < U64(8)):
            raise Malformed("unsupported wire type")
        if is_len.any() and int(value[is_len].max()) > 1 << 40:
            raise Malformed("length out of range")
        after = v.end[i + 1]
        nxt = after + is_len * value.astype(np.int64)
        if np.any(nxt > lim):
            raise Malformed("field runs past its message")
        a = np.where(is_len, after.astype(U64), value)
        out.append((msg, (tag >> U64(3)).astype(np.int64), wire, a, nxt, np.full(msg.size, step)))
        step += 1
        live = nxt < lim
        msg, pos, lim = msg[live], nxt[live], lim[live]
    if not out:
        z = np.zeros(0, dtype=np.int64)
        return _Fields(z, z, z.astype(np.int8), z.astype(U64), z, z)
    cols = [np.concatenate(c) for c in zip(*out, strict=True)]
    order = np.lexsort((cols[5], cols[0]))  # by message, then by position in it
    return _Fields(*(c[order] for c in cols))


def _scalar(f: _Fields, number: int, n: int) -> np.ndarray:
    out = np.zeros(n, dtype=U64)
    sel = (f.field == number) & (f.wire == 0)
    out[f.msg[sel]] = f.a[sel]  # a repeated scalar: the last one wins, as in protobuf
    return out


def _repeated(v: _Varints, f: _Fields, number: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """A repeated varint field, packed or not: values in order, and the count per message."""
    sel = np.flatnonzero(f.field == number)
    packed = f.wire[sel] == 2
    first = np.zeros(sel.size, dtype=np.int64)
    count = np.ones(sel.size, dtype=np.int64)
    if packed.any():
        ps = sel[packed]
        cs, ce = f.a[ps].astype(np.int64), f.b[ps]
        nonempty = ce > cs
        lo = np.zeros(ps.size, dtype=np.int64)
        hi = np.zeros(ps.size, dtype=np.int64)
        lo[nonempty] = v.at(cs[nonempty])
        hi[nonempty] = np.searchsorted(v.start, ce[nonempty])  # ce may be the buffer end
        if np.any(v.end[hi[nonempty] - 1] != ce[nonempty]):
            raise Malformed("packed field does not end on a varint")
        first[packed] = lo
        count[packed] = hi - lo
    total = int(count.sum())
    within = np.arange(total) - np.repeat(np.cumsum(count) - count, count)
    idx = np.repeat(first, count) + within
    vals = v.vals[idx] if total else np.zeros(0, dtype=U64)
    if not packed.all():  # unpacked: the value is the varint after the tag, in f.a
        single = np.repeat(~packed, count)
        vals = vals.copy()
        vals[single] = f.a[sel[~packed]]
    per_msg = np.bincount(f.msg[sel], weights=count, minlength=n).astype(np.int64)
    return vals, per_msg


def _spans(f: _Fields, number: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    sel = (f.field == number) & (f.wire == 2)
    return f.msg[sel], f.a[sel].astype(np.int64), f.b[sel]


def _joined(groups) -> tuple[bytes, np.ndarray, np.ndarray]:
    items = [x for g in groups for x in g]
    sizes = np.fromiter(map(len, items), dtype=np.int64, count=len(items))
    end = np.cumsum(sizes)
    return b"".join(items), end - sizes, end


def _part(f: _Fields, lo: int, hi: int) -> _Fields:
    """The fields of messages ``lo..hi-1``, renumbered from 0."""
    a, b = np.searchsorted(f.msg, (lo, hi))
    return _Fields(f.msg[a:b] - lo, f.field[a:b], f.wire[a:b], f.a[a:b], f.b[a:b], f.seq[a:b])


def _fast(top: Any, known_strings: list[str] | None = None) -> PprofColumns:
    strings = known_strings if known_strings is not None else _text(top.string_table)
    # All sub-messages in one buffer, walked together: one pass per nesting level.
    if known_strings is None:
        groups: tuple = (top.function, top.location, top.sample)
    else:  # a known dictionary: the samples alone
        groups = ((), (), top.sample)
    counts = [len(g) for g in groups]
    bounds = np.concatenate(([0], np.cumsum(counts)))
    buf, s, e = _joined(groups)
    v = _Varints(buf)
    f = _walk(v, s, e)
    fn_f, loc_f, smp_f = (_part(f, bounds[i], bounds[i + 1]) for i in range(3))
    nf, nl, n = counts
    # Functions: id 1, name 2, system_name 3, filename 4. Mappings: id, filename.
    fn = [_scalar(fn_f, k, nf) for k in (1, 2, 3, 4)]
    mappings = top.mapping if known_strings is None else ()
    maps = [
        np.fromiter((m.id for m in mappings), dtype=U64, count=len(mappings)),
        np.fromiter((m.filename for m in mappings), dtype=np.int64, count=len(mappings)),
    ]
    # Locations: id 1, mapping_id 2, address 3, line 4. Samples: location_id 1, value 2,
    # label 3. Lines (function_id 1, line 2) and labels (key 1, str 2) are walked together.
    locs = [_scalar(loc_f, k, nl) for k in (1, 2, 3)]
    line_msg, ls, le = _spans(loc_f, 4)
    label_msg, lbs, lbe = _spans(smp_f, 3)
    nested = _walk(v, np.concatenate((ls, lbs)), np.concatenate((le, lbe)))
    lf, lbf = _part(nested, 0, ls.size), _part(nested, ls.size, ls.size + lbs.size)
    nlines = np.bincount(line_msg, minlength=nl).astype(np.int64)
    line_function = _scalar(lf, 1, ls.size)
    line_line = _scalar(lf, 2, ls.size).view(np.int64)
    sample_locs, nlocs = _repeated(v, smp_f, 1, n)
    values, nvals = _repeated(v, smp_f, 2, n)
    ntypes = len(top.sample_type)
    if n and np.any(nvals != ntypes):
        bad = int(nvals[np.flatnonzero(nvals != ntypes)[0]])
        raise BadRequest(f"invalid pprof data: a sample has {bad} values for {ntypes} types")
    key = _scalar(lbf, 1, lbs.size)
    text = _scalar(lbf, 2, lbs.size)
    is_str = text != 0  # numeric labels (num/num_unit) are not series labels
    pt = top.period_type
    return PprofColumns(
        strings=strings,
        sample_types=[(t.type, t.unit) for t in top.sample_type],
        period_type=(pt.type, pt.unit),
        period=top.period,
        time_nanos=top.time_nanos,
        duration_nanos=top.duration_nanos,
        fn_id=fn[0],
        fn_name=fn[1].view(np.int64),
        fn_system_name=fn[2].view(np.int64),
        fn_filename=fn[3].view(np.int64),
        map_id=maps[0],
        map_filename=maps[1],
        loc_id=locs[0],
        loc_mapping=locs[1],
        loc_address=locs[2],
        loc_nlines=nlines,
        line_function=line_function,
        line_line=line_line,
        sample_nlocs=nlocs,
        sample_locs=sample_locs,
        values=values.view(np.int64).reshape(n, ntypes),
        label_sample=label_msg[is_str],
        label_key=key[is_str].view(np.int64),
        label_str=text[is_str].view(np.int64),
    )


def _slow(data: bytes) -> PprofColumns:
    """The same columns through the full protobuf decoder (any valid encoding)."""
    try:
        m = FullProfile.FromString(data)
    except DecodeError as e:
        raise BadRequest(f"corrupt or truncated pprof data ({e})") from None
    ntypes = len(m.sample_type)
    u = lambda xs: np.asarray(list(xs), dtype=U64)  # noqa: E731
    i = lambda xs: np.asarray(list(xs), dtype=np.int64)  # noqa: E731
    vals: list[int] = []
    for smp in m.sample:
        if len(smp.value) != ntypes:
            raise BadRequest(
                f"invalid pprof data: a sample has {len(smp.value)} values for {ntypes} types"
            )
        vals.extend(smp.value)
    lab = [(n, lb.key, lb.str) for n, smp in enumerate(m.sample) for lb in smp.label if lb.str]
    return PprofColumns(
        strings=list(m.string_table),
        sample_types=[(t.type, t.unit) for t in m.sample_type],
        period_type=(m.period_type.type, m.period_type.unit),
        period=m.period,
        time_nanos=m.time_nanos,
        duration_nanos=m.duration_nanos,
        fn_id=u(f.id for f in m.function),
        fn_name=i(f.name for f in m.function),
        fn_system_name=i(f.system_name for f in m.function),
        fn_filename=i(f.filename for f in m.function),
        map_id=u(x.id for x in m.mapping),
        map_filename=i(x.filename for x in m.mapping),
        loc_id=u(x.id for x in m.location),
        loc_mapping=u(x.mapping_id for x in m.location),
        loc_address=u(x.address for x in m.location),
        loc_nlines=i(len(x.line) for x in m.location),
        line_function=u(ln.function_id for x in m.location for ln in x.line),
        line_line=i(ln.line for x in m.location for ln in x.line),
        sample_nlocs=i(len(s.location_id) for s in m.sample),
        sample_locs=u(x for s in m.sample for x in s.location_id),
        values=np.asarray(vals, dtype=np.int64).reshape(len(m.sample), ntypes),
        label_sample=i(x[0] for x in lab),
        label_key=i(x[1] for x in lab),
        label_str=i(x[2] for x in lab),
    )


def _check(c: PprofColumns) -> None:
    """Cross-references a server relies on: string indices in range, the empty string first."""
    n = len(c.strings)
    if n and c.strings[0] != "":
        raise BadRequest("invalid pprof data: the string table does not start with ''")
    for name, arr in (
        ("function name", c.fn_name),
        ("system name", c.fn_system_name),
        ("file name", c.fn_filename),
        ("mapping file", c.map_filename),
        ("label key", c.label_key),
        ("label value", c.label_str),
    ):
        if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= max(n, 1)):
            raise BadRequest(f"invalid pprof data: {name} string index out of range")
    for idx in (*c.sample_types, c.period_type):
        if not all(0 <= x < max(n, 1) for x in idx):
            raise BadRequest("invalid pprof data: sample type string index out of range")
