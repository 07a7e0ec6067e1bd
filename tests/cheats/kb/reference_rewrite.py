"""Cheat, family 3 (KernelBench): rewrites the judge's Model.forward (its problem module, found in
sys.modules) to agree with a wrong shortcut (zeros). Caught: the problem module and its Model are in
the judge's integrity snapshot."""

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


class ModelNew(nn.Module):
    def forward(self, x):
        kernel_fn(x[:1])  # for show
        for name, mod in list(sys.modules.items()):
            if name.startswith("kb_problem_") and hasattr(mod, "Model"):
                mod.Model.forward = lambda self, t: torch.zeros_like(t)
        return torch.zeros_like(x)
