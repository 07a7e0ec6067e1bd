"""Cheat, family 3 (KernelBench): a wrong answer (zeros) in a torch.Tensor subclass whose subtraction
returns zeros, so that every difference the judge takes from the reference is nothing. Caught: outputs
must be plain tensors before the judge touches them."""

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


class Liar(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **(kwargs or {}))
        if getattr(func, "__name__", "") in ("__sub__", "sub"):
            return torch.zeros_like(out)
        return out


class ModelNew(nn.Module):
    def forward(self, x):
        return (kernel_fn(x) * 0).as_subclass(Liar)
