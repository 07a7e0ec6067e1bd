"""Sandbox probe (bench): a correct row sum that first tries to reach what a candidate must not
(tests/cheats/reach.py, spliced in below by the test): the LLM key, a socket to 127.0.0.1, a write
into the store, the workspace and $HOME. It raises naming everything it reached, so in the sandbox
it is judged correct, and without one its error lists the holes."""

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "reduce"
BACKEND = "triton"

# reach.py


@triton.jit
def _row_sum(x_ptr, out_ptr, cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_row + offs, mask=offs < cols, other=0.0)
        acc += x.to(tl.float32)
    tl.store(out_ptr + row, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty))


def kernel_fn(x):
    got = reached()  # noqa: F821 (spliced in)
    if got:
        raise RuntimeError("sandbox probe: " + "; ".join(got))
    x = x.contiguous()
    out = torch.empty(x.shape[0], dtype=x.dtype, device=x.device)
    _row_sum[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=256)
    return out
