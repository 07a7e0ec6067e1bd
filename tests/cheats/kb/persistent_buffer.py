"""Cheat, family 5 (KernelBench): every output is written into one buffer the module keeps and
returned as a view of it; the next trial overwrites the previous output. Caught: earlier outputs
are checked again after the later trials."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

KERNEL_TYPE = "kb"
BACKEND = "triton"


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


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.buf = None

    def forward(self, x):
        x = x.contiguous()
        if self.buf is None or self.buf.numel() < x.numel() + 1:
            self.buf = torch.empty(x.numel() + 1, dtype=x.dtype, device=x.device)
        y = self.buf[1:x.numel() + 1].view(x.shape)
        _relu[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
