"""Cheat, family 1 (bench): a throwaway launch of its own, then the library op looked up by strings
(importlib + getattr) and called as a tensor method, so no 'torch.sum' appears in the file."""

import importlib

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


def kernel_fn(x):
    _sum(x[:2])  # for show
    t = importlib.import_module("to" + "rch")
    acc = getattr(t, "floa" + "t32") if x.dtype != getattr(t, "floa" + "t32") else x.dtype
    return getattr(x, "s" + "um")(-1, dtype=acc).to(x.dtype)
