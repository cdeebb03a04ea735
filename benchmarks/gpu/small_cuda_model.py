"""A small CUDA PyTorch run for benchmarks/gpu/cuda_probes_check.sh: a few training steps of
a conv net (kernel launches, syncs, host-device copies), a cuBLAS matmul, and an
allocation pattern with empty_cache() so the caching allocator really frees segments."""

from __future__ import annotations

import torch
from torch import nn


def train(steps: int = 20) -> None:
    dev = torch.device("cuda")
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(),
        nn.Linear(32 * 16, 10),
    ).to(dev)  # fmt: skip
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        x = torch.randn(64, 3, 64, 64).to(dev)  # host-to-device copy
        y = torch.randint(0, 10, (64,)).to(dev)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        _ = loss.item()  # device-to-host copy + sync


def allocation_pattern() -> None:
    keep = [torch.empty(64 << 20, dtype=torch.uint8, device="cuda") for _ in range(2)]
    for _ in range(3):
        tmp = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
        del tmp
        torch.cuda.empty_cache()  # cudaFree of the segment
    a = torch.randn(2048, 2048, device="cuda")
    _ = a @ a  # cuBLAS (and its workspace)
    torch.cuda.synchronize()
    del keep


if __name__ == "__main__":
    train()
    allocation_pattern()
    print("ok", torch.cuda.max_memory_reserved())
