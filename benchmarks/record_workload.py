"""The workload of bench_record_overhead.py: a small CPU PyTorch training loop.

    python benchmarks/record_workload.py --steps 200 [--torch-profiler]

A conv net (oneDNN JIT kernels) trained on one random batch. Prints one JSON line: the
loop's wall time, the median and 10th-percentile step time, and with --torch-profiler the
export time of a ``torch.profiler`` (CPU activity, ``with_stack=True``) around the loop.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn as nn


def make_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 16, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, 10),
    )


def train(steps: int) -> list[float]:
    torch.manual_seed(0)
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(16, 3, 32, 32), torch.randint(0, 10, (16,))
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--torch-profiler", metavar="TRACE", help="profile the loop, export here")
    args = ap.parse_args()
    train(args.warmup)  # first-call costs (oneDNN kernel generation) out of the loop
    result: dict[str, float] = {}
    t0 = time.perf_counter()
    if args.torch_profiler:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
            times = train(args.steps)
        result["loop_s"] = time.perf_counter() - t0
        t1 = time.perf_counter()
        prof.export_chrome_trace(args.torch_profiler)
        result["export_s"] = time.perf_counter() - t1
    else:
        times = train(args.steps)
        result["loop_s"] = time.perf_counter() - t0
    result["step_median_s"] = statistics.median(times)
    # The fast tail is what load from other processes disturbs least; a sampler's pauses
    # land on every step alike (a step is a few sampling intervals long), so they stay in.
    result["step_p10_s"] = statistics.quantiles(times, n=10)[0]
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
