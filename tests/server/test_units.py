"""Pure parts of the server: selectors, profile types, label checks, tokens, the columnar
pprof decoder against protobuf's own (every real pprof of the test data), durations."""

from __future__ import annotations

import gzip
import itertools
from pathlib import Path

import numpy as np
import payloads
import pytest

from aiflame.errors import AiflameError
from aiflame.proto.pyroscope.google.v1.profile_pb2 import Profile as Pprof
from aiflame.server import auth
from aiflame.server.config import parse_retention
from aiflame.server.errors import BadRequest, Forbidden, Unauthorized
from aiflame.server.ingest import pprof_columns
from aiflame.server.labels import (
    Matcher,
    ProfileType,
    check_labels,
    format_selector,
    parse_selector,
    series_id,
)
from aiflame.server.store.url import parse_store_url


def test_selectors():
    assert parse_selector("") == [] and parse_selector("{}") == []
    assert parse_selector(
        '{service_name="x", pod=~"a.*",job!="", "otel.scope.name"!~\'b\\\'c\'}'
    ) == [
        Matcher("service_name", "=", "x"),
        Matcher("pod", "=~", "a.*"),
        Matcher("job", "!=", ""),
        Matcher("otel.scope.name", "!~", "b'c"),
    ]
    assert parse_selector('process_cpu{a="\\"q\\"\\n"}') == [
        Matcher("__name__", "=", "process_cpu"),
        Matcher("a", "=", '"q"\n'),
    ]
    for bad in (
        '{a="x"',
        "{a=x}",
        '{a~"x"}',
        '{="x"}',
        '{a="x"} junk',
        '{a="x" b="y"}',
        '{a="\\q"}',
    ):
        with pytest.raises(BadRequest):
            parse_selector(bad)
    labels = {"a": 'x"y', "otel.scope.name": "n"}
    assert {(m.name, m.value) for m in parse_selector(format_selector(labels))} == set(
        labels.items()
    )


def test_profile_types_and_labels():
    pt = ProfileType.parse("process_cpu:cpu:nanoseconds:cpu:nanoseconds")
    assert (pt.name, pt.sample_type, pt.sample_unit, pt.id) == (
        "process_cpu",
        "cpu",
        "nanoseconds",
        "process_cpu:cpu:nanoseconds:cpu:nanoseconds",
    )
    for bad in ("process_cpu", "a:b:c:d", ":cpu:ns:cpu:ns"):
        with pytest.raises(BadRequest):
            ProfileType.parse(bad)
    assert (
        series_id({"a": "1", "b": "2"})
        == series_id({"b": "2", "a": "1"})
        != series_id({"a": "1", "b": "3"})
    )
    # Stable across processes and versions: stored ids must not change (BLAKE2b, not hash()).
    assert series_id({"service_name": "x", "__name__": "process_cpu"}) == 0x9C0E7353AA5F5AB5
    with pytest.raises(BadRequest, match="invalid label name"):
        check_labels([("1abc", "x")])
    with pytest.raises(BadRequest, match="at most 2"):
        check_labels([("a", "1"), ("b", "2"), ("c", "3")], limit=2)
    with pytest.raises(BadRequest, match="twice"):
        check_labels([("a", "1"), ("a", "2")])


def test_tokens(tmp_path):
    f = tmp_path / "tokens"
    f.write_text(
        "aaaaaaaaaaaaaaaa1 ingest\nbbbbbbbbbbbbbbbb2 read,ingest\ncccccccccccccccc3 admin\n"
    )
    check = auth.TokenCheck(str(f))
    check.require("Bearer aaaaaaaaaaaaaaaa1", "ingest")
    check.require(
        "Basic " + __import__("base64").b64encode(b"tenant:bbbbbbbbbbbbbbbb2").decode(), "read"
    )
    check.require("Bearer cccccccccccccccc3", "read")  # admin includes read and ingest
    with pytest.raises(Forbidden):
        check.require("Bearer aaaaaaaaaaaaaaaa1", "read")
    for bad in (
        None,
        "",
        "Bearer",
        "Bearer nope-nope-nope-nope",
        "Basic !!!",
        "Token aaaaaaaaaaaaaaaa1",
    ):
        with pytest.raises(Unauthorized):
            check.require(bad, "ingest")
    auth.TokenCheck(None).require(None, "admin")  # no token file: open (loopback only)


def test_store_urls_and_retention():
    u = parse_store_url("clickhouse://ana:s%40cret@ch.example:9000/prof?cluster=prod")
    assert (u.kind, u.host, u.port, u.user, u.password, u.database, u.cluster) == (
        "clickhouse",
        "ch.example",
        9000,
        "ana",
        "s@cret",
        "prof",
        "prod",
    )
    assert "s@cret" not in u.describe()
    assert parse_store_url("clickhouses://h/db").port == 8443
    assert parse_store_url("chdb://./x").path.endswith("/x")
    for bad in ("mysql://h/db", "clickhouse:///db", "clickhouse://h/db;drop", "chdb://"):
        with pytest.raises(AiflameError):
            parse_store_url(bad)
    r = parse_retention(["traces=90d", "7d"])
    assert r == {
        "profiles": 7 * 86400,
        "telemetry": 7 * 86400,
        "rollups": 7 * 86400,
        "traces": 90 * 86400,
    }
    for bad in (["10x"], ["blobs=1d"], ["30m"]):
        with pytest.raises(AiflameError):
            parse_retention(bad)


def _pprofs() -> list[Path]:
    data = payloads.DATA
    return [
        data / "server" / "torch_train_cpu.pb.gz",
        *sorted((data / "pprof").glob("*/*.pb.gz")),
        data / "pprof" / "speedscope_go" / "simple.prof",
    ]


@pytest.mark.parametrize("path", _pprofs(), ids=lambda p: p.name)
def test_columnar_decoder_matches_protobuf(path):
    raw = path.read_bytes()
    data = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    fast = pprof_columns.decode(data)
    slow = pprof_columns._slow(data)
    for name in fast.__dataclass_fields__:
        a, b = getattr(fast, name), getattr(slow, name)
        if isinstance(a, np.ndarray):
            assert np.array_equal(a.astype(np.int64), b.astype(np.int64)), name
        else:
            assert a == b, name


def test_columnar_decoder_unpacked_fields_and_corruption():
    m = Pprof.FromString(gzip.decompress(payloads.RECORDING.read_bytes()))
    # Unpacked repeated fields (legal protobuf, rare): the same columns through the fallback.
    data = m.SerializeToString()
    sample_bytes = m.sample[0].SerializeToString()
    unpacked = bytearray()
    for loc in m.sample[0].location_id:
        unpacked += b"\x08" + _varint(loc)
    for v in m.sample[0].value:
        unpacked += b"\x10" + _varint(v)
    patched = data.replace(
        _field(2, sample_bytes),
        _field(2, bytes(unpacked) + sample_bytes[len(_packed_prefix(m)) :]),
        1,
    )
    cols = pprof_columns.decode(patched)
    assert cols.num_samples == len(m.sample)
    assert list(cols.sample_locs[: len(m.sample[0].location_id)]) == list(m.sample[0].location_id)
    for bad in (data[: len(data) // 2], b"\x12\xff\xff\xff\xff\x0f", b"\x0a\x05\x08"):
        with pytest.raises(BadRequest):
            pprof_columns.decode(bad)


def _varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _packed_prefix(m) -> bytes:
    s = m.sample[0]
    locs = b"".join(_varint(x) for x in s.location_id)
    vals = b"".join(_varint(x) for x in s.value)
    return _field(1, locs) + _field(2, vals)


def test_time_ranges_read_the_coarsest_roll_up_that_fits():
    from aiflame.server.query.select import _pieces

    h, m = 3_600_000, 60_000
    day = 1_796_000_000_000 // h * h
    assert _pieces(day, day + 2 * h) == [("samples_1h", "hour", day, day + 2 * h)]
    # "The last hour" at 10:07: 10-minute buckets inside, raw samples for the 7 + 3 minutes.
    start, end = day + 7 * m, day + h + 7 * m
    assert _pieces(start, end) == [
        ("samples_10m", "bucket", day + 10 * m, day + h),
        ("samples", "time", start, day + 10 * m),
        ("samples", "time", day + h, end),
    ]
    pieces = _pieces(day - 5 * m, day + 2 * h + 25 * m)
    assert ("samples_1h", "hour", day, day + 2 * h) in pieces
    covered = sorted((a, b) for _, _, a, b in pieces)
    assert covered[0][0] == day - 5 * m and covered[-1][1] == day + 2 * h + 25 * m
    assert all(x[1] == y[0] for x, y in itertools.pairwise(covered))
    # A batch of 10:25 not rolled up yet: from there on, the samples themselves.
    assert _pieces(day, day + 2 * h, rolled_until=day + h + 25 * m) == [
        ("samples_1h", "hour", day, day + h),
        ("samples_10m", "bucket", day + h, day + h + 20 * m),
        ("samples", "time", day + h + 20 * m, day + h + 25 * m),
        ("samples", "time", day + h + 25 * m, day + 2 * h),
    ]
    # ... or a late batch older than the whole range: nothing from the roll-ups.
    assert _pieces(day, day + 2 * h, rolled_until=day - h) == [
        ("samples", "time", day, day + 2 * h)
    ]
