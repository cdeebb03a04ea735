"""The cache of pprof dictionaries: a push whose functions, locations, mappings and strings
were decoded before gives the very rows it gives without the cache, and the checks of its
samples still hold; the known-ids cache writes a stack again after a day."""

from __future__ import annotations

import gzip

import numpy as np
import payloads
import pytest
from test_units import _pprofs

from aiflame.proto.pyroscope.google.v1.profile_pb2 import Profile as Pprof
from aiflame.server.errors import BadRequest
from aiflame.server.ingest import pprof_columns
from aiflame.server.ingest.dictionaries import DictionaryCache
from aiflame.server.ingest.hashing import StringHashes
from aiflame.server.ingest.profiles import ProfileItem, profile_item
from aiflame.server.store.writer import KnownIds

LABELS = {"__name__": "process_cpu", "service_name": "svc"}


def _item(cols, known, strings) -> ProfileItem:
    return profile_item(
        cols,
        LABELS,
        tenant="t",
        profile_id="p",
        received_ms=1_700_000_000_000,
        pprof_bytes=1,
        strings=strings,
        known=known,
    )


def _same(a: ProfileItem, b: ProfileItem) -> None:
    for name in a.__dataclass_fields__:
        if name == "dictionary":  # the decoded dictionary itself, compared through its rows
            continue
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, np.ndarray):
            assert np.array_equal(x, y), name
        else:
            assert x == y, name


def _raw(path) -> bytes:
    raw = path.read_bytes()
    return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw


@pytest.mark.parametrize("path", _pprofs(), ids=lambda p: p.name)
def test_a_known_dictionary_gives_the_same_rows(path):
    data = _raw(path)
    strings = StringHashes()
    plain = _item(pprof_columns.decode(data), None, strings)
    cache = DictionaryCache()
    first = _item(*cache.decode(data, strings), strings)
    cols, known = cache.decode(data, strings)
    assert (cache.hits, cache.misses) == (1, 1)
    assert cols.fn_id.size == 0 and cols.loc_id.size == 0  # the samples alone were decoded
    _same(plain, first)
    _same(plain, _item(cols, known, strings))


def test_new_samples_of_a_known_dictionary():
    m = Pprof.FromString(_raw(payloads.RECORDING))
    strings, cache = StringHashes(), DictionaryCache()
    cache.decode(m.SerializeToString(), strings)
    # The next period: other values, other time, fewer samples; the same code.
    m.time_nanos += 10_000_000_000
    del m.sample[::2]
    for s in m.sample:
        s.value[0] = s.value[0] * 3 + 1
    data = m.SerializeToString()
    cols, known = cache.decode(data, strings)
    assert cache.hits == 1
    _same(_item(pprof_columns.decode(data), None, strings), _item(cols, known, strings))
    # Other code (a function renamed): another dictionary.
    m.string_table[m.function[0].name] = "renamed"
    cols, known = cache.decode(m.SerializeToString(), strings)
    assert cache.hits == 1 and cols.fn_id.size == len(m.function)
    assert "renamed" in _item(cols, known, strings).strings


def test_samples_of_a_known_dictionary_are_still_checked():
    m = Pprof.FromString(_raw(payloads.RECORDING))
    strings, cache = StringHashes(), DictionaryCache()
    cache.decode(m.SerializeToString(), strings)
    dangling = Pprof()
    dangling.CopyFrom(m)
    dangling.sample[0].location_id[0] = 10**9
    cols, known = cache.decode(dangling.SerializeToString(), strings)
    assert known is not None
    with pytest.raises(BadRequest, match="missing location"):
        _item(cols, known, strings)
    bad_label = Pprof()
    bad_label.CopyFrom(m)
    bad_label.sample[0].label.add(key=1, str=len(m.string_table) + 5)
    with pytest.raises(BadRequest, match="label value string index"):
        cache.decode(bad_label.SerializeToString(), strings)


def test_a_string_table_that_is_not_utf8():
    m = Pprof.FromString(_raw(payloads.RECORDING))
    data = m.SerializeToString()
    name = m.string_table[m.function[0].name].encode()
    broken = data.replace(name, b"\xff" + name[1:], 1)
    for decode in (pprof_columns.decode, lambda d: DictionaryCache().decode(d, StringHashes())):
        with pytest.raises(BadRequest):
            decode(broken)


def test_the_cache_is_bounded():
    strings = StringHashes()
    m = Pprof.FromString(_raw(payloads.RECORDING))
    one = m.SerializeToString()
    m.string_table[m.function[0].name] = "other"
    two = m.SerializeToString()
    cache = DictionaryCache()
    cache.decode(one, strings)
    size = cache._bytes
    assert size > 0
    small = DictionaryCache(budget_bytes=size + size // 2)  # room for one
    for data in (one, two, two, one):
        small.decode(data, strings)
    assert (small.hits, small.misses) == (1, 3) and len(small._entries) == 1
    none = DictionaryCache(budget_bytes=size // 2)
    none.decode(one, strings)
    none.decode(one, strings)
    assert (none.hits, none.misses) == (0, 2) and not none._entries


def test_known_ids_are_written_again_after_a_day():
    known = KnownIds()
    ids = np.array([1, 2, 3], dtype=np.uint64)
    assert known.new(ids, 1000.0).tolist() == [1, 2, 3]
    known.add([1, 2], 1000.0)
    assert known.new(ids, 1000.0 + 3600).tolist() == [3]
    # Seen every 10 s for a day, written once: due again (its row keeps the table's TTL).
    assert known.new(ids, 1000.0 + 86401).tolist() == [1, 2, 3]
    assert known.new(np.zeros(0, dtype=np.uint64), 0.0).size == 0
