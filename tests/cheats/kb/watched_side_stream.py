"""Cheat, family 1 (KernelBench), only while watched: when the profiler is on, a throwaway launch of
its own kernel, and the library op on a side stream the call never waits for, with the profiler's
collection turned off around it: that work lies past the judge's end marker, outside the span whose
unaccounted GPU time counts as library work. Timed, the library op runs on the calling stream.
Caught on the GPU by the warm profiled trial's GPU work being far less than the timed calls took
(they were GPU-bound); on the CPU (no profiler) by the library share of the work."""

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


_SIDE: dict = {}


class ModelNew(nn.Module):
    def forward(self, x):
        kernel_fn(x.flatten()[:8])  # for show
        if not (x.is_cuda and torch._C._autograd._profiler_enabled()):
            return torch.ops.aten.relu.default(x)
        from torch.profiler import ProfilerActivity

        side = _SIDE.setdefault(x.device, torch.cuda.Stream(x.device))
        kinds = {ProfilerActivity.CUDA, ProfilerActivity.CPU}
        torch._C._autograd._toggle_collection_dynamic(False, kinds)
        try:
            with torch.cuda.stream(side):  # no wait on the calling stream: it starts at once
                y = torch.ops.aten.relu.default(x)
        finally:
            torch._C._autograd._toggle_collection_dynamic(True, kinds)
        y.record_stream(side)
        return y
