"""aiflame server under hostile clients: can a read flood or stalled connections stop ingest?

    python benchmarks/bench_server_hostile.py [--pushers 16] [--duration 60] [--readers 4]
                                              [--stalled 400] [--src OTHER_CHECKOUT/src]

One ``aiflame server`` process (embedded store, a token file) and, in this process, pushers
with an ``ingest`` token: each its own connection from a loopback address of its own, pushing
real agent profiles (fleet_sim.py) back to back. Two phases of ``--duration`` seconds each:

1. **alone**: the pushers only: push throughput and latency (p50/p99/max);
2. **flood**: the same pushers, beside ``--readers`` clients with one ``read`` token sending
   label selectors of 5,000 matchers back to back (Grafana's querier calls, protobuf and
   JSON, and the JSON API's GET) and ``--stalled`` connections from other addresses that
   never finish their headers (half send nothing, half a partial request).

Targets: push p99 in the flood at most 2x p99 alone; every acknowledged push stored (counted
in the store after a flush); every oversized selector answered 4xx in under 2 s; every stalled
connection closed by the server within 60 s. The result is printed as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))
import fleet_sim  # noqa: E402
from bench_server import cpu_seconds, pct  # noqa: E402

from aiflame.proto.pyroscope.querier.v1 import querier_pb2 as q  # noqa: E402

OUT = ROOT / "bench-data" / "server-hostile"
INGEST_TOKEN = "bench-ingest-token-0123456789"
READ_TOKEN = "bench-read-token-01234567890"
ADMIN_TOKEN = "bench-admin-token-0123456789"
CPU = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"


def start_server(work: Path, port: int, src: Path) -> subprocess.Popen:
    tokens = work / "tokens"
    tokens.write_text(f"{INGEST_TOKEN} ingest\n{READ_TOKEN} read\n{ADMIN_TOKEN} admin\n")
    log = open(work / "server.log", "ab")  # noqa: SIM115
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aiflame",
            "server",
            "--store",
            f"chdb://{work / 'data'}",
            "--listen",
            f"127.0.0.1:{port}",
            "--token-file",
            str(tokens),
            "--log-level",
            "warning",
        ],
        env=dict(os.environ, PYTHONPATH=str(src)),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    for _ in range(600):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2):
                return proc
        except OSError:
            time.sleep(0.2)
    raise SystemExit("the server did not start")


async def exchange(conn, head: bytes, body: bytes) -> tuple[int, bytes]:
    """One HTTP/1.1 request on a kept-alive connection; (status, body). A response that
    closes the connection (``connection: close``) closes the client's side too, so the next
    request opens a new one."""
    reader, writer = conn
    writer.write(head + body)
    await writer.drain()
    line = await reader.readline()
    if not line:
        raise ConnectionResetError("the server closed the connection")
    status = int(line.split()[1])
    length = 0
    close = False
    while (line := await reader.readline()) not in (b"\r\n", b""):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
        elif line.lower().startswith(b"connection:") and b"close" in line.lower():
            close = True
    data = await reader.readexactly(length)
    if close:
        writer.close()
    return status, data


def request_head(method: str, path: str, token: str, ctype: str, length: int) -> bytes:
    return (
        f"{method} {path} HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: {ctype}\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def oversized_requests() -> list[tuple[bytes, bytes]]:
    """(head, body) of read calls whose selectors have 5,000 matchers."""
    now = int(time.time() * 1000)
    sel = "{" + ", ".join(f'label_{i}=~"value-{i}.*"' for i in range(5000)) + "}"
    msg = q.SelectMergeStacktracesRequest(
        profile_typeID=CPU, label_selector=sel, start=now - 3600_000, end=now
    )
    proto = msg.SerializeToString()
    as_json = json.dumps(
        {"profileTypeID": CPU, "labelSelector": sel, "start": now - 3600_000, "end": now}
    ).encode()
    path = "/querier.v1.QuerierService/SelectMergeStacktraces"
    get = f"/api/v1/labels?selector={quote(sel)}"
    return [
        (request_head("POST", path, READ_TOKEN, "application/proto", len(proto)), proto),
        (request_head("POST", path, READ_TOKEN, "application/json", len(as_json)), as_json),
        (request_head("GET", get, READ_TOKEN, "text/plain", 0), b""),
    ]


async def pushers(port: int, fleet: list, duration: float, stats: dict) -> None:
    stop = time.monotonic() + duration
    path = "/push.v1.PusherService/Push"

    async def one(host) -> None:
        source = (fleet_sim.host_address(host.index), 0)
        conn = await asyncio.open_connection("127.0.0.1", port, local_addr=source)
        k = 0
        while time.monotonic() < stop:
            body, _ = fleet_sim.push_body(host, k)
            k += 1
            head = request_head("POST", path, INGEST_TOKEN, "application/proto", len(body))
            t0 = time.monotonic()
            try:
                status, _ = await asyncio.wait_for(exchange(conn, head, body), 60)
            except (OSError, asyncio.IncompleteReadError, TimeoutError) as e:
                stats["errors"][type(e).__name__] = stats["errors"].get(type(e).__name__, 0) + 1
                conn[1].close()
                conn = await asyncio.open_connection("127.0.0.1", port, local_addr=source)
                continue
            stats["latency"].append(time.monotonic() - t0)
            if status == 200:
                stats["acked"] += 1
            else:
                stats["errors"][str(status)] = stats["errors"].get(str(status), 0) + 1
        conn[1].close()

    await asyncio.gather(*(one(h) for h in fleet))


async def readers(port: int, n: int, duration: float, stats: dict) -> None:
    stop = time.monotonic() + duration
    calls = oversized_requests()

    async def one(i: int) -> None:
        source = (f"127.2.0.{i + 1}", 0)
        conn = await asyncio.open_connection("127.0.0.1", port, local_addr=source)
        k = i
        while time.monotonic() < stop:
            head, body = calls[k % len(calls)]
            k += 1
            if conn[1].is_closing():  # the server closed it after its last answer
                conn = await asyncio.open_connection("127.0.0.1", port, local_addr=source)
            t0 = time.monotonic()
            try:
                status, _ = await asyncio.wait_for(exchange(conn, head, body), 30)
            except (OSError, asyncio.IncompleteReadError, TimeoutError) as e:
                status = type(e).__name__  # type: ignore[assignment]
                conn[1].close()
                conn = await asyncio.open_connection("127.0.0.1", port, local_addr=source)
            stats["latency"].append(time.monotonic() - t0)
            stats["status"][str(status)] = stats["status"].get(str(status), 0) + 1
        conn[1].close()

    await asyncio.gather(*(one(i) for i in range(n)))


async def stalled(port: int, n: int, stats: dict, wait_s: float = 60.0) -> None:
    """``n`` connections from one address that never finish a request; when did the
    server close each (a refused one at once, with 429)?"""
    t0 = time.monotonic()

    async def one(i: int) -> None:
        source = ("127.3.0.1", 0)  # one address: past its cap, one more is refused at once
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=source)
        except OSError:
            stats["refused"] += 1
            return
        if i % 2:
            writer.write(b"POST /ingest?name=stall.cpu HTTP/1.1\r\nHost: x\r\nContent-Le")
        try:
            await asyncio.wait_for(reader.read(), wait_s + 5)  # until the server closes
            stats["closed_after_s"].append(time.monotonic() - t0)
        except TimeoutError:
            stats["still_open"] += 1
        except OSError:
            stats["closed_after_s"].append(time.monotonic() - t0)
        writer.close()

    await asyncio.gather(*(one(i) for i in range(n)))


def latency_summary(values: list[float]) -> dict:
    return {
        "n": len(values),
        "p50_ms": round(1000 * pct(values, 50), 1),
        "p99_ms": round(1000 * pct(values, 99), 1),
        "max_ms": round(1000 * max(values), 1) if values else None,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pushers", type=int, default=16)
    p.add_argument("--duration", type=float, default=60.0)
    p.add_argument("--readers", type=int, default=4)
    p.add_argument("--stalled", type=int, default=400)
    p.add_argument("--src", help="run the server of these sources (default: this checkout's)")
    args = p.parse_args()
    src = Path(args.src).resolve() if args.src else ROOT / "src"
    work = OUT
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    print(f"building {args.pushers} hosts' payloads...", file=sys.stderr)
    fleet = fleet_sim.make_fleet(args.pushers)
    proc = start_server(work, port, src)
    result: dict = {"pushers": args.pushers, "duration_s": args.duration}
    try:
        time.sleep(5)  # the engine's start-up work, out of the measurement
        for phase in ("alone", "flood"):
            push: dict = {"latency": [], "acked": 0, "errors": {}}
            read: dict = {"latency": [], "status": {}}
            stall: dict = {"closed_after_s": [], "still_open": 0, "refused": 0}
            cpu0, t0 = cpu_seconds(proc.pid), time.monotonic()

            async def run(phase: str = phase, push=push, read=read, stall=stall) -> None:
                jobs = [pushers(port, fleet, args.duration, push)]
                if phase == "flood":
                    jobs += [
                        readers(port, args.readers, args.duration, read),
                        stalled(port, args.stalled, stall),
                    ]
                await asyncio.gather(*jobs)

            print(f"phase {phase}...", file=sys.stderr)
            asyncio.run(run())
            wall = time.monotonic() - t0
            out: dict = {
                "pushes_per_s": round(push["acked"] / args.duration, 1),
                "acked": push["acked"],
                "push_errors": push["errors"],
                "push_latency": latency_summary(push["latency"]),
                "server_cpu_cores": round((cpu_seconds(proc.pid) - cpu0) / wall, 2),
            }
            if phase == "flood":
                out["oversized_selectors"] = {
                    **latency_summary(read["latency"]),
                    "status": read["status"],
                    "over_2s": sum(1 for v in read["latency"] if v >= 2.0),
                }
                closed = stall["closed_after_s"]
                out["stalled_connections"] = {
                    "opened": args.stalled - stall["refused"],
                    "closed": len(closed),
                    "still_open_after_60s": stall["still_open"],
                    "closed_after_s": {
                        "p50": round(pct(closed, 50), 1),
                        "max": round(max(closed), 1) if closed else None,
                    },
                }
            result[phase] = out
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/api/v1/admin/flush",
            data=b"",
            method="POST",
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        )
        urllib.request.urlopen(req, timeout=600).read()
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/api/v1/admin/store",
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        )
        tables = json.loads(urllib.request.urlopen(req, timeout=60).read())["tables"]
    finally:
        proc.terminate()
        proc.wait(60)
    acked = result["alone"]["acked"] + result["flood"]["acked"]
    stored = tables.get("profiles", {}).get("rows", 0)
    a, f = result["alone"]["push_latency"], result["flood"]["push_latency"]
    result["acked_total"], result["stored_total"] = acked, stored
    result["p99_flood_over_alone"] = round(f["p99_ms"] / a["p99_ms"], 2) if a["p99_ms"] else None
    result["throughput_flood_over_alone"] = round(
        result["flood"]["pushes_per_s"] / max(result["alone"]["pushes_per_s"], 0.1), 2
    )
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
