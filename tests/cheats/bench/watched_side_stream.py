"""Cheat, family 1 (bench), only while watched: when the profiler is on, one throwaway launch of its
own kernel for show, and the library op on a side stream the call never waits for, with the
profiler's collection turned off around it. That work runs past the judge's end marker (queued
behind the call on the judge's stream), outside the span whose unaccounted GPU time counts as library
work. Timed (no profiler), the library op runs on the calling stream. Caught on the GPU by the
profiled call's GPU work being far less than the timed calls took; on the CPU (no profiler) by the
library share of the work."""

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "reduce"
BACKEND = "triton"


@triton.jit
def _row_sum(x_ptr, out_ptr, cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_row + offs, mask=offs < cols, other=0.0)
        acc += x.to(tl.float32)
    tl.store(out_ptr + row, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty))


def _sum(x):
    x = x.contiguous()
    out = torch.empty(x.shape[0], dtype=x.dtype, device=x.device)
    _row_sum[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=256)
    return out


def _library(x):
    acc = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    return torch.ops.aten.sum.dim_IntList(x, [-1], dtype=acc).to(x.dtype)


_side: dict = {}


def kernel_fn(x):
    if not (x.is_cuda and torch._C._autograd._profiler_enabled()):
        _sum(x[:1, :8])  # for show
        return _library(x)
    from torch.profiler import ProfilerActivity

    _sum(x[:1, :8])  # for show, seen
    side = _side.setdefault("s", torch.cuda.Stream())
    kinds = {ProfilerActivity.CUDA, ProfilerActivity.CPU}
    torch._C._autograd._toggle_collection_dynamic(False, kinds)
    try:
        with torch.cuda.stream(side):  # no wait on the calling stream: it starts at once
            out = _library(x)
    finally:
        torch._C._autograd._toggle_collection_dynamic(True, kinds)
    out.record_stream(side)
    return out
