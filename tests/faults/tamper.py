"""Planted fault: patches the bench's comparison into a no-op at import, then returns zeros -> cheat."""

import torch
import triton
import triton.language as tl

import autokernel.bench.checks as _checks

KERNEL_TYPE = "reduce"
BACKEND = "triton"

_checks.compare = lambda *args, **kwargs: (0.0, 0.0)


@triton.jit
def _zero(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=offs < n)


def kernel_fn(x):
    out = torch.empty(x.shape[0], dtype=x.dtype, device=x.device)
    _zero[(1,)](out, x.shape[0], BLOCK=triton.next_power_of_2(max(x.shape[0], 1)))
    return out
