"""How long ``aiflame record`` keeps the user waiting once the recorded program has exited.

    python benchmarks/bench_record_tail.py [--runs 3] [--seconds 10] [--variant NAME ...]

Each run is ``aiflame record -- python benchmarks/record_workload.py --train SECONDS`` as a
user types it (CPU PyTorch: a small conv net trained for SECONDS; the default outputs, an
HTML page and a pprof file, in a temporary directory), and measures:

* **last line**: the workload's last statement (it prints the time);
* **exit**: the moment the program's process ends, seen in ``/proc`` (polled every 5 ms:
  the process turns into a zombie, or is gone). Between the two: the interpreter's
  shutdown (torch's own takes about a second without any profiler), and the PyTorch
  window's export when the program ends inside it;
* **written**: the moment both output files exist (``record`` writes each to a temporary
  name and renames it, so a file that exists is complete);
* **done**: the moment ``record`` exits.

The figure is *exit -> written*: the silence after the program's last line. Variants: the
root default (eBPF sampler with Python stacks walked in the kernel, PyTorch window on),
``--gpu off`` (no PyTorch window) and ``--no-ebpf`` (py-spy, the non-root path).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / "record_workload.py"
SRC = HERE.parent / "src"  # the aiflame of this checkout, wherever record runs (--src: another)
VARIANTS = {
    "default": [],
    "gpu-off": ["--gpu", "off"],
    "no-ebpf": ["--no-ebpf"],
}
POLL_S = 0.005


def program_of(pid: int) -> int | None:
    """The workload among ``pid``'s children (record runs helpers too, e.g. ldconfig)."""
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in children:
            try:
                cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
            except OSError:
                continue
            # argv[1]: a child forked but not yet exec'd still shows record's command line
            if cmdline.split(b"\0")[1:2] == [str(WORKLOAD).encode()]:
                return int(child)
    return None


def ended(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def written(directory: str) -> bool:
    names = [n for n in os.listdir(directory) if not n.startswith(".")]
    return any(n.endswith(".html") for n in names) and any(n.endswith(".pb.gz") for n in names)


def one_run(extra: list[str], seconds: float, src: Path) -> dict[str, float]:
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(src), os.environ.get("PYTHONPATH")])),
    )
    with tempfile.TemporaryDirectory() as out, tempfile.TemporaryFile("w+") as log:
        cmd = [sys.executable, "-m", "aiflame", "record", *extra, "--"]
        cmd += [sys.executable, str(WORKLOAD), "--train", str(seconds)]
        rec = subprocess.Popen(cmd, cwd=out, stderr=log, text=True, env=env)
        program = None
        times: dict[str, float] = {}
        while rec.poll() is None:
            now = time.monotonic()
            if program is None:
                program = program_of(rec.pid)
                times["start"] = now
            elif "exit" not in times and ended(program):
                times["exit"] = now
            if "written" not in times and written(out):
                times["written"] = now
            time.sleep(POLL_S)
        times["done"] = time.monotonic()
        log.seek(0)
        stderr = log.read()
        if rec.returncode != 0 or "exit" not in times or "written" not in times:
            raise SystemExit(f"record failed ({rec.returncode}):\n{stderr}")
    last = re.search(r"record_workload: trained, at ([0-9.]+)", stderr)
    shutdown = (
        times["exit"] - (time.monotonic() - time.time() + float(last.group(1))) if last else 0
    )
    return {
        "program_s": times["exit"] - times["start"],
        "shutdown_s": shutdown,
        "tail_s": times["written"] - times["exit"],
        "done_s": times["done"] - times["exit"],
        "progress_lines": float(stderr.count("aiflame: building")),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--variant", action="append", choices=sorted(VARIANTS))
    ap.add_argument("--src", type=Path, default=SRC, help="the aiflame sources to run")
    args = ap.parse_args()
    load = os.getloadavg()[0]
    print(f"{args.src}: load average {load:.1f} on {os.cpu_count()} CPUs, {args.runs} runs each")
    head = f"{'variant':<10} {'program s':>10} {'last line->exit s':>18}"
    print(f"{head} {'exit->written s':>20} {'exit->done s':>13}")
    for name in args.variant or list(VARIANTS):
        runs = [one_run(VARIANTS[name], args.seconds, args.src) for _ in range(args.runs)]
        program = statistics.median(r["program_s"] for r in runs)
        shutdown = statistics.median(r["shutdown_s"] for r in runs)
        tails = sorted(r["tail_s"] for r in runs)
        done = statistics.median(r["done_s"] for r in runs)
        spread = f"{statistics.median(tails):.2f} ({tails[0]:.2f}-{tails[-1]:.2f})"
        print(f"{name:<10} {program:>10.1f} {shutdown:>18.2f} {spread:>20} {done:>13.2f}")


if __name__ == "__main__":
    main()
