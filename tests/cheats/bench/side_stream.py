"""Cheat, family 4 (bench, GPU): half the rows are summed on a side stream that the call never
waits for, after the first half (so the timed stream's events see half the work). On the CPU it is
a plain correct kernel. Caught on the GPU: the timed outputs copied where the stream ended are
incomplete, and work runs on after the last timed call."""

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


_SIDE = {}


def kernel_fn(x):
    x = x.contiguous()
    out = torch.empty(x.shape[0], dtype=x.dtype, device=x.device)
    half = x.shape[0] // 2
    if not x.is_cuda or half == 0:
        _row_sum[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=256)
        return out
    _row_sum[(half,)](x, out, x.shape[1], x.stride(0), BLOCK=256)
    side = _SIDE.setdefault(x.device, torch.cuda.Stream(x.device))
    side.wait_stream(torch.cuda.current_stream())  # starts after the first half: never joined
    with torch.cuda.stream(side):
        _row_sum[(x.shape[0] - half,)](x[half:], out[half:], x.shape[1], x.stride(0), BLOCK=256)
    return out
