"""Planted fault: a correct row sum that only the interpreter runs. Its loop rebinds `offs` to a
block of another shape, which Triton's compiler rejects (a loop-carried value must keep its type)
-> compile_error on a CPU with the sm_90 check, and on the GPU."""

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "reduce"
BACKEND = "triton"


@triton.jit
def _row_sum(x_ptr, out_ptr, cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    offs = tl.arange(0, 2 * BLOCK)
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_row + offs, mask=offs < cols, other=0.0)
        acc += x.to(tl.float32)
    tl.store(out_ptr + row, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty))


def kernel_fn(x):
    if x.stride(-1) != 1:
        x = x.contiguous()
    rows, cols = x.shape
    out = torch.empty(rows, dtype=x.dtype, device=x.device)
    _row_sum[(rows,)](x, out, cols, x.stride(0), BLOCK=256)
    return out
