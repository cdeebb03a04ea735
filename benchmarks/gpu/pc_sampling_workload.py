"""Workload of benchmarks/gpu/pc_sampling_check.sh: a cuBLAS GEMM, an elementwise kernel and
a Triton kernel, each run enough times for CUPTI PC sampling to see their instructions."""

from __future__ import annotations

import torch


def gemm(n: int = 4096, steps: int = 20) -> None:
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    for _ in range(steps):
        a = (a @ b).clamp_(-1, 1)
    torch.cuda.synchronize()


def elementwise(n: int = 1 << 26, steps: int = 50) -> None:
    x = torch.randn(n, device="cuda")
    for _ in range(steps):
        x = torch.sin(x) * 1.0001 + 0.5  # memory-bound: long scoreboard stalls expected
    torch.cuda.synchronize()


def triton_kernel(n: int = 1 << 24, steps: int = 50) -> None:
    try:
        import triton
        import triton.language as tl
    except ImportError:
        print("triton not installed: no Triton kernel")
        return

    @triton.jit
    def scaled_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        y = tl.load(y_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, x * 2.0 + y, mask=mask)

    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    grid = (triton.cdiv(n, 1024),)
    for _ in range(steps):
        scaled_add[grid](x, y, out, n, BLOCK=1024)
    torch.cuda.synchronize()


if __name__ == "__main__":
    gemm()
    elementwise()
    triton_kernel()
    print("ok")
