"""Pushes are deduplicated by the keys clients give, not by their content: two clients sending
byte-identical profiles without a key are two profiles (as in Pyroscope); a retry with the
same key (RawSample.ID, Idempotency-Key) is stored once."""

from __future__ import annotations

import time

import payloads
from srvclient import Client

from aiflame.proto.pyroscope.push.v1 import push_pb2
from aiflame.proto.pyroscope.querier.v1 import querier_pb2 as q
from aiflame.server.ingest.dictionaries import DictionaryCache
from aiflame.server.ingest.hashing import StringHashes
from aiflame.server.ingest.push import Limits, push_items

PUSH = "/push.v1.PusherService/Push"


def _total(c: Client, profile_type: str = payloads.CPU_TYPE) -> int:
    now = int(time.time() * 1000)
    m = q.SelectMergeStacktracesRequest(
        profile_typeID=profile_type, label_selector="{}", start=now - 3600_000, end=now + 60_000
    )
    return c.connect("SelectMergeStacktraces", m, q.SelectMergeStacktracesResponse).flamegraph.total


def test_identical_pushes_without_a_key_are_both_stored(server, tenant):
    c = Client(server.url, tenant=tenant)
    now = time.time_ns()
    p = payloads.cpu_profile(11, now)
    raw = payloads.pprof_bytes(p)
    labels = {"__name__": "process_cpu", "service_name": "twins"}
    no_id = payloads.push_request([(labels, [(raw, "")])])
    assert c.post(PUSH, no_id)[0] == 200
    one = _total(c)
    assert one == int(p.values[:, 1].sum())
    assert c.post(PUSH, no_id)[0] == 200  # another client, the very same bytes
    assert _total(c) == 2 * one
    # With the profile's ID, a retry is stored once.
    with_id = payloads.push_request([(labels, [(raw, "id-1")])])
    assert c.post(PUSH, with_id)[0] == 200
    assert c.post(PUSH, with_id)[0] == 200
    assert _total(c) == 3 * one


def test_ingest_is_deduplicated_by_idempotency_key(server, tenant):
    c = Client(server.url, tenant=tenant)
    now = int(time.time())
    params = {"name": "legacy.cpu{env=prod}", "from": str(now - 10), "until": str(now)}
    samples = "process_cpu:samples:count:cpu:nanoseconds"

    def post(key: str | None) -> int:
        headers = {"Idempotency-Key": key} if key else {}
        return c.post("/ingest", b"main;work 5\n", "text/plain", params=params, headers=headers)[0]

    assert post(None) == 200 and post(None) == 200  # no key: two profiles
    assert _total(c, samples) == 10
    assert post("k-1") == 200 and post("k-1") == 200  # a retry with its key: one more
    assert _total(c, samples) == 15
    assert post("k-2") == 200
    assert _total(c, samples) == 20
    status, data = c.post(
        "/ingest", b"a 1", "text/plain", params=params, headers={"Idempotency-Key": "x" * 300}
    )
    assert status == 400 and b"Idempotency-Key" in data


def test_a_logged_push_names_its_profiles_the_same_at_every_replay():
    """The key of a push without IDs is made when it is received and logged with it: the
    replay after a crash gives the same ids (stored once), another request other ids."""
    p = payloads.cpu_profile(3, time.time_ns())
    labels = {"__name__": "process_cpu", "service_name": "replay"}
    req = push_pb2.PushRequest.FromString(
        payloads.push_request([(labels, [(payloads.pprof_bytes(p), "")])])
    )

    def ids(request_key: str) -> list[str]:
        items = push_items(
            req,
            tenant="t",
            received_ms=int(time.time() * 1000),
            limits=Limits(),
            strings=StringHashes(),
            min_time_ms=0,
            dictionaries=DictionaryCache(),
            request_key=request_key,
        )
        return [it.profile_id for it in items]

    assert ids("req-a") == ids("req-a") == ["req-a-0-0"]
    assert ids("req-b") != ids("req-a")
