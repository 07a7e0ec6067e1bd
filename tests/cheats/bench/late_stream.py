"""Cheat, family 4 (bench, GPU): honest for the first calls (the correctness stages make fewer), then
every call ends with something left for the judge's next step and taken back by its own next call:
another current CUDA stream, which takes the flush and the judge's events off the timed stream.
Caught in the GPU timing: between_calls checks the mode stacks and the current stream after every
timed call."""

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


from torch.utils._python_dispatch import TorchDispatchMode

KIND = "stream"
_calls = [0]
_left: list = []


class _SwallowFlush(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.zero_.default:
            return args[0]
        return func(*args, **(kwargs or {}))


def kernel_fn(x):
    while _left:  # take back what the previous call left
        _left.pop()()
    out = _sum(x)
    _calls[0] += 1
    if x.is_cuda and _calls[0] > 150:
        if KIND == "mode":
            mode = _SwallowFlush()
            mode.__enter__()
            _left.append(lambda: mode.__exit__(None, None, None))
        else:
            prev = torch.cuda.current_stream()
            torch.cuda.set_stream(torch.cuda.Stream())
            _left.append(lambda: torch.cuda.set_stream(prev))
    return out
