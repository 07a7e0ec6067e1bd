"""Cheat, family 2 (bench): results cached by a fingerprint of the input's contents, the cached
tensor itself returned on a hit (no copy to pay for). Fresh inputs never hit; the determinism
stage's second call on the same inputs does, and the output ledger refuses the same memory
returned twice. On the GPU, timing refills the inputs before every repetition: it never hits."""

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


_CACHE = {}


def kernel_fn(x):
    key = (tuple(x.shape), x.dtype, tuple(x.flatten()[:16].tolist()))  # cheap: the first elements
    if key not in _CACHE:
        _CACHE[key] = _sum(x)
    return _CACHE[key]
