"""What ``aiflame agent`` costs a host, beside what peers cost for a comparable job (root).

    sudo python benchmarks/bench_agent.py cpu [--seconds 600] [--churn 100] [--tools agent,...]
    sudo python benchmarks/bench_agent.py rss [--seconds 3600]  # 100 processes a minute
    sudo python benchmarks/bench_agent.py trace-latency [--trials 5]

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
import json
import os
import random
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


def start_agent(tmp: Path, extra: list[str] = ()) -> tuple[subprocess.Popen, int]:
    log = open(tmp / "agent.log", "w")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "aiflame", "agent", "--spool", str(tmp / "spool"),
         "--metrics-listen", "127.0.0.1:0", "--api-socket", str(tmp / "a.sock"),
         "--trace-dir", str(tmp / "traces"), "--no-kineto-abstract", *extra],
        stderr=log, stdout=subprocess.DEVNULL, env=ENV,
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
    stats_fd = enable_bpf_stats()
    if stats_fd is None:
        raise SystemExit("the kernel's BPF statistics cannot be enabled (root, Linux 5.8+)")
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
    args = p.parse_args()
    run = {"cpu": bench_cpu, "rss": bench_rss, "trace-latency": bench_trace_latency}[args.what]
    print(json.dumps(run(args), indent=1))


if __name__ == "__main__":
    main()
