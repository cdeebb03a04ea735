"""What ``aiflame agent`` costs a host, beside what peers cost for a comparable job (root).

    sudo python benchmarks/bench_agent.py cpu [--seconds 600] [--churn 100] [--tools agent,...]
    sudo python benchmarks/bench_agent.py rss [--seconds 3600]  # 100 processes a minute
    sudo python benchmarks/bench_agent.py trace-latency [--trials 5]
    sudo python benchmarks/bench_agent.py host [--seconds 3600] [--churn 150]
    sudo python benchmarks/bench_agent.py fixed-rate [--seconds 180] [--churn 150] [--src DIR]
    sudo python benchmarks/bench_agent.py pair --other-src DIR [--src DIR] [--seconds 240]

``host``: the agent at its defaults and bpftrace's profile at the same rate side by side,
in one run, on a host that starts ``--churn`` processes a minute (``Spawner``) beside two
busy Python services (``hot_model.py`` as ``svc-a`` and ``svc-b``, named by
``OTEL_SERVICE_NAME``), the agent pushing to a real ``aiflame server`` on loopback:

* cost of each tool (CPU + its BPF programs' run time) as a share of one core, and the
  machine's whole CPU use beside it (the load of others' work on a shared machine);
* samples per CPU-second of each service: the agent's, as the server has them
  (``SelectSeries`` of ``process_cpu:samples:count``), and bpftrace's, from its printed maps
  (by pid), over the services' CPU time in the window;
* the agent's VmRSS every 30 s, its sampling rate, the processes it saw start;
* whether bpftrace ran throughout: it is reported as failed when its output holds no
  samples of the services, with its stderr and the perf events it held at the start and
  the end of the window. bpftrace 0.17 (Debian 12's) closes perf events of its own while
  it symbolizes the stacks of processes that have ended, on such a host: its probes stop
  and the comparison is void. Run a current release instead, e.g. Debian 13's from a
  chroot (``debootstrap --variant=minbase --include=bpftrace trixie DIR``, ``/proc``,
  ``/sys`` and ``/dev`` bind-mounted in it) with ``--bpftrace "chroot DIR bpftrace"``;
* series: ``process_cpu`` series in the server over the window (as Pyroscope counts them:
  one per sample type) and their distinct label sets, beside the
  workloads they belong to (distinct ``service_name``) and the processes seen.

``cpu``: both cores are kept busy by a Python program (``tests/agent/programs/
hot_model.py``) and a native one (a C spin loop built here), for ``--seconds`` per tool,
one tool at a time:

* ``aiflame agent`` at its defaults (19 Hz, every process, Python walked in the kernel,
  CUDA probes on, a profile per process every 10 s to the spool, /metrics served);
* ``bpftrace -e 'profile:hz:19 { @[ustack, kstack, pid, comm] = count(); }
  interval:s:10 { print(@); clear(@); }'``: every process's user and kernel stacks at the
  same rate, printed (symbolized) every 10 s, the nearest job bpftrace does (no Python
  frames);
* ``py-spy record --rate 19 --nonblocking`` of the Python program alone (py-spy samples
  one process tree, and Python frames only).

``--churn N`` also starts N short-lived processes a minute throughout (as ``rss`` does),
for the per-new-process costs (naming, maps, symbols) that the sampling rate does not
change.

Cost of a tool = its process's CPU time (utime + stime, from ``/proc/PID/stat``) plus the
run time of the BPF programs it holds (``run_time_ns`` of their descriptors'
``/proc/PID/fdinfo``, with the kernel's BPF statistics on while this runs), as a share of
one core over the window.

``rss``: the agent runs while a spawner starts 100 short-lived processes a minute (a
Python process doing 50 ms of work, a shell pipeline), each with its own PID; the agent's
VmRSS is read every 30 s.

``trace-latency``: a CPU PyTorch training loop started with ``KINETO_USE_DAEMON=1`` is
traced with ``aiflame trace --duration-ms 500`` ``--trials`` times: the time from the
command to the trace on disk, split into the wait for libkineto's next poll (5 s period)
and the rest (the trace itself, its export, compression).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from aiflame.agent.budget import enable_bpf_stats  # noqa: E402

PROGRAMS = ROOT / "tests" / "agent" / "programs"
SPIN_C = r"""
#include <stdlib.h>
#include <time.h>
static volatile unsigned long sink;
__attribute__((noinline)) static void spin(void) { for (int i = 0; i < 100000; i++) sink += i; }
__attribute__((noinline)) static void work(void) { spin(); }
int main(int argc, char **argv) {
    time_t end = time(NULL) + atoi(argv[1]);
    while (time(NULL) < end) work();
    return 0;
}
"""
CLK_TCK = os.sysconf("SC_CLK_TCK")
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}


class Spawner(threading.Thread):
    """Starts ``per_minute`` short-lived processes a minute, one after the other, until
    stopped: a Python process doing ~50 ms of work and, every other one, a shell pipeline
    (``seq | sort | tail``), each with its own PID (a host's churn: cron jobs, probes,
    compilers)."""

    def __init__(self, per_minute: float) -> None:
        super().__init__(daemon=True)
        self.interval = 60.0 / per_minute
        self.spawned = 0
        self.stop_event = threading.Event()

    def run(self) -> None:
        t0 = time.monotonic()
        while not self.stop_event.is_set():
            if self.spawned % 2 == 0:
                cmd = [sys.executable, "-c", "s=0\nfor i in range(10**6): s+=i"]
            else:
                cmd = ["sh", "-c", "seq 20000 | sort -n | tail -1 >/dev/null"]
            subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL)
            self.spawned += 1
            self.stop_event.wait(max(0.0, t0 + self.spawned * self.interval - time.monotonic()))

    def stop(self) -> None:
        self.stop_event.set()
        self.join(30)


def bpf_stats_on() -> int:
    """A descriptor that keeps the kernel's BPF run-time statistics on while it is open."""
    fd = enable_bpf_stats()
    if fd is None:
        raise SystemExit("the kernel's BPF statistics cannot be enabled (root, Linux 5.8+)")
    return fd


def start_services(seconds: float) -> list[tuple[subprocess.Popen, str]]:
    """The two busy Python services (``hot_model.py``), named by ``OTEL_SERVICE_NAME``."""
    return [
        (subprocess.Popen([sys.executable, str(PROGRAMS / "hot_model.py"), str(seconds)],
                          env={**os.environ, "OTEL_SERVICE_NAME": name}), name)
        for name in SERVICES
    ]  # fmt: skip


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def bpf_seconds(pid: int) -> float:
    """Run time of the BPF programs ``pid`` holds descriptors of."""
    total = 0
    base = f"/proc/{pid}/fdinfo"
    for fd in os.listdir(base):
        try:
            with open(os.path.join(base, fd)) as f:
                text = f.read()
        except OSError:
            continue
        if "prog_id:" in text:
            for line in text.splitlines():
                if line.startswith("run_time_ns:"):
                    total += int(line.split()[1])
    return total / 1e9


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def rate_said(log: Path) -> list[str]:
    """What an agent said of each change of its sampling rate, and why (its stderr)."""
    return [line for line in log.read_text().splitlines() if "CPU sampling at" in line]


def perf_event_fds(pid: int) -> int:
    """How many perf events a process holds open (its probes and its ring buffers)."""
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):  # closed meanwhile
            count += os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:[perf_event]"
    return count


def stop(proc: subprocess.Popen, sig: int = signal.SIGINT, wait_s: float = 30.0) -> None:
    """Ask a tool to stop (bpftrace prints its maps at exit: it may take long), then kill."""
    proc.send_signal(sig)
    try:
        proc.wait(wait_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def build_spin(tmp: Path) -> Path:
    src, exe = tmp / "spin.c", tmp / "spin"
    src.write_text(SPIN_C)
    subprocess.run(["gcc", "-O1", "-fno-omit-frame-pointer", "-o", str(exe), str(src)], check=True)
    return exe


def start_agent(
    tmp: Path, extra: tuple[str, ...] | list[str] = (), env: dict[str, str] | None = None
) -> tuple[subprocess.Popen, int]:
    log = open(tmp / "agent.log", "w")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "aiflame", "agent", "--spool", str(tmp / "spool"),
         "--metrics-listen", "127.0.0.1:0", "--api-socket", str(tmp / "a.sock"),
         "--trace-dir", str(tmp / "traces"), "--no-kineto-abstract", *extra],
        stderr=log, stdout=subprocess.DEVNULL, env=env or ENV,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        text = (tmp / "agent.log").read_text()
        if "started:" in text:
            port = int(text.split("/metrics on ")[1].split(",")[0].rsplit(":", 1)[1])
            return proc, port
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    raise SystemExit(f"the agent did not start:\n{(tmp / 'agent.log').read_text()}")


def metric(port: int, name: str) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith(name):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


def measure(pid: int, seconds: float) -> dict[str, float]:
    c0, b0, t0 = cpu_seconds(pid), bpf_seconds(pid), time.monotonic()
    time.sleep(seconds)
    c1, b1, t1 = cpu_seconds(pid), bpf_seconds(pid), time.monotonic()
    wall = t1 - t0
    return {"wall_s": wall, "cpu_s": c1 - c0, "bpf_s": b1 - b0, "share": (c1 - c0 + b1 - b0) / wall}


def bench_cpu(args: argparse.Namespace) -> dict[str, object]:
    stats_fd = bpf_stats_on()
    tmp = Path(tempfile.mkdtemp(prefix="bench-agent-"))
    spin = build_spin(tmp)
    warm = 20.0
    total = args.seconds + warm + 30
    work = [
        subprocess.Popen([sys.executable, str(PROGRAMS / "hot_model.py"), str(total * 3 + 60)]),
        subprocess.Popen([str(spin), str(int(total * 3 + 60))]),
    ]
    results: dict[str, object] = {
        "seconds": args.seconds,
        "churn_per_minute": args.churn,
        "load": os.getloadavg(),
    }
    spawner = Spawner(args.churn) if args.churn > 0 else None
    if spawner is not None:
        spawner.start()
    tools = set(args.tools.split(","))
    try:
        for name, extra in (
            ("aiflame agent", []),
            ("aiflame agent, budget off (19 Hz)", ["--cpu-budget-percent", "0"]),
        ):
            if ("agent" if not extra else "agent-19hz") not in tools:
                continue
            agent, port = start_agent(tmp, extra)
            time.sleep(warm)  # the first periods read every file's symbols
            seen0 = sum(metric(port, "aiflame_processes_seen_total").values())
            r = measure(agent.pid, args.seconds)
            r["rate_hz"] = sum(metric(port, "aiflame_sampling_rate_hz").values())
            r["new_processes"] = sum(metric(port, "aiflame_processes_seen_total").values()) - seen0
            results[name] = r
            stop(agent, signal.SIGTERM)
            shutil.rmtree(tmp / "spool", ignore_errors=True)
            print(json.dumps(results), file=sys.stderr, flush=True)  # partial results
        if "bpftrace" in tools and shutil.which("bpftrace"):
            script = (
                "profile:hz:19 { @[ustack, kstack, pid, comm] = count(); } "
                "interval:s:10 { print(@); clear(@); }"
            )
            bt = subprocess.Popen(
                ["bpftrace", "-e", script], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            time.sleep(warm)
            results["bpftrace"] = measure(bt.pid, args.seconds)
            stop(bt)
        if "py-spy" in tools and shutil.which("py-spy"):
            ps = subprocess.Popen(
                ["py-spy", "record", "--pid", str(work[0].pid), "--rate", "19", "--nonblocking",
                 "--format", "raw", "-o", str(tmp / "pyspy.txt")],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            time.sleep(warm)
            results["py-spy (Python program only)"] = measure(ps.pid, args.seconds)
            stop(ps)
    finally:
        if spawner is not None:
            spawner.stop()
            results["churn_spawned"] = spawner.spawned
        for w in work:
            w.kill()
            w.wait()
        os.close(stats_fd)
        shutil.rmtree(tmp, ignore_errors=True)
    results["load_after"] = os.getloadavg()
    return results


def rss_split_mb(pid: int) -> tuple[float, float]:
    """(RssAnon, RssFile) of ``pid`` in MB: what it holds, and the file pages it maps."""
    got = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("RssAnon:", "RssFile:")):
                got[line.split(":")[0]] = int(line.split()[1]) / 1024
    return round(got.get("RssAnon", 0.0), 1), round(got.get("RssFile", 0.0), 1)


def bench_rss(args: argparse.Namespace) -> dict[str, object]:
    if args.src:  # another checkout's sources (the version before a change, say)
        ENV["PYTHONPATH"] = str(Path(args.src).resolve())
    tmp = Path(tempfile.mkdtemp(prefix="bench-agent-"))
    agent, _ = start_agent(tmp)
    torch_loop = None
    if args.torch:  # a long-lived PyTorch process, as a GPU host runs: libtorch's symbols
        torch_loop = subprocess.Popen(
            [
                sys.executable,
                str(PROGRAMS / "train_loop.py"),
                str(args.seconds + 60),
                str(tmp / "r"),
            ],
            stdout=subprocess.DEVNULL,
        )
    points: list[tuple[float, float]] = []
    split: list[tuple[float, float, float]] = []
    spawner = Spawner(100)  # 100 short-lived processes a minute
    spawner.start()
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < args.seconds:
            now = time.monotonic()
            points.append((round(now - t0, 1), round(rss_mb(agent.pid), 1)))
            split.append((round(now - t0, 1), *rss_split_mb(agent.pid)))
            time.sleep(max(0.0, min(30.0, args.seconds - (time.monotonic() - t0))))
        points.append((round(time.monotonic() - t0, 1), round(rss_mb(agent.pid), 1)))
    finally:
        spawner.stop()
        if torch_loop is not None:
            torch_loop.kill()
            torch_loop.wait()
        agent.send_signal(signal.SIGTERM)
        agent.wait(60)
        shutil.rmtree(tmp, ignore_errors=True)
    later = [m for t, m in points if t >= args.seconds / 2]
    return {
        "seconds": args.seconds,
        "processes": spawner.spawned,
        "rss_mb": points,
        "anon_file_mb": split,
        "rss_first_mb": points[0][1],
        "rss_max_mb": max(m for _, m in points),
        "rss_second_half_spread_mb": round(max(later) - min(later), 1) if later else None,
    }


def bench_trace_latency(args: argparse.Namespace) -> dict[str, object]:
    tmp = Path(tempfile.mkdtemp(prefix="bta", dir="/tmp"))
    agent, _ = start_agent(tmp, ["--no-cuda", "--kineto-socket-dir", str(tmp / "k")])
    env = {**os.environ, "KINETO_USE_DAEMON": "1", "KINETO_IPC_SOCKET_DIR": str(tmp / "k")}
    ready = tmp / "ready"
    loop = subprocess.Popen(
        [sys.executable, str(PROGRAMS / "train_loop.py"), "3600", str(ready)], env=env
    )
    trials = []
    try:
        deadline = time.monotonic() + 180
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        time.sleep(6)  # registered with the agent (one poll)
        for _ in range(args.trials):
            t = time.monotonic()
            request = {"pids": [loop.pid], "duration_ms": 500, "output_dir": str(tmp / "out")}
            code = (
                "import json; from aiflame.agent.api import unix_request; "
                f"print(json.dumps(unix_request({str(tmp / 'a.sock')!r}, 'POST', '/v1/trace', "
                f"{request!r}, 600)))"
            )
            run = subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, env=ENV, check=True
            )
            total = time.monotonic() - t
            _, answer = json.loads(run.stdout)
            tr = answer["traces"][0]
            after = round(tr["written_after_s"] - tr["poll_wait_s"], 2)
            trials.append(
                {
                    "total_s": round(total, 2),
                    "poll_wait_s": tr["poll_wait_s"],
                    "after_poll_s": after,
                }
            )
            time.sleep(random.uniform(0.0, 5.0))  # a random phase of libkineto's 5 s poll
    finally:
        loop.kill()
        loop.wait()
        agent.send_signal(signal.SIGTERM)
        agent.wait(60)
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "trials": trials,
        "median_total_s": statistics.median(t["total_s"] for t in trials),
        "median_poll_wait_s": statistics.median(t["poll_wait_s"] for t in trials),
        "median_after_poll_s": statistics.median(t["after_poll_s"] for t in trials),
    }


SERVICES = ("svc-a", "svc-b")
CPU_TYPE = "process_cpu:samples:count:cpu:nanoseconds"
BPFTRACE_19 = (
    "profile:hz:19 { @[ustack, kstack, pid, comm] = count(); } "
    "interval:s:10 { print(@); clear(@); }"
)


def machine_cpu_seconds() -> float:
    """CPU time the whole machine spent busy (every core), from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / CLK_TCK


def start_server(tmp: Path) -> tuple[subprocess.Popen, str]:
    """A real aiflame server on loopback (embedded store in ``tmp``)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(tmp / "server.log", "w")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "aiflame", "server", "--listen", f"127.0.0.1:{port}",
         "--store", f"chdb://{tmp / 'store'}"],
        stdout=log, stderr=log, env=ENV,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/ready", timeout=5) as r:
                if r.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"the server did not start:\n{(tmp / 'server.log').read_text()}")


def connect(url: str, method: str, body: dict[str, object]) -> dict:
    """A Connect JSON call to the server's querier."""
    req = urllib.request.Request(
        f"{url}/querier.v1.QuerierService/{method}", json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r)


def server_samples(url: str, service: str, t0: float, t1: float) -> float:
    """CPU samples of ``service`` in profiles that started in [t0, t1)."""
    answer = connect(url, "SelectSeries", {
        "profileTypeID": CPU_TYPE, "labelSelector": f'{{service_name="{service}"}}',
        "start": int(t0 * 1000), "end": int(t1 * 1000) - 1, "step": t1 - t0 + 1,
    })  # fmt: skip
    return sum(float(p.get("value", 0)) for s in answer.get("series", []) for p in s["points"])


def server_samples_by_service(url: str, t0: float, t1: float) -> dict[str, float]:
    """CPU samples of every service_name in profiles that started in [t0, t1)."""
    answer = connect(url, "SelectSeries", {
        "profileTypeID": CPU_TYPE, "labelSelector": "{}", "groupBy": ["service_name"],
        "start": int(t0 * 1000), "end": int(t1 * 1000) - 1, "step": t1 - t0 + 1,
    })  # fmt: skip
    out = {}
    for s in answer.get("series", []):
        name = next((lp["value"] for lp in s.get("labels", []) if lp["name"] == "service_name"), "")
        out[name] = sum(float(p.get("value", 0)) for p in s["points"])
    return out


def server_series(url: str, t0: float, t1: float) -> list[dict[str, str]]:
    answer = connect(url, "Series", {
        "matchers": ['{__name__="process_cpu"}'],
        "start": int(t0 * 1000), "end": int(t1 * 1000),
    })  # fmt: skip
    return [
        {lp["name"]: lp["value"] for lp in s.get("labels", [])} for s in answer.get("labelsSet", [])
    ]


def series_by_workload(series: list[dict[str, str]], top: int = 5) -> dict[str, object]:
    """The workloads with the most series, and the labels whose values tell them apart."""
    by: dict[str, list[dict[str, str]]] = {}
    for s in series:
        by.setdefault(s.get("service_name", ""), []).append(s)
    out: dict[str, object] = {}
    for name, sets in sorted(by.items(), key=lambda kv: -len(kv[1]))[:top]:
        keys = {k for s in sets for k in s}
        varying = sorted(k for k in keys if len({s.get(k) for s in sets}) > 1)
        out[name] = {"series": len(sets), "varying": varying}
    return out


def bpftrace_samples(text: str, pids: dict[int, str]) -> dict[str, int]:
    """Samples per service from bpftrace's printed maps (``..., PID, comm]: N``)."""
    import re

    out = dict.fromkeys(pids.values(), 0)
    for m in re.finditer(r", (\d+), [^\]\n]*\]: (\d+)", text):
        pid = int(m.group(1))
        if pid in pids:
            out[pids[pid]] += int(m.group(2))
    return out


def bench_host(args: argparse.Namespace) -> dict[str, object]:
    stats_fd = bpf_stats_on()
    bpftrace = shlex.split(args.bpftrace)
    if not shutil.which(bpftrace[0]):
        raise SystemExit(f"{bpftrace[0]} is not installed (apt-get install bpftrace)")
    tmp = Path(tempfile.mkdtemp(prefix="bench-host-"))
    total = args.seconds + 120
    procs: list[subprocess.Popen] = []
    results: dict[str, object] = {"seconds": args.seconds, "churn_per_minute": args.churn}
    server, url = start_server(tmp)
    procs.append(server)
    services = {}
    for p, name in start_services(total + 60):
        procs.append(p)
        services[p.pid] = name
    spawner = Spawner(args.churn)
    spawner.start()
    fixed = ["--cpu-budget-percent", "0"] if args.budget_off else []
    agent, port = start_agent(tmp, ["--server", url, *fixed])
    bt_out = open(tmp / "bpftrace.txt", "w")  # noqa: SIM115
    # as bpftrace's users run it (its maps of 4,096 keys: a busy host's stacks of 10 s may
    # fill them, and samples of keys that find no room are lost: said on its stderr)
    bt_err = open(tmp / "bpftrace.err", "w")  # noqa: SIM115
    bt = subprocess.Popen([*bpftrace, "-B", "line", "-e", BPFTRACE_19], stdout=bt_out,
                          stderr=bt_err)  # fmt: skip
    tools = {"aiflame agent": agent.pid, "bpftrace": bt.pid}
    if args.compare_src:  # another version of the agent beside (spool only: not in the series)
        other_tmp = tmp / "other"
        other_tmp.mkdir()
        other_env = {**ENV, "PYTHONPATH": str(Path(args.compare_src).resolve())}
        other, other_port = start_agent(other_tmp, fixed, env=other_env)
        procs.append(other)
        tools[f"aiflame agent of {args.compare_src}"] = other.pid
    try:
        time.sleep(args.warmup)  # the agent's start reads every running program's symbols
        bt_start = (tmp / "bpftrace.txt").stat().st_size
        bt_events = perf_event_fds(bt.pid)
        t0, m0 = time.time(), machine_cpu_seconds()
        c0 = {k: (cpu_seconds(p), bpf_seconds(p)) for k, p in tools.items()}
        s0 = {n: cpu_seconds(p) for p, n in services.items()}
        seen0 = sum(metric(port, "aiflame_processes_seen_total").values())
        spawned0 = spawner.spawned
        points, rates, loads = [], [], []
        bt_exited = None  # when bpftrace ended by itself, if it did (its stderr says why)
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            if bt_exited is None and bt.poll() is not None:
                bt_exited = round(time.time() - t0)
            points.append((round(time.time() - t0), round(rss_mb(agent.pid), 1)))
            rates.append(
                (round(time.time() - t0), sum(metric(port, "aiflame_sampling_rate_hz").values()))
            )
            loads.append(round(os.getloadavg()[0], 2))
            time.sleep(max(0.0, min(30.0, end - time.monotonic())))
        t1, m1 = time.time(), machine_cpu_seconds()
        wall = t1 - t0
        c1 = {k: (cpu_seconds(p), bpf_seconds(p)) for k, p in tools.items()}
        # its maps printed up to t1 only (each print holds the 10 s before it: the window's
        # first print reaches before t0 as much as the last stops short of t1)
        bt_end = (tmp / "bpftrace.txt").stat().st_size
        bt_rss = rss_mb(bt.pid) if bt.poll() is None else None
        bt_events_end = perf_event_fds(bt.pid) if bt.poll() is None else 0
        s1 = {n: cpu_seconds(p) for p, n in services.items()}
        points.append((round(t1 - t0), round(rss_mb(agent.pid), 1)))
        lowered = sum(metric(port, "aiflame_sampling_lowered_seconds_total").values())
        if args.compare_src:  # (its samples are in its spool: its rate says how many)
            other_lowered = sum(
                metric(other_port, "aiflame_sampling_lowered_seconds_total").values()
            )
            other_said = rate_said(tmp / "other" / "agent.log")
        seen = sum(metric(port, "aiflame_processes_seen_total").values()) - seen0
        for name, (c, b) in c0.items():
            cpu, bpf = c1[name][0] - c, c1[name][1] - b
            results[name] = {
                "cpu_s": round(cpu, 2), "bpf_s": round(bpf, 3),
                "share_percent": round((cpu + bpf) / wall * 100, 3),
            }  # fmt: skip
        ours = sum(c1[k][0] - c0[k][0] for k in tools) + sum(s1[n] - s0[n] for n in s0)
        if args.compare_src:
            other_result = results[f"aiflame agent of {args.compare_src}"]
            assert isinstance(other_result, dict)
            other_result["lowered_s"] = other_lowered
            other_result["rate_said"] = other_said[:60]
        results["machine"] = {
            "cores": os.cpu_count(),
            "busy_cores": round((m1 - m0) / wall, 2),
            "busy_cores_not_the_benchmarks": round((m1 - m0 - ours) / wall, 2),
            "load_average": [min(loads), max(loads)],
        }
        time.sleep(25)  # the last periods reach the server and its store
        stop(bt)
        bt_out.close()
        with open(tmp / "bpftrace.txt") as f:
            f.seek(bt_start)
            bt_counts = bpftrace_samples(f.read(bt_end - bt_start), services)
        bt_err.close()
        errors = (tmp / "bpftrace.err").read_text().splitlines()
        bt_result = results["bpftrace"]
        assert isinstance(bt_result, dict)
        bt_result["rss_mb_at_end"] = round(bt_rss, 1) if bt_rss is not None else None
        # bpftrace 0.17 (bcc's symbols) may close its own perf events while it symbolizes
        # the stacks of processes that have ended: its probes then stop firing
        bt_result["perf_event_fds"] = [bt_events, bt_events_end]
        bt_result["stderr_lines"] = len(errors)
        bt_result["stderr_first"] = errors[:3]
        bt_result["stderr_last"] = errors[-3:]
        if bt_exited is not None:
            bt_result["exited_by_itself_after_s"] = bt_exited
            bt_result["returncode"] = bt.returncode
        per_service = {}
        for name in SERVICES:
            cpu = s1[name] - s0[name]
            got = server_samples(url, name, t0, t1)
            per_service[name] = {
                "cpu_s": round(cpu, 1),
                "agent_samples_per_cpu_s": round(got / cpu, 2) if cpu else None,
                "bpftrace_samples_per_cpu_s": round(bt_counts[name] / cpu, 2) if cpu else None,
            }
        results["services"] = per_service
        if not any(bt_counts.values()):  # its output unreadable or empty: no comparison
            bt_result["failed"] = "no samples of the services in its output: rerun"
        # whose samples the agent took: the services, the spawner's programs, the rest of
        # the machine (others' work on a shared host is profiled too, and costs)
        by_service = server_samples_by_service(url, t0, t1)
        churn = {"python3", "sh", "seq", "sort", "tail"}
        total = sum(by_service.values()) or 1.0
        results["samples_share"] = {
            "services": round(sum(by_service.get(n, 0) for n in SERVICES) / total, 3),
            "spawned programs": round(
                sum(v for k, v in by_service.items() if k in churn) / total, 3
            ),
            "kernel": round(by_service.get("kernel", 0) / total, 3),
            "the rest of the machine": round(
                sum(v for k, v in by_service.items()
                    if k not in churn and k not in SERVICES and k != "kernel") / total, 3),
            "samples": int(total),
        }  # fmt: skip
        series = server_series(url, t0, t1)
        label_sets = {tuple(sorted((k, v) for k, v in s.items() if k[:2] != "__")) for s in series}
        results["series"] = {
            "in_server": len(series),  # Pyroscope's count: one per sample type
            "label_sets": len(label_sets),
            "workloads (service_name)": len({s.get("service_name") for s in series}),
            "programs (comm)": len({s.get("comm") for s in series}),
            "processes_seen_by_agent": seen,
            "spawned_by_benchmark": spawner.spawned - spawned0,
            "with_pid_label": sum(1 for s in series if "pid" in s),
            "most_series": series_by_workload(series),
        }
        results["agent"] = {
            "rate_hz_min_max": [min(r for _, r in rates), max(r for _, r in rates)],
            # (seconds into the window, Hz) where the rate read every 30 s changed
            "rate_hz_changes": [p for i, p in enumerate(rates) if not i or p[1] != rates[i - 1][1]],
            "rate_said": rate_said(tmp / "agent.log")[:60],
            "lowered_s": lowered,
            "rss_mb": points,
            "rss_first_mb": points[0][1],
            "rss_max_mb": max(m for _, m in points),
            "rss_second_half_spread_mb": round(
                max(m for t, m in points if t >= wall / 2)
                - min(m for t, m in points if t >= wall / 2), 1
            ),
        }  # fmt: skip
    finally:
        spawner.stop()
        stop(agent, signal.SIGTERM)
        if bt.poll() is None:
            stop(bt)
        clean_up(procs, stats_fd, tmp)
    return results


def clean_up(procs: list[subprocess.Popen], stats_fd: int, tmp: Path) -> None:
    for p in procs:
        p.kill()
        p.wait()
    os.close(stats_fd)
    shutil.rmtree(tmp, ignore_errors=True)


def bench_fixed_rate(args: argparse.Namespace) -> dict[str, object]:
    """The agent at a fixed 19 Hz (budget off, no destination) beside the two services and
    ``--churn`` processes a minute: what its defaults cost before the budget steps in
    (``--src``: the agent of other sources, for a before/after on the same machine)."""
    stats_fd = bpf_stats_on()
    tmp = Path(tempfile.mkdtemp(prefix="bench-fixed-"))
    procs = [p for p, _ in start_services(args.seconds + 180)]
    spawner = Spawner(args.churn)
    spawner.start()
    env = {**ENV, "PYTHONPATH": str(Path(args.src).resolve())} if args.src else None
    agent, _ = start_agent(tmp, ["--cpu-budget-percent", "0"], env=env)
    try:
        time.sleep(60)  # the agent's start reads every running program's symbols
        spawned0 = spawner.spawned
        result: dict[str, object] = dict(measure(agent.pid, args.seconds))
        result["spawned"] = spawner.spawned - spawned0
    finally:
        spawner.stop()
        stop(agent, signal.SIGTERM)
        clean_up(procs, stats_fd, tmp)
    return result


def bench_pair(args: argparse.Namespace) -> dict[str, object]:
    """Two versions of the agent side by side in one run (``--src`` DIR, ``--other-src``
    DIR), each at a fixed 19 Hz (budget off) pushing to its own ``aiflame server``, beside
    the two services and ``--churn`` processes a minute: a before/after that both halves
    see the same churn for (each also samples the other and its server, so both cost more
    than one agent alone)."""
    stats_fd = bpf_stats_on()
    tmp = Path(tempfile.mkdtemp(prefix="bench-pair-"))
    procs = [p for p, _ in start_services(args.seconds + 240)]
    spawner = Spawner(args.churn)
    spawner.start()
    agents: dict[str, subprocess.Popen] = {}
    try:
        for i, src in enumerate((args.src, args.other_src)):
            here = tmp / f"agent-{i}"
            here.mkdir()
            server, url = start_server(here)
            procs.append(server)
            env = {**ENV, "PYTHONPATH": str(Path(src).resolve())}
            agent, _ = start_agent(here, ["--server", url, "--cpu-budget-percent", "0"], env=env)
            procs.append(agent)
            agents[src] = agent
        time.sleep(45)  # the agents' start reads every running program's symbols
        c0 = {src: (cpu_seconds(a.pid), bpf_seconds(a.pid)) for src, a in agents.items()}
        t0, spawned0 = time.monotonic(), spawner.spawned
        time.sleep(args.seconds)
        wall = time.monotonic() - t0
        result: dict[str, object] = {"seconds": round(wall), "spawned": spawner.spawned - spawned0}
        for src, a in agents.items():
            cpu, bpf = cpu_seconds(a.pid) - c0[src][0], bpf_seconds(a.pid) - c0[src][1]
            result[src] = {"cpu_s": round(cpu, 2), "bpf_s": round(bpf, 3),
                           "share_percent": round((cpu + bpf) / wall * 100, 3)}  # fmt: skip
    finally:
        spawner.stop()
        for a in agents.values():
            stop(a, signal.SIGTERM)
        clean_up(procs, stats_fd, tmp)
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    cpu = sub.add_parser("cpu")
    cpu.add_argument("--seconds", type=float, default=600)
    cpu.add_argument(
        "--churn", type=float, default=0, help="also start N short-lived processes a minute"
    )
    cpu.add_argument(
        "--tools",
        default="agent,agent-19hz,bpftrace,py-spy",
        help="which to measure (comma-separated: agent, agent-19hz, bpftrace, py-spy)",
    )
    rss = sub.add_parser("rss")
    rss.add_argument("--seconds", type=float, default=3600)
    rss.add_argument("--torch", action="store_true", help="a PyTorch training loop runs too")
    rss.add_argument("--src", help="run the agent of these sources (default: this checkout's)")
    lat = sub.add_parser("trace-latency")
    lat.add_argument("--trials", type=int, default=5)
    host = sub.add_parser("host")
    host.add_argument("--seconds", type=float, default=3600)
    host.add_argument("--churn", type=float, default=150, help="processes started a minute")
    host.add_argument("--warmup", type=float, default=60)
    host.add_argument(
        "--compare-src", help="also run the agent of these sources beside it (spool only)"
    )
    host.add_argument(
        "--budget-off", action="store_true", help="the agents at the full rate throughout"
    )
    host.add_argument(
        "--bpftrace",
        default="bpftrace",
        help="the command that runs bpftrace (e.g. 'chroot DIR bpftrace' for another release)",
    )
    fixed = sub.add_parser("fixed-rate")
    fixed.add_argument("--seconds", type=float, default=180)
    fixed.add_argument("--churn", type=float, default=150, help="processes started a minute")
    fixed.add_argument("--src", help="run the agent of these sources (default: this checkout's)")
    pair = sub.add_parser("pair")
    pair.add_argument("--seconds", type=float, default=240)
    pair.add_argument("--churn", type=float, default=150, help="processes started a minute")
    pair.add_argument("--src", default=str(ROOT / "src"), help="one agent's sources")
    pair.add_argument("--other-src", required=True, help="the other agent's sources")
    args = p.parse_args()
    run = {"cpu": bench_cpu, "rss": bench_rss, "trace-latency": bench_trace_latency,
           "host": bench_host, "fixed-rate": bench_fixed_rate,
           "pair": bench_pair}[args.what]  # fmt: skip
    print(json.dumps(run(args), indent=1))


if __name__ == "__main__":
    main()
