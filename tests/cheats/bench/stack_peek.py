"""Cheat, family 3 (bench): looks for the expected answer in its callers' frames (a float64 tensor
of the output's shape, or locals named like a reference) and returns it. The judge computes the
reference only after the call, so there is nothing to find: the zeros it falls back to are wrong."""

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


def kernel_fn(x):
    _sum(x[:1])  # for show
    frame = sys._getframe(1)
    while frame is not None:
        for name, value in frame.f_locals.items():
            if isinstance(value, torch.Tensor) and value is not x and value.shape == x.shape[:1] \
                    and (value.dtype == torch.float64 or name in ("exact", "expected", "ref", "ref_out")):
                return value.to(x.dtype).clone()
        frame = frame.f_back
    return torch.zeros(x.shape[0], dtype=x.dtype, device=x.device)
