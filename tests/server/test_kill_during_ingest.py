"""The server killed with SIGKILL while agents push: after a restart every acknowledged push
is there, exactly once, and the pushes the agents retry (never acknowledged) are stored once."""

from __future__ import annotations

import threading
import time

import clickhouse_connect
import payloads
from serverproc import ServerProcess
from srvclient import Client

from aiflame.proto.pyroscope.querier.v1 import querier_pb2 as q

PUSH = "/push.v1.PusherService/Push"
TENANT = "kill-test"


def _total(url: str, ids: list[str], start_ms: int, end_ms: int) -> int:
    c = Client(url, tenant=TENANT)
    m = q.SelectMergeStacktracesRequest(
        profile_typeID=payloads.CPU_TYPE,
        label_selector="{}",
        start=start_ms,
        end=end_ms,
        profile_id_selector=ids,
    )
    return c.connect("SelectMergeStacktraces", m, q.SelectMergeStacktracesResponse).flamegraph.total


def test_sigkill_during_ingest_loses_no_acknowledged_push(tmp_path):
    store = tmp_path / "data"
    srv = ServerProcess(store).start()
    start_ms = int(time.time() * 1000) - 60_000
    pushes: dict[str, tuple[bytes, int]] = {}  # profile id -> (body, cpu ns total)
    acked: set[str] = set()
    unanswered: set[str] = set()
    lock = threading.Lock()
    stop = threading.Event()

    def agent(n: int) -> None:
        c = Client(srv.url, tenant=TENANT)
        seq = 0
        while not stop.is_set():
            seed = n * 100_000 + seq
            seq += 1
            body, pid, profile = payloads.cpu_push(
                {"service_name": "kill", "host": f"h{n}"}, seed, time.time_ns()
            )
            with lock:
                pushes[pid] = (body, int(profile.values[:, 1].sum()))
            try:
                status, _ = c.post(PUSH, body, timeout=30)
            except OSError:
                with lock:
                    unanswered.add(pid)
                return  # the server is gone
            with lock:
                (acked if status == 200 else unanswered).add(pid)

    threads = [threading.Thread(target=agent, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while len(acked) < 30 and time.monotonic() < deadline:
        time.sleep(0.05)
    srv.kill()  # mid-ingest: requests are in flight
    stop.set()
    for t in threads:
        t.join(60)
    assert len(acked) >= 30, "the server acknowledged too few pushes before the kill"

    srv2 = ServerProcess(store).start()
    try:
        end_ms = int(time.time() * 1000) + 60_000
        ids = sorted(acked)
        expected = sum(pushes[i][1] for i in ids)
        assert _total(srv2.url, ids, start_ms, end_ms) == expected
        # The agents retry what was never answered: stored once, acknowledged ones untouched.
        c = Client(srv2.url, tenant=TENANT)
        retried = sorted(unanswered | (set(pushes) - acked))
        for pid in retried:
            assert c.post(PUSH, pushes[pid][0])[0] == 200
        # And a second retry of everything is a no-op.
        for pid in ids[:10] + retried:
            assert c.post(PUSH, pushes[pid][0])[0] == 200
        everything = sorted(pushes)
        assert _total(srv2.url, everything, start_ms, end_ms) == sum(v[1] for v in pushes.values())
        all_cpu = q.SelectMergeStacktracesRequest(
            profile_typeID=payloads.CPU_TYPE, label_selector="{}", start=start_ms, end=end_ms
        )
        merged = c.connect("SelectMergeStacktraces", all_cpu, q.SelectMergeStacktracesResponse)
        assert merged.flamegraph.total == sum(v[1] for v in pushes.values())
    finally:
        srv2.stop()
    # The store itself: one row per profile, and sum stored == sum pushed.
    client = clickhouse_connect.get_client(dsn=f"chdb://{store}")
    try:
        rows = client.query(
            "SELECT count(), uniqExact(profile_id) FROM aiflame.profiles FINAL "
            "WHERE tenant = {t:String}",
            parameters={"t": TENANT},
        ).result_rows
        assert rows[0] == (len(pushes), len(pushes))
        stored = client.query(
            "SELECT sum(value) FROM aiflame.samples WHERE tenant = {t:String} "
            "AND profile_type = {pt:String}",
            parameters={"t": TENANT, "pt": payloads.CPU_TYPE},
        ).result_rows[0][0]
        assert stored == sum(v[1] for v in pushes.values())
    finally:
        client.close()
