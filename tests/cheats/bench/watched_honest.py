"""Cheat, family 1 (bench, GPU): its own kernel only while the profiler watches (the profiler says
when it is on), the library's sum for every other call, the timed ones included. Caught on the GPU:
the profiled call's GPU work must be about what the timed calls took. (On the CPU no profiler runs:
the library share of its work, counted in elements, rejects it there.)"""

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
    _row_sum[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=BLOCK)
    return out


BLOCK = 16  # its own kernel, slow on purpose: the cheat is worth it only where its own work is slower


def kernel_fn(x):
    if torch._C._autograd._profiler_enabled():
        return _sum(x)  # watched: its own kernel does the op
    _sum(x[:1, :8])  # for show
    acc = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    return torch.ops.aten.sum.dim_IntList(x, [-1], dtype=acc).to(x.dtype)
