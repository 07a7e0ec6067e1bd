"""Planted fault: the Triton kernel itself never terminates -> timeout."""

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "reduce"
BACKEND = "triton"


@triton.jit
def _spin(x_ptr, out_ptr, n):
    i = n * 0 + 1
    while i > 0:  # i never changes
        i = i * 1
    tl.store(out_ptr, tl.load(x_ptr))


def kernel_fn(x):
    out = torch.empty(x.shape[0], dtype=x.dtype, device=x.device)
    _spin[(1,)](x, out, x.numel())
    return out
