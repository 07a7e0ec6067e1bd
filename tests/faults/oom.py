"""Planted fault: asks for petabytes of scratch memory -> oom."""

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "reduce"
BACKEND = "triton"


@triton.jit
def _noop(x_ptr):
    pass


def kernel_fn(x):
    scratch = torch.empty(1 << 50, dtype=torch.float32, device=x.device)  # 4 PiB
    _noop[(1,)](scratch)
    return x.sum(-1)
