"""The spool and its senders, against a stand-in server on loopback: order, idempotency,
backoff while the server is down or overloaded, rejection, the bound, the ledger, the
replay after a restart; and the messages themselves (Pyroscope's push request, /ingest)."""

from __future__ import annotations

import gzip
import os
import threading
import time

import pytest
from standin_server import StandIn

from aiflame.agent.push import Destination, Sender, ingest_query, push_request, series_labels
from aiflame.agent.spool import LEDGER, Entry, Spool, ledger_totals
from aiflame.model import ProfileBuilder, SampleType
from aiflame.proto.pyroscope.push.v1 import push_pb2
from aiflame.render.pprof import render_pprof


def pprof(samples: int) -> bytes:
    b = ProfileBuilder([SampleType("samples", "count"), SampleType("cpu", "nanoseconds")])
    fid = b.frame("hot (train.py:3)")
    b.add(b.stack([fid]), [float(samples), samples * 1e7])
    return render_pprof(b.build())


def meta(samples: int, **labels: str) -> dict[str, object]:
    return {
        "kind": "profile",
        "profile_type": "process_cpu",
        "labels": {"host": "h", "pid": "1", "service_name": "svc", **labels},
        "samples": samples,
        "start": 1700000000.0,
        "duration": 10.0,
        "rate_hz": 19,
    }


@pytest.fixture
def server():
    s = StandIn()
    s.start()
    yield s
    s.stop()


def wait_for(cond, timeout=20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def test_push_request_and_labels():
    entry_meta = {**meta(5, team="search"), "id": "abc", "ext": "pb.gz"}
    e = Entry("server", 1, "abc", "pb.gz", entry_meta)
    body = push_request([(e, b"PPROF")])
    req = push_pb2.PushRequest()
    req.ParseFromString(body)
    labels = [(lp.name, lp.value) for lp in req.series[0].labels]
    assert labels[:2] == [("__name__", "process_cpu"), ("__delta__", "false")]
    assert ("team", "search") in labels and ("service_name", "svc") in labels
    assert req.series[0].samples[0].raw_profile == b"PPROF" and req.series[0].samples[0].ID == "abc"
    assert series_labels(entry_meta)[0] == ("__name__", "process_cpu")
    q = ingest_query(e)
    assert "name=svc.process_cpu%7Bhost%3Dh%2Cpid%3D1%2Cteam%3Dsearch%7D" in q
    assert "sampleRate=19" in q and "format=pprof" in q and "from=1700000000" in q


def test_entries_go_in_order_once_and_are_removed(tmp_path, server):
    spool = Spool(str(tmp_path), ["server"])
    ids = [spool.put("pb.gz", pprof(n), meta(n)).id for n in (1, 2, 3)]
    stop = threading.Event()
    sender = Sender(spool, Destination("server", server.url, token="t0k"), stop)
    sender.start()
    try:
        assert wait_for(lambda: not spool.pending("server"))
    finally:
        stop.set()
        sender.join(5)
    assert list(server.got.profiles) == ids  # in order
    assert server.got.profiles[ids[0]]["auth"] == "Bearer t0k"
    assert server.got.profiles[ids[0]]["types"] == ["samples/count", "cpu/nanoseconds"]
    assert server.cpu_samples() == 6
    assert sender.stats.pushed == {"profile": 3} and sender.stats.pushed_samples == 6
    assert sorted(os.listdir(tmp_path / "server")) == []


def test_a_server_down_then_up_gets_everything(tmp_path, server):
    spool = Spool(str(tmp_path), ["server"])
    port = server.port
    server.stop()
    stop = threading.Event()
    sender = Sender(spool, Destination("server", f"http://127.0.0.1:{port}"), stop)
    sender.start()
    try:
        for n in range(1, 6):
            spool.put("pb.gz", pprof(n), meta(n))
        assert wait_for(lambda: sender.stats.failures.get("connection", 0) >= 1)
        assert len(spool.pending("server")) == 5
        server.start(port)  # back
        assert wait_for(lambda: not spool.pending("server"), timeout=30)
    finally:
        stop.set()
        sender.join(5)
    assert server.cpu_samples() == 15
    assert server.got.duplicates == 0


def test_overloaded_is_retried_rejected_is_dropped_and_counted(tmp_path, server):
    spool = Spool(str(tmp_path), ["server"])
    sender = Sender(spool, Destination("server", server.url), threading.Event())
    spool.put("pb.gz", pprof(4), meta(4))
    server.mode = "503"
    assert sender.send_some() is False
    assert sender.stats.failures == {"overloaded": 1} and len(spool.pending("server")) == 1
    server.mode = "400"
    assert sender.send_some() is True  # a batch of one: dropped
    assert not spool.pending("server")
    assert sender.stats.failures["rejected"] == 1
    assert spool.stats.dropped_samples == 4
    totals = ledger_totals(str(tmp_path / LEDGER))
    assert (totals["spooled_samples"], totals["dropped_samples"]) == (4, 4)


def test_a_rejected_batch_is_retried_one_by_one(tmp_path, server):
    spool = Spool(str(tmp_path), ["server"])
    sender = Sender(spool, Destination("server", server.url), threading.Event())
    for n in (1, 2):
        spool.put("pb.gz", pprof(n), meta(n))
    server.mode = "400"
    sender.send_some()  # the batch of 2 is refused: nothing dropped yet
    assert len(spool.pending("server")) == 2 and spool.stats.dropped_entries == 0
    server.mode = "up"
    sender.send_some()
    sender.send_some()
    assert not spool.pending("server") and server.cpu_samples() == 3


def test_the_spool_is_bounded_oldest_first(tmp_path):
    spool = Spool(str(tmp_path), ["local"], max_bytes=1 << 20)
    big = os.urandom(300 << 10)  # 300 KiB, incompressible
    ids = [spool.put("pb.gz", big, meta(10)).id for _ in range(5)]
    left = [e.id for e in spool.pending("local")]
    assert left == ids[2:]  # the two oldest dropped
    assert spool.bytes <= 1 << 20
    assert spool.stats.dropped_entries == 2 and spool.stats.dropped_samples == 20


def test_restart_replays_in_order_and_skips_torn_entries(tmp_path):
    spool = Spool(str(tmp_path), ["server", "pyroscope"])
    ids = [spool.put("pb.gz", pprof(n), meta(n)).id for n in (1, 2, 3)]
    # one payload is on disk once, linked into both queues
    a = os.stat(tmp_path / "server" / f"{spool.pending('server')[0].stem}.pb.gz")
    assert a.st_nlink == 2
    spool.done(spool.pending("pyroscope")[0])
    # a crash between metadata and payload leaves metadata alone; a temporary file too
    (tmp_path / "server" / "000000000099-torn.json").write_text('{"ext": "pb.gz"}')
    (tmp_path / "server" / "000000000100-x.pb.gz.tmp-123").write_bytes(b"x")
    again = Spool(str(tmp_path), ["server", "pyroscope"])
    assert [e.id for e in again.pending("server")] == ids
    assert [e.id for e in again.pending("pyroscope")] == ids[1:]
    assert not (tmp_path / "server" / "000000000099-torn.json").exists()
    assert again.put("pb.gz", pprof(1), meta(1)).seq == 4  # numbering goes on


def test_spooled_profiles_are_pprof_files_aiflame_reads(tmp_path):
    from aiflame.sources import load

    spool = Spool(str(tmp_path), ["local"])
    entry = spool.put("pb.gz", pprof(7), meta(7))
    profile = load(spool.payload_path(entry))
    assert profile.totals()[0] == 7
    assert gzip.decompress(spool.read(entry))[:1]  # a gzipped protobuf
