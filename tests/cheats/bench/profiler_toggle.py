"""Cheat, family 1 (bench), the GPU's evidence hidden: one throwaway launch of its own kernel for
show, then the library op with the profiler's collection of GPU activity turned off around it (torch's
own toggle_collection_dynamic), so that the profiler sees its kernel only. Caught on the CPU by the
library share of the work (the interpreter counts elements, not the profiler); on the GPU by the
GPU time between the judge's marker kernels that no kernel the profiler saw accounts for."""

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


def _collect(on: bool) -> None:
    if not torch._C._autograd._profiler_enabled():  # most calls: nothing to hide from
        return
    from torch.profiler import ProfilerActivity

    torch._C._autograd._toggle_collection_dynamic(on, {ProfilerActivity.CUDA, ProfilerActivity.CPU})


def kernel_fn(x):
    _sum(x[:1, :8])  # for show
    acc = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    _collect(False)
    try:
        out = torch.ops.aten.sum.dim_IntList(x, [-1], dtype=acc).to(x.dtype)
        if x.is_cuda:
            torch.cuda.synchronize()  # the library's kernels done while collection is off
    finally:
        _collect(True)
    return out
