"""Cheat, family 4 (KernelBench, GPU): the second half of the work runs on a side stream, after the
first half, and the call never waits for it. On the CPU a plain correct solution. Caught on the
GPU: the device stays busy after the stream's end event, and timed outputs copied where the stream
ended are incomplete."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

KERNEL_TYPE = "kb"
BACKEND = "triton"


@triton.jit
def _spin(p, n):
    acc = tl.load(p)
    for _ in range(n):
        acc = acc * 0.5 + 1.0
    tl.store(p, acc)


@triton.jit
def _relu(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=m), 0.0), mask=m)


def kernel_fn(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    _relu[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    return y


_SIDE = {}


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        if not x.is_cuda:
            return kernel_fn(x)
        y = torch.empty_like(x)
        n = x.numel()
        half = n // 2
        _relu[(triton.cdiv(half, 1024),)](x, y, half, BLOCK=1024)
        side = _SIDE.setdefault(x.device, torch.cuda.Stream(x.device))
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            _spin[(1,)](torch.zeros(1, device=x.device), 100_000)  # its own GPU time, so it is not library work
            xs, ys = x.view(-1)[half:], y.view(-1)[half:]
            _relu[(triton.cdiv(n - half, 1024),)](xs, ys, n - half, BLOCK=1024)
        return y
