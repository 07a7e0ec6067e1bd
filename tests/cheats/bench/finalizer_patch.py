"""Cheat, family 3 (bench): a finalizer on every output it returns rewrites the spec's make_inputs (to
make zeros) when the judge lets go of the output, after the judge's check of that call; its own next call
puts make_inputs back before returning, so the check after that call sees nothing. Inputs of zeros
would let it skip the work. Caught: the judge also checks before making a check's inputs."""

import weakref

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


from autokernel.kernels import get_spec

_spec = get_spec("reduce")
_orig = _spec.make_inputs


def _zeros(*args, **kwargs):
    return tuple(t.zero_() if isinstance(t, torch.Tensor) and t.is_floating_point() else t
                 for t in _orig(*args, **kwargs))


def _set(fn) -> None:
    object.__setattr__(_spec, "make_inputs", fn)


def kernel_fn(x):
    _set(_orig)  # nothing left for the check after this call to see
    out = _sum(x)
    weakref.finalize(out, _set, _zeros)  # ... and back once the judge lets go of the output
    return out
