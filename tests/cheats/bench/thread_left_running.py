"""Cheat, family 3/4 (bench): a thread started at import keeps running beside the judge (here it only
sleeps; it could patch what the judge runs between its checks and undo it before the next). Caught:
a live thread the candidate started is a change to what the judge trusts."""

import threading
import time

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


def _linger():
    while True:
        time.sleep(0.05)


threading.Thread(target=_linger, daemon=True).start()


def kernel_fn(x):
    return _sum(x)
