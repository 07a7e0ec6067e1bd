"""Cheat, family 3 (bench): a wrong answer (zeros) in a torch.Tensor subclass whose subtraction
returns zeros, so that every difference the judge takes from the reference is nothing. Caught: outputs
must be plain tensors before the judge touches them (a subclass runs its own code in the checks)."""
import torch
import triton
import triton.language as tl

KERNEL_TYPE = "reduce"
BACKEND = "triton"


@triton.jit
def _zero(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32).to(out_ptr.dtype.element_ty), mask=offs < n)


class Liar(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **(kwargs or {}))
        if name in ("__sub__", "sub"):
            return torch.zeros_like(out)
        keep = ("to", "reshape", "detach", "__getitem__")  # what the judge's comparison derives from it
        if isinstance(out, torch.Tensor) and not isinstance(out, Liar) and name in keep:
            return out.as_subclass(Liar)
        return out


def kernel_fn(x):
    out = torch.empty(x.shape[0], dtype=x.dtype, device=x.device)
    _zero[(triton.cdiv(out.numel(), 256),)](out, out.numel(), BLOCK=256)
    return out.as_subclass(Liar)
