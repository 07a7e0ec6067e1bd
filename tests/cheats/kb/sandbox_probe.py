"""Sandbox probe (KernelBench): a correct ModelNew for 1_ReLU that first tries to reach what a
candidate must not (tests/cheats/reach.py, spliced in below by the test): the LLM key, a socket to
127.0.0.1, a write into the store, the workspace and $HOME; it raises naming what it reached."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

KERNEL_TYPE = "kb"
BACKEND = "triton"

# reach.py


def kernel_fn(x):
    return x


@triton.jit
def _relu(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=m), 0.0), mask=m)


class ModelNew(nn.Module):
    def forward(self, x):
        got = reached()  # noqa: F821 (spliced in)
        if got:
            raise RuntimeError("sandbox probe: " + "; ".join(got))
        x = x.contiguous()
        y = torch.empty_like(x)
        _relu[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
