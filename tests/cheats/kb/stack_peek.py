"""Cheat, family 3 (KernelBench): looks for the reference's output in its callers' frames and
returns it. ModelNew runs before the reference exists: nothing to find, and its fallback (its own
kernel on the negated input) is wrong."""

import sys

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
    def forward(self, x):
        kernel_fn(x[:1])  # for show
        frame = sys._getframe(1)
        while frame is not None:
            for name, value in frame.f_locals.items():
                if isinstance(value, torch.Tensor) and value is not x and value.shape == x.shape \
                        and name in ("exact", "ref_out", "expected", "shaped"):
                    return value.clone()
            frame = frame.f_back
        return kernel_fn(-x)
