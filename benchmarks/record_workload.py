"""The workload of bench_record_overhead.py: a small CPU PyTorch training loop.

    python benchmarks/record_workload.py --serve LOG       # train until Ctrl-C, log each step
    python benchmarks/record_workload.py --train SECONDS   # train that long, then exit
    python benchmarks/record_workload.py --torch-alternate OUT [--cycles 6] [--interval 5]

A conv net (oneDNN JIT kernels) trained on one random batch. ``--serve`` prints ``ready``
after warm-up, then trains until SIGINT and writes, for every step, its end time
(``time.monotonic()``, comparable across processes), its duration and the thread's
cumulative on-CPU and run-delay nanoseconds (/proc schedstat) to LOG as JSON.
``--torch-alternate`` measures ``torch.profiler`` (CPU activity, ``with_stack=True``) in the
same way, inside the process: intervals without and with the profiler, alternating, and the
profiler's start, stop and export times.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import threading
import time

import torch
import torch.nn as nn


class Trainer:
    def __init__(self) -> None:
        torch.manual_seed(0)
        self.model = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(16, 16, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(16, 10),
        )
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.x, self.y = torch.randn(16, 3, 32, 32), torch.randint(0, 10, (16,))

    def step(self) -> None:
        self.opt.zero_grad()
        nn.functional.cross_entropy(self.model(self.x), self.y).backward()
        self.opt.step()

    def run_for(self, seconds: float) -> list[float]:
        """Step durations of ``seconds`` of training."""
        out = []
        end = time.monotonic() + seconds
        while (t0 := time.monotonic()) < end:
            self.step()
            out.append(time.monotonic() - t0)
        return out


class SchedStat:
    """This thread's time on a CPU and time waiting for one (run delay), in ns.

    What is neither, for a loop that never blocks, is time the thread was stopped: by a
    sampler's ptrace pause. Other processes' load shows up as run delay instead.
    """

    def __init__(self) -> None:
        self.fd = os.open(f"/proc/self/task/{threading.get_native_id()}/schedstat", os.O_RDONLY)

    def read(self) -> tuple[int, int]:
        on_cpu, delay, _ = os.pread(self.fd, 128, 0).split()
        return int(on_cpu), int(delay)


def serve(log: str) -> None:
    # A job started in the background of a script inherits SIGINT ignored: take it back.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    trainer = Trainer()
    for _ in range(5):
        trainer.step()  # first-call costs (oneDNN kernel generation) before "ready"
    sched = SchedStat()
    print("ready", flush=True)
    rows = []  # (end time, step duration, cumulative on-CPU ns, cumulative run delay ns)
    try:
        while True:
            t0 = time.monotonic()
            trainer.step()
            t1 = time.monotonic()
            rows.append((t1, t1 - t0, *sched.read()))
    except KeyboardInterrupt:
        pass
    with open(log, "w") as f:
        json.dump(rows, f)


def torch_alternate(out: str, cycles: int, interval: float) -> None:
    from torch.profiler import ProfilerActivity, profile

    trainer = Trainer()
    trainer.run_for(1.0)
    keys = ("off", "on", "off_cpu", "on_cpu", "start", "stop", "export")
    result: dict[str, list[float]] = {k: [] for k in keys}

    def measure(key: str) -> None:
        c0 = time.thread_time()
        steps = trainer.run_for(interval)
        result[key].append(sum(steps) / len(steps))
        result[key + "_cpu"].append((time.thread_time() - c0) / len(steps))

    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(cycles):
            measure("off")
            prof = profile(activities=[ProfilerActivity.CPU], with_stack=True)
            t0 = time.monotonic()
            prof.start()
            t1 = time.monotonic()
            measure("on")
            t2 = time.monotonic()
            prof.stop()
            t3 = time.monotonic()
            prof.export_chrome_trace(os.path.join(tmp, "trace.json"))
            t4 = time.monotonic()
            result["start"].append(t1 - t0)
            result["stop"].append(t3 - t2)
            result["export"].append(t4 - t3)
    with open(out, "w") as f:
        json.dump(result, f)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--serve", metavar="LOG")
    ap.add_argument("--torch-alternate", metavar="OUT")
    ap.add_argument("--train", type=float, metavar="SECONDS")
    ap.add_argument("--cycles", type=int, default=6)
    ap.add_argument("--interval", type=float, default=5.0)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve)
    elif args.torch_alternate:
        torch_alternate(args.torch_alternate, args.cycles, args.interval)
    elif args.train:
        Trainer().run_for(args.train)
        # The program's last line: what follows is the interpreter's shutdown (torch's
        # takes about a second), then whatever the profiler does.
        print(f"record_workload: trained, at {time.time():.3f}", file=sys.stderr, flush=True)
    else:
        ap.error("give --serve LOG, --torch-alternate OUT or --train SECONDS")


if __name__ == "__main__":
    main()
