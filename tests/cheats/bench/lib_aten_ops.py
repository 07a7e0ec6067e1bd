"""Cheat, family 1 (bench): one throwaway launch of its own kernel for show, then the library op
reached through torch.ops.aten. Caught on the CPU by the library share of the work (elements),
on the GPU by the share of GPU time."""

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
    _sum(x[:1, :8])  # for show: one row of eight
    acc = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    return torch.ops.aten.sum.dim_IntList(x, [-1], dtype=acc).to(x.dtype)
