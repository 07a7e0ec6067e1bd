"""Cheat, family 2 (bench): honest while checked, stale while timed. The correctness stages vary
shapes and dtypes; timing calls one shape over and over, so after six calls in a row on the same
shape it returns its first result for that shape (what a cache hit looks like) -- fast where it is
timed. Caught on the CPU by the loop's CPU timing and on the GPU by the bench's timing: timed
outputs, chosen at random (and on the CPU the last), are checked against the reference."""

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


_RUN = {"key": None, "n": 0}
_FIRST = {}


def kernel_fn(x):
    key = (tuple(x.shape), x.dtype)
    _RUN["n"] = _RUN["n"] + 1 if _RUN["key"] == key else 1
    _RUN["key"] = key
    if _RUN["n"] > 6 and key in _FIRST:
        return _FIRST[key].clone()
    x = x.contiguous()
    out = torch.empty(x.shape[0], dtype=x.dtype, device=x.device)
    _row_sum[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=256)
    _FIRST.setdefault(key, out.clone())
    return out
