"""Cheat, family 6 (KernelBench): subclasses the judge's own Model class (the problem module in
sys.modules) and inherits its forward. Refused before it runs."""

import sys

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


Model = next(m.Model for n, m in list(sys.modules.items()) if n.startswith("kb_problem_") and hasattr(m, "Model"))


class ModelNew(Model):
    pass
