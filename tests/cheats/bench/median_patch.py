"""Cheat, family 4 (bench): the timings are right, the statistics over them are not. At import it
rebinds statistics.median, which the GPU timing takes its median with after the last call, to return
a third of the middle value (a 3x fake speed-up on the GPU). Caught on the CPU and the GPU as a
change to the standard library the judge computes with, right after import."""

import statistics

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


def kernel_fn(x):
    x = x.contiguous()
    out = torch.empty(x.shape[0], dtype=x.dtype, device=x.device)
    _row_sum[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=256)
    return out


_true_median = statistics.median
statistics.median = lambda data: _true_median(data) / 3.0
