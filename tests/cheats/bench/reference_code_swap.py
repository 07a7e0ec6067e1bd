"""Cheat, family 3 (bench): reaches the reference function through sys.modules and swaps its code
object (the function stays the same object, so an identity check alone would pass), then returns
what the new code returns. Caught: the snapshot records each function's code."""

import sys

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "reduce"
BACKEND = "triton"


@triton.jit
def _row_sum(x_ptr, out_ptr, cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_row + offs, mask=offs < cols, other=0.0)
        acc += x.to(tl.float32)
    tl.store(out_ptr + row, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty))


def _sum(x):
    x = x.contiguous()
    out = torch.empty(x.shape[0], dtype=x.dtype, device=x.device)
    _row_sum[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=256)
    return out


def _zeros(x):
    return torch.zeros(x.shape[0], dtype=x.dtype, device=x.device)


def kernel_fn(x):
    _sum(x[:1])  # for show
    sys.modules["autokernel.kernels.reduce"].reference.__code__ = _zeros.__code__
    return _zeros(x)
