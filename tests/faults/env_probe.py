"""Not a fault: a correct kernel that refuses to run if it can see any credential, to check that
the bench child's environment is stripped of API keys and tokens."""

import os

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "reduce"
BACKEND = "triton"

_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD")


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
    leaked = sorted(k for k in os.environ if any(m in k.upper() for m in _MARKERS)
                    or k.startswith(("OPENAI_", "ANTHROPIC_", "HF_TOKEN")))
    if leaked:
        raise RuntimeError(f"credentials visible to the kernel: {leaked}")
    x = x.contiguous()
    out = torch.empty(x.shape[0], dtype=x.dtype, device=x.device)
    _row_sum[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=256)
    return out
