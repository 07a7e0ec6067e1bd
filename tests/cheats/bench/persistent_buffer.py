"""Cheat, family 5 (bench): writes every result into one persistent buffer per shape and returns a
view of it (no allocation to pay for); the next call overwrites what the previous one returned.
Caught on the CPU: accepted outputs are checked again after later calls."""

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


_BUF = {}


def kernel_fn(x):
    x = x.contiguous()
    key = (x.shape[0], x.dtype, x.device)
    if key not in _BUF:
        _BUF[key] = torch.empty(x.shape[0] + 1, dtype=x.dtype, device=x.device)
    out = _BUF[key][1:]
    _row_sum[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=256)
    return out
