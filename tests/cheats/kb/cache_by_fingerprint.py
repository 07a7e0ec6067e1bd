"""Cheat, family 2 (KernelBench): outputs cached by a fingerprint of the inputs' first elements,
the cached tensor itself returned on a hit. The trials and the timed calls all see new values in
the same tensors, so it never hits: judged correct, and timed on its own work."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

KERNEL_TYPE = "kb"
BACKEND = "triton"


@triton.jit
def _relu(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=m), 0.0), mask=m)


def kernel_fn(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    _relu[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    return y


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.cache = {}

    def forward(self, x):
        key = (tuple(x.shape), tuple(x.flatten()[:16].tolist()))
        if key not in self.cache:
            self.cache[key] = kernel_fn(x)
        return self.cache[key]
