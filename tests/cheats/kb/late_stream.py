"""Cheat, family 4 (KernelBench, GPU): honest through the correctness trials, then every timed call
ends with another CUDA stream current (the judge's flush and events would run there), taken back by
its own next call. Caught in the GPU timing: the current stream is checked after every call."""

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


_calls = [0]
_left: list = []


class ModelNew(nn.Module):
    def forward(self, x):
        while _left:
            _left.pop()()
        y = kernel_fn(x)
        _calls[0] += 1
        if x.is_cuda and _calls[0] > 10:
            prev = torch.cuda.current_stream()
            torch.cuda.set_stream(torch.cuda.Stream())
            _left.append(lambda: torch.cuda.set_stream(prev))
        return y
