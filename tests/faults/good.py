"""A correct row-sum (reduce) kernel: the fault suite's control, it must pass every stage."""

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "reduce"
BACKEND = "triton"

BLOCK = 1024
NUM_WARPS = 4
SEARCH_SPACE = {"BLOCK": [256, 1024, 4096], "NUM_WARPS": [4, 8]}


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
    if x.stride(-1) != 1:
        x = x.contiguous()
    rows, cols = x.shape
    out = torch.empty(rows, dtype=x.dtype, device=x.device)
    _row_sum[(rows,)](x, out, cols, x.stride(0), BLOCK=BLOCK, num_warps=NUM_WARPS)
    return out
