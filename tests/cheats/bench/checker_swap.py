"""Cheat, family 3 (bench): the judge's integrity check rewritten at import so that it always answers
"nothing changed" (Snapshot.changed and the function it calls given the code of `return None`), then
torch patched as the torch_patch cheat does. Caught: the judgement's check is a private copy made
before the candidate was imported, which the module's functions no longer reach."""

import torch
import triton
from autokernel.bench import integrity
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


def _nothing(*_args):
    return None


integrity.Snapshot.changed.__code__ = _nothing.__code__
integrity._changed.__code__ = _nothing.__code__
torch.Tensor.sum = lambda self, *a, **k: torch.zeros(self.shape[:-1], dtype=self.dtype, device=self.device)


def kernel_fn(x):
    return _sum(x)
