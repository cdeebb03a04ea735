"""aiflame server at fleet scale, by simulation (figures in docs/benchmarks.md).

    python benchmarks/bench_server.py ingest --hosts 100 --duration 60
    python benchmarks/bench_server.py query --hosts 100
    python benchmarks/bench_server.py attribution --gpus 8000 --days 7

``ingest``: one ``aiflame server`` process (embedded chDB store) and N simulated hosts
(fleet_sim.py: real agent payloads), each pushing one CPU profile and one telemetry
document every 10 s, phase-shifted. Reports push latency (p50/p99), errors, whether every
acknowledged push is stored (loss), the server's CPU per profile against the cost of merely
decoding the same pprof in this process (gunzip + protobuf parse; and + reading every
sample, location and function), and the stored bytes per profile against its pprof.gz size
(as written, and after the store's merges).

``query``: N hosts x 1 hour of profiles, written through the server's own ingest code for
one period and replicated over the hour inside the store (INSERT ... SELECT, so an hour of
a large fleet is built in seconds); the merged flame graph of all hosts (Grafana's
SelectMergeStacktraces work: SQL, stacks, name tree, levels), cold and warm, for an hour on
the clock (roll-up) and for "the last hour" (raw samples at both ends).

``attribution``: GPU-hour roll-ups of G GPUs over D days (what the agents' telemetry makes
of them, the workloads' and the hosts' capacity), and the attribution query by team, hourly
and at 5-minute resolution: in all, and its part that adds the capacity (the GPUs nobody
holds, per host and over time) to what attribution answered before.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))
import fleet_sim  # noqa: E402

OUT = ROOT / "bench-data" / "server-bench"
CLK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK


def cpu_by_thread(pid: int) -> dict[str, float]:
    """CPU seconds of a process's live threads, by thread name with digits dropped (the
    request pool, the writer and its inserts, the store engine's pipelines and merges)."""
    out: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip().rstrip("0123456789_-")
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / CLK
    return out


SERVER_SRC = ROOT / "src"  # --src: another checkout's server (the version before a change)


SERVER_ARGS: list[str] = []  # --batch-seconds


def start_server(store: Path, port: int) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(SERVER_SRC))
    log = open(store.parent / "server.log", "ab")  # noqa: SIM115
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aiflame",
            "server",
            "--store",
            f"chdb://{store}",
            "--listen",
            f"127.0.0.1:{port}",
            "--log-level",
            "warning",
            *SERVER_ARGS,
        ],
        env=env,
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


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


def decode_costs(blobs: list[bytes], rounds: int = 3) -> dict[str, float]:
    """Seconds per profile to merely decode (two ways of 'reading' it) in this process."""
    from aiflame.proto.pyroscope.google.v1.profile_pb2 import Profile

    def parse(raw: bytes) -> None:
        Profile.FromString(gzip.decompress(raw))

    def read(raw: bytes) -> None:
        m = Profile.FromString(gzip.decompress(raw))
        for s in m.sample:
            tuple(s.location_id)
            tuple(s.value)
        for loc in m.location:
            for ln in loc.line:
                ln.function_id, ln.line  # noqa: B018
        for f in m.function:
            f.name, f.system_name, f.filename  # noqa: B018
        list(m.string_table)

    out = {}
    for name, fn in (("gunzip_parse", parse), ("gunzip_parse_read", read)):
        best = float("inf")
        for _ in range(rounds):
            t0 = time.process_time()
            for b in blobs:
                fn(b)
            best = min(best, (time.process_time() - t0) / len(blobs))
        out[name] = best
    return out


def ingest(args: argparse.Namespace) -> dict:
    work = OUT / f"ingest-{args.hosts}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    with socket.socket() as sock:  # a free port (a server left running must not answer)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    print(f"building {args.hosts} hosts' payloads...", file=sys.stderr)
    fleet = fleet_sim.make_fleet(args.hosts)
    blobs = sorted({id(b): b for h in fleet for b in h.profiles}.items())
    unique_blobs = [b for _, b in blobs]
    # The floor, before the run and after it: the cheaper of the two (the machine is shared).
    floor_before = decode_costs(unique_blobs[:100], rounds=5)
    proc = start_server(work / "data", port)
    try:
        lat: dict[str, list[float]] = {"push": [], "telemetry": []}
        errors: dict[str, int] = {}
        acked = {"push": 0, "telemetry": 0}
        period = fleet_sim.PERIOD_S
        periods = int(args.duration / period)
        rng = random.Random(1)

        async def post(conn, path: str, body: bytes, ctype: str) -> int:
            reader, writer = conn
            head = (
                f"POST {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\n\r\n"
            ).encode()
            writer.write(head + body)
            await writer.drain()
            status = int((await reader.readline()).split()[1])
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            await reader.readexactly(length)
            return status

        async def agent(host, t_start: float) -> None:
            """One host, as an agent behaves: its own connection, a push and a telemetry
            document every period, at its own phase."""
            # Each host from an address of its own (all of 127/8 is loopback), as a fleet's
            # hosts are: the server caps the connections of one address.
            source = (fleet_sim.host_address(host.index), 0)
            conn = await asyncio.open_connection("127.0.0.1", port, local_addr=source)
            phase = (host.index / len(fleet)) * period
            for k in range(periods):
                due = t_start + phase + k * period
                await asyncio.sleep(max(0.0, due - time.time()))
                for kind in ("push",) if args.profiles_only else ("push", "telemetry"):
                    if kind == "push":
                        body, _ = fleet_sim.push_body(host, k)
                        path, ctype = "/push.v1.PusherService/Push", "application/proto"
                    else:
                        body = fleet_sim.telemetry_body(host, due - period, rng)
                        path, ctype = "/api/v1/telemetry", "application/json"
                    t0 = time.time()
                    try:
                        status = await post(conn, path, body, ctype)
                    except (OSError, asyncio.IncompleteReadError, ValueError, IndexError) as e:
                        status = type(e).__name__
                        conn = await asyncio.open_connection("127.0.0.1", port, local_addr=source)
                    # Latency from when the request was due: a server that falls behind shows it.
                    lat[kind].append(time.time() - (due if kind == "push" else t0))
                    if status == 200:
                        acked[kind] += 1
                    else:
                        errors[str(status)] = errors.get(str(status), 0) + 1
            conn[1].close()

        async def run_all() -> None:
            t_start = time.time() + 2.0
            await asyncio.gather(*(agent(h, t_start) for h in fleet))

        # What the idle server spends (the engine's housekeeping threads), for the CPU of
        # ingest net of it.
        idle0, t_idle = cpu_seconds(proc.pid), time.time()
        time.sleep(20)
        idle_cores = (cpu_seconds(proc.pid) - idle0) / (time.time() - t_idle)
        cpu0, wall0, self0 = cpu_seconds(proc.pid), time.time(), time.process_time()
        threads0 = cpu_by_thread(proc.pid)
        spy = None
        if args.profile:  # where the server's time goes: aiflame's own eBPF recorder (root)
            spy = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "aiflame",
                    "record",
                    "--ebpf",
                    "--pid",
                    str(proc.pid),
                    "-d",
                    str(int(args.duration * 0.8)),
                    "-r",
                    str(args.profile_hz),
                    "-o",
                    args.profile,
                ],
                env=dict(os.environ, PYTHONPATH=str(ROOT / "src")),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        asyncio.run(run_all())
        if spy is not None:
            spy.wait(120)
        schedule = [None] * (2 * periods * len(fleet))
        wall = time.time() - wall0
        server_cpu = cpu_seconds(proc.pid) - cpu0
        threads1 = cpu_by_thread(proc.pid)
        by_thread = {
            k: round(v - threads0.get(k, 0.0), 2)
            for k, v in sorted(threads1.items(), key=lambda kv: -kv[1])
            if v - threads0.get(k, 0.0) >= 0.05
        }
        # Then everything accepted is committed (pushes are answered once logged).
        t_flush = time.time()
        urllib.request.urlopen(
            urllib.request.Request(
                f"http://127.0.0.1:{port}/api/v1/admin/flush", data=b"", method="POST"
            ),
            timeout=600,
        ).read()
        backlog_s = time.time() - t_flush
        server_cpu_total = cpu_seconds(proc.pid) - cpu0
        time_total = time.time()
        client_cpu = time.process_time() - self0
        stats = json.loads(
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/admin/store").read()
        )
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
        dictionaries = {
            line.split('"')[1]: int(line.split()[-1])
            for line in metrics.splitlines()
            if line.startswith("aiflame_server_pprof_dictionaries_total{")
        }
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(60)
    tables = stats["tables"]
    stored = {
        "push": tables.get("profiles", {}).get("rows", 0),
        "telemetry": tables.get("telemetry_batches", {}).get("rows", 0),
    }
    profile_tables = (
        "samples",
        "samples_10m",
        "samples_1h",
        "stacks",
        "frames",
        "series",
        "profiles",
    )
    written = sum(tables.get(t, {}).get("compressed_bytes", 0) for t in profile_tables)
    merged = merged_sizes(work / "data", profile_tables)
    pprof_gz = statistics.mean(len(b) for b in unique_blobs)
    floor_after = decode_costs(unique_blobs[:100], rounds=5)
    costs = {k: min(floor_before[k], floor_after[k]) for k in floor_before}
    n_prof = max(acked["push"], 1)
    result = {
        "hosts": args.hosts,
        "duration_s": round(wall, 1),
        "offered_per_s": round(len(schedule) / wall, 1),
        "profiles_per_s": round(acked["push"] / wall, 1),
        "acked": acked,
        "stored": stored,
        "loss": {k: acked[k] - stored[k] for k in acked},
        "errors": errors,
        "latency_ms": {
            k: {
                "p50": round(1000 * pct(v, 50), 1),
                "p99": round(1000 * pct(v, 99), 1),
                "max": round(1000 * max(v), 1) if v else None,
            }
            for k, v in lat.items()
        },
        "server_cpu_cores": round(server_cpu / wall, 2),
        # during the run (threads that ended meanwhile are not counted)
        "server_cpu_s_by_thread": by_thread,
        "backlog_commit_s": round(backlog_s, 1),
        "server_cpu_ms_per_request": round(
            1000 * server_cpu_total / max(sum(acked.values()), 1), 2
        ),
        "client_cpu_cores": round(client_cpu / wall, 2),
        "pprof_gz_bytes": round(pprof_gz),
        "decode_ms": {k: round(1000 * v, 2) for k, v in costs.items()},
        "ratio_to_floor": round(
            server_cpu_total / max(sum(acked.values()), 1) / costs["gunzip_parse_read"], 2
        ),
        "server_idle_cores": round(idle_cores, 4),
        "ratio_to_floor_net_of_idle": round(
            (server_cpu_total - idle_cores * (time_total - wall0))
            / max(sum(acked.values()), 1)
            / costs["gunzip_parse_read"],
            2,
        ),
        "decode_ms_before_after": [
            round(1000 * floor_before["gunzip_parse_read"], 2),
            round(1000 * floor_after["gunzip_parse_read"], 2),
        ],
        "pprof_dictionaries": dictionaries,  # decoded before (hit) or in full (miss)
        "stored_bytes_per_profile": {
            "as_written": round(written / n_prof),
            "merged": round(merged / n_prof),
        },
    }
    result["stored_share_of_pprof_gz"] = {
        k: round(v / pprof_gz, 3) for k, v in result["stored_bytes_per_profile"].items()
    }
    return result


def merged_sizes(store: Path, tables: tuple[str, ...]) -> int:
    """Compressed bytes after the store's background merges have run to the end."""
    import clickhouse_connect

    c = clickhouse_connect.get_client(dsn=f"chdb://{store}")
    try:
        for t in tables:
            c.command(f"OPTIMIZE TABLE aiflame.{t} FINAL")
        rows = c.query(
            "SELECT sum(data_compressed_bytes) FROM system.parts WHERE database = 'aiflame' "
            "AND active AND table IN {t:Array(String)}",
            parameters={"t": list(tables)},
        ).result_rows
        return int(rows[0][0] or 0)
    finally:
        c.close()


def profile_cpu(args: argparse.Namespace) -> dict:
    """The server's CPU per profile when it only ingests profiles, against decoding."""
    args.duration = args.duration or 60
    return ingest(args)


def query(args: argparse.Namespace) -> dict:
    """Merged flame graph of N hosts over an hour."""
    from aiflame.server.ingest import hashing, pprof_columns, profiles
    from aiflame.server.query import flame
    from aiflame.server.query.select import Selection
    from aiflame.server.store import migrations, rollups, schema
    from aiflame.server.store.connection import open_store
    from aiflame.server.store.url import parse_store_url
    from aiflame.server.store.writer import Work, Writer

    work = OUT / f"query-{args.hosts}"
    shutil.rmtree(work, ignore_errors=True)
    store = open_store(parse_store_url(f"chdb://{work}/data"))
    migrations.migrate(store, schema.DEFAULT_RETENTION_S)
    fleet = fleet_sim.make_fleet(args.hosts)
    now = int(time.time())
    hour = (now // 3600 - 1) * 3600  # the last complete clock hour
    t_first = hour - 600  # data from 10 minutes before that hour to its end
    writer = Writer(store, flush_interval_s=0.05)
    strings = hashing.StringHashes()
    t0 = time.perf_counter()
    futs = []
    from aiflame.proto.pyroscope.push.v1 import push_pb2

    for h in fleet:
        body, _ = fleet_sim.push_body(h, h.index)
        msg = push_pb2.PushRequest.FromString(body)
        labels = {lb.name: lb.value for lb in msg.series[0].labels}
        raw = msg.series[0].samples[0].raw_profile
        cols = pprof_columns.decode(gzip.decompress(raw))
        cols.time_nanos = t_first * 1_000_000_000
        it = profiles.profile_item(
            cols,
            labels,
            tenant="bench",
            profile_id=msg.series[0].samples[0].ID,
            received_ms=t_first * 1000,
            pprof_bytes=len(raw),
            strings=strings,
        )
        futs.append(
            writer.submit(
                [Work(tables={}, key=("profiles", "bench", it.profile_id), profile_items=[it])]
            )
        )
    for f in futs:
        f.result(600)
    writer.close()
    ingest_s = time.perf_counter() - t0
    periods = (3600 + 600) // fleet_sim.PERIOD_S
    t0 = time.perf_counter()
    store.command(
        "INSERT INTO aiflame.samples SELECT tenant, profile_type, series_id, "
        "time + toIntervalSecond(10 * n.number), stack_id, value, 0 FROM aiflame.samples AS s, "
        f"numbers(1, {periods - 1}) AS n WHERE s.tenant = 'bench'"
    )
    for hh in (hour - 3600, hour, hour + 3600):
        store.command(
            "INSERT INTO aiflame.series SELECT tenant, profile_type, "
            "toDateTime({h:UInt32}, 'UTC'), series_id, labels FROM aiflame.series "
            "WHERE tenant = 'bench'",
            {"h": hh},
        )
    # The copies are rolled up as the writer rolls up its batches (they have no batch).
    for target in rollups.TARGETS:
        select = rollups.rollup_select("aiflame", target, "tenant = 'bench' AND batch_id = 0")
        store.command(f"INSERT INTO aiflame.{target} " + select)
    fill_s = time.perf_counter() - t0
    rows = store.rows("SELECT count() FROM aiflame.samples WHERE tenant = 'bench'")[0][0]
    rollup_rows = store.rows("SELECT count() FROM aiflame.samples_1h WHERE tenant = 'bench'")[0][0]
    cpu_type = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"
    out = {
        "hosts": args.hosts,
        "profiles": args.hosts * periods,
        "sample_rows": rows,
        "rollup_rows": rollup_rows,
        "ingest_s": round(ingest_s, 1),
        "fill_s": round(fill_s, 1),
    }
    for name, (a, b) in {
        "clock_hour": (hour * 1000, (hour + 3600) * 1000),
        "last_hour": ((hour - 600) * 1000, (hour + 3000) * 1000),
    }.items():
        sel = Selection.make("bench", cpu_type, "{}", a, b)
        timings = []
        symbols = flame.Symbols(store)
        for run in ("cold", "warm", "warm"):
            t0 = time.perf_counter()
            merged = flame.merged_stacks(store, symbols, sel)
            t1 = time.perf_counter()
            fg = flame.flame_graph(merged, symbols, 16384)
            t2 = time.perf_counter()
            timings.append(
                {
                    "run": run,
                    "sql_and_stacks_s": round(t1 - t0, 3),
                    "tree_s": round(t2 - t1, 3),
                    "total_s": round(t2 - t0, 3),
                }
            )
        nodes = sum(len(lv.values) // 4 for lv in fg.levels)
        out[name] = {
            "stacks": int(merged.values.size),
            "total": int(fg.total),
            "nodes": nodes,
            "timings": timings,
        }
    store.close()
    return out


def attribution(args: argparse.Namespace) -> dict:
    from aiflame.server.query import attribution as attr
    from aiflame.server.query.capacity import capacity as capacity_of
    from aiflame.server.store import migrations, schema
    from aiflame.server.store.connection import open_store
    from aiflame.server.store.url import parse_store_url

    work = OUT / f"attribution-{args.gpus}"
    shutil.rmtree(work, ignore_errors=True)
    store = open_store(parse_store_url(f"chdb://{work}/data"))
    migrations.migrate(store, schema.DEFAULT_RETENTION_S)
    hosts = args.gpus // 8
    workloads = int(hosts * 1.25)  # a quarter of the hosts run two jobs
    end = (int(time.time()) // 3600) * 3600
    start = end - args.days * 86400
    t0 = time.perf_counter()
    # What the telemetry of every workload makes of each bucket (the MV's sums).
    tables = (("workload_1h", 3600), ("workload_1m", 60))[: 1 if args.hourly_only else 2]
    for table, step in tables:
        store.command(
            f"INSERT INTO aiflame.{table} SELECT 'bench', "
            f"toDateTime({{s:UInt32}} + {step} * b.number, 'UTC'), "
            "cityHash64(w.number), map('team', concat('team-', toString(w.number % 20)), "
            "'job_id', concat('job-', toString(w.number % 100)), 'model', concat('model-', "
            "toString(w.number % 50)), "
            "'host', concat('gpu-node-', toString(w.number % {h:UInt32})), "
            "'gpu_model', 'NVIDIA H200'), "
            # a host's first job holds 6.4 GPUs on average, a second one 1.6 (8 in all)
            + ", ".join(
                f"{v} * {step} * if(w.number < {{h:UInt32}}, 1.0, 0.25)"
                for v in (6.4, 4.1, 6.4, 2.9, 6.4, 1.2e15, 6.4, 3000.0, 6.4, 5e8, 6.4)
            )
            + f", {step} / 10 FROM numbers({{nb:UInt32}}) AS b, numbers({{nw:UInt32}}) AS w",
            {"s": start, "h": hosts, "nb": args.days * 86400 // step, "nw": workloads},
        )
    # Every host's GPUs (8), whoever holds them: a tenth of the hosts keep 2 GPUs free.
    capacity = (("gpu_capacity_1h", 3600), ("gpu_capacity_1m", 60))[: 1 if args.hourly_only else 2]
    for table, step in capacity:
        store.command(
            f"INSERT INTO aiflame.{table} SELECT 'bench', "
            f"toDateTime({{s:UInt32}} + {step} * b.number, 'UTC'), "
            "concat('gpu-node-', toString(h.number)), 'NVIDIA H200', "
            f"8.0 * {step}, 4.1 * {step}, 8.0 * {step}, 8 "
            f"FROM numbers({{nb:UInt32}}) AS b, numbers({{nh:UInt32}}) AS h",
            {"s": start, "nb": args.days * 86400 // step, "nh": hosts},
        )
    tables = (*tables, *capacity)
    fill_s = time.perf_counter() - t0
    rows = {t: store.rows(f"SELECT count() FROM aiflame.{t}")[0][0] for t, _ in tables}
    out = {
        "gpus": args.gpus,
        "days": args.days,
        "workloads": workloads,
        "rows": rows,
        "fill_s": round(fill_s, 1),
    }
    for name, step in (("hourly", 3600), ("5min", 300))[: 1 if args.hourly_only else 2]:
        q = attr.Query("bench", start * 1000, end * 1000, step, "team", "", 10)
        times, cap_times = [], []
        for _ in range(3):
            t0 = time.perf_counter()
            r = attr.attribution(store, q)
            times.append(round(time.perf_counter() - t0, 3))
            t0 = time.perf_counter()
            capacity_of(store, q, attr._RAW)
            cap_times.append(round(time.perf_counter() - t0, 3))
        out[name] = {
            "buckets": len(r["timestamps"]),
            "groups": r["groups_total"],
            "hosts": len(r["hosts"]),
            "allocated_gpu_hours": round(r["fleet"]["allocated_gpu_hours"]),
            "capacity_gpu_hours": round(r["fleet"]["capacity_gpu_hours"]),
            "unallocated_gpu_hours": round(r["fleet"]["unallocated_gpu_hours"]),
            "seconds": times,
            "of which capacity": cap_times,
        }
    store.close()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="phase", required=True)
    a = sub.add_parser("ingest")
    a.add_argument("--hosts", type=int, default=100)
    a.add_argument("--duration", type=float, default=60)
    a.add_argument("--profiles-only", action="store_true", help="no telemetry: CPU per profile")
    a.add_argument(
        "--profile",
        metavar="FOLDED",
        help="record the server (aiflame record --ebpf) into this file, e.g. srv.folded",
    )
    a.add_argument("--profile-hz", type=int, default=49, help="--profile's sampling rate")
    a.add_argument("--src", help="run the server of these sources (default: this checkout's)")
    a.add_argument("--batch-seconds", type=float, help="the server's --batch-seconds")
    b = sub.add_parser("query")
    b.add_argument("--hosts", type=int, default=100)
    c = sub.add_parser("attribution")
    c.add_argument("--gpus", type=int, default=8000)
    c.add_argument("--days", type=int, default=7)
    c.add_argument("--hourly-only", action="store_true", help="only the hourly roll-up")
    args = p.parse_args()
    if getattr(args, "src", None):
        global SERVER_SRC
        SERVER_SRC = Path(args.src).resolve()
    if getattr(args, "batch_seconds", None):
        SERVER_ARGS.extend(["--batch-seconds", str(args.batch_seconds)])
    result = {"ingest": ingest, "query": query, "attribution": attribution}[args.phase](args)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
