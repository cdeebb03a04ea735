"""Readers cannot starve ingest: oversized selectors are a quick 400, queries run with a time
limit, and beyond a few queries in flight per token and tenant a reader gets 429."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import payloads
import pytest
from srvclient import Client

from aiflame.proto.pyroscope.querier.v1 import querier_pb2 as q
from aiflame.proto.pyroscope.types.v1 import types_pb2 as t
from aiflame.server.admission import AdmitQueries, QueryAdmission
from aiflame.server.app import error_response
from aiflame.server.errors import Overloaded, RequestError
from aiflame.server.store.connection import open_store, query_error
from aiflame.server.store.url import parse_store_url

PUSH = "/push.v1.PusherService/Push"


def _matchers(n: int) -> str:
    return "{" + ", ".join(f'label_{i}=~"value-{i}.*"' for i in range(n)) + "}"


def _oversized_calls(now: int) -> list[tuple[str, bytes, str]]:
    """(path, body, content type) of read calls with selectors past every bound."""
    big = _matchers(5000)
    out = []
    for sel in (big, _matchers(2000), '{a=~"a{1000000}"}', '{a="' + "x" * 70_000 + '"}'):
        m = q.SelectMergeStacktracesRequest(
            profile_typeID=payloads.CPU_TYPE, label_selector=sel, start=now - 3600_000, end=now
        )
        out.append(
            (
                "/querier.v1.QuerierService/SelectMergeStacktraces",
                m.SerializeToString(),
                "application/proto",
            )
        )
    names = t.LabelNamesRequest(matchers=[big], start=now - 3600_000, end=now)
    out.append(
        ("/querier.v1.QuerierService/LabelNames", names.SerializeToString(), "application/proto")
    )
    many = t.LabelValuesRequest(name="a", matchers=["{}"] * 17, start=now - 3600_000, end=now)
    out.append(
        ("/querier.v1.QuerierService/LabelValues", many.SerializeToString(), "application/proto")
    )
    series = {
        "profileTypeID": payloads.CPU_TYPE,
        "labelSelector": big,
        "start": now - 1,
        "end": now,
    }
    out.append(
        (
            "/querier.v1.QuerierService/SelectSeries",
            json.dumps({**series, "step": 15}).encode(),
            "application/json",
        )
    )
    return out


def test_oversized_selectors_are_a_quick_400_while_pushes_go_on(server, tenant):
    """Four readers flood the server with 5,000-matcher selectors while an agent pushes:
    every selector is answered 400 in under 2 s, every push 200, and all are stored."""
    now = int(time.time() * 1000)
    calls = _oversized_calls(now)
    stop = threading.Event()
    slow: list[float] = []
    wrong: list[tuple[int, bytes]] = []
    answered = [0]

    def reader() -> None:
        c = Client(server.url, tenant=tenant, settle=False)
        i = 0
        while not stop.is_set():
            path, body, ctype = calls[i % len(calls)]
            i += 1
            t0 = time.monotonic()
            status, data = c.post(path, body, ctype)
            took = time.monotonic() - t0
            answered[0] += 1
            if took >= 2.0:
                slow.append(took)
            if status != 400:
                wrong.append((status, data[:200]))

    readers = [threading.Thread(target=reader) for _ in range(4)]
    for r in readers:
        r.start()
    c = Client(server.url, tenant=tenant)
    pushed = 0
    try:
        for seed in range(20):
            body, _, _ = payloads.cpu_push({"service_name": "flooded"}, seed, time.time_ns())
            t0 = time.monotonic()
            status, data = c.post(PUSH, body, timeout=30)
            assert status == 200, data
            assert time.monotonic() - t0 < 5.0
            pushed += 1
    finally:
        stop.set()
        for r in readers:
            r.join(60)
    assert answered[0] >= 20 and not wrong and not slow, (answered, wrong[:3], slow[:3])
    stats = t.GetProfileStatsRequest()
    status, data = c.post("/querier.v1.QuerierService/GetProfileStats", stats.SerializeToString())
    assert status == 200
    m = q.SeriesRequest(
        matchers=['{service_name="flooded"}'], start=now - 60_000, end=now + 600_000
    )
    assert c.connect("Series", m, q.SeriesResponse).labels_set
    assert pushed == 20


def _scope(token: str, tenant: str, path: str = "/api/v1/labels") -> dict:
    return {
        "type": "http",
        "method": "GET",
        "path": path,
        "headers": [
            (b"authorization", f"Bearer {token}".encode()),
            (b"x-scope-orgid", tenant.encode()),
        ],
    }


def test_queries_in_flight_are_bounded_per_token_and_tenant():
    """The middleware itself, with an app that holds each query until released: a token and
    tenant get their share, the next query is a 429 with Retry-After at once."""
    release = asyncio.Event()

    async def slow_app(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        await release.wait()

    async def run() -> None:
        admission = QueryAdmission(per_client=2, total=5)
        mw = AdmitQueries(slow_app, admission)
        noop = lambda *a: None  # noqa: E731
        held = [
            asyncio.create_task(mw(_scope("tok-a-0123456789", "t1"), noop, noop)) for _ in range(2)
        ]
        await asyncio.sleep(0.01)
        with pytest.raises(RequestError) as e:
            await mw(_scope("tok-a-0123456789", "t1"), noop, noop)
        assert e.value.status == 429 and e.value.retry_after
        resp = error_response("/api/v1/labels", e.value)
        assert resp.status_code == 429 and resp.headers["retry-after"] == "1"
        # Another tenant of the same token, another token: their own shares ...
        others = [
            asyncio.create_task(mw(_scope("tok-a-0123456789", "t2"), noop, noop)),
            asyncio.create_task(mw(_scope("tok-b-0123456789", "t1"), noop, noop)),
            asyncio.create_task(mw(_scope("tok-c-0123456789", "t1"), noop, noop)),
        ]
        await asyncio.sleep(0.01)
        # ... up to the server's total; pushes and uploads are never counted.
        with pytest.raises(RequestError) as e:
            await mw(_scope("tok-d-0123456789", "t1"), noop, noop)
        assert e.value.status == 429
        push = _scope("tok-d-0123456789", "t1", "/push.v1.PusherService/Push")
        push["method"] = "POST"
        done = asyncio.create_task(mw(push, noop, noop))
        release.set()
        await asyncio.gather(*held, *others, done)
        assert admission.running == 0 and admission.in_flight == {}
        assert admission.refused == 2

    asyncio.run(run())


def test_a_query_past_its_time_limit_is_stopped_by_the_store(tmp_path):
    store = open_store(
        parse_store_url(f"chdb://{tmp_path}/data"),
        write_pool_size=1,
        read_settings={"max_execution_time": 0.5},
    )
    try:
        t0 = time.monotonic()
        with pytest.raises(Exception) as e:
            store.rows("SELECT count() FROM numbers(100000000000) WHERE sipHash64(number) = 1")
        assert time.monotonic() - t0 < 10
        mapped = query_error(e.value, 0.5)
        assert isinstance(mapped, Overloaded) and "time limit of 0.5 s" in mapped.message
        assert mapped.retry_after
        # The writer's lane has no such limit (a roll-up may take long), and shares nothing.
        writes = store.writes()
        assert writes._settings is None and writes._clients is not store._clients
    finally:
        store.close()
