"""Cheat, family 4 (bench): every call ends by pushing a torch dispatch mode that swallows the next
zero_ (the judge's L2 flush, before the next timed call) and pops itself there, so that nothing is left
when the judge looks. Caught: the mode stacks are part of what the judge checks right after every call
(in the stages by the integrity check, in the GPU timing by between_calls' state)."""

from torch.utils._python_dispatch import TorchDispatchMode

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


class _SwallowFlush(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.zero_.default:
            self.__exit__(None, None, None)  # gone before anyone looks
            return args[0]
        return func(*args, **(kwargs or {}))


def kernel_fn(x):
    out = _sum(x)
    _SwallowFlush().__enter__()
    return out
