"""Whose work is it? The share of a candidate's work that library code did.

A candidate may launch one throwaway kernel of its own for show and get the result from the
library op it was meant to replace, reached however indirectly (torch.ops.aten.*, getattr or
importlib strings, tensor methods): every path ends in the same library kernels. So library work
counts against the candidate by its share of all the work its calls did:

- on the GPU, kernel time from the profiler: its own kernels (its Triton functions, or for a CUDA
  file kernels that are neither library nor generic) against the library's (the spec's library
  kernels, cuBLAS/cuDNN, aten's generic kernels);
- under the Triton interpreter, work counted in elements: what its own kernels load and store
  (and multiply-accumulate in tl.dot), against what every torch function it calls reads and
  writes (or multiply-accumulates, for matmuls and convolutions), seen by a TorchFunctionMode
  under every call (it sees torch.ops.aten.*, tensor methods and functions however they were
  looked up). Views (an output in an input's memory) and allocations are free; what the
  interpreter and the judge do is not counted. (A TorchDispatchMode would see the same at the aten
  level, but entering one imports torch._dynamo: seconds per worker.)

Over MAX_SHARE of the work (a judge's own limit) is a library call, rejected as a cheat.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field

import torch
from torch.overrides import TorchFunctionMode

MAX_SHARE = 0.5  # the bench: a kernel type's op, most of it must be the candidate's own
# Allocations, views, metadata, and fills (a constant computes nothing: the judges' own NaN
# poisoning of the candidate's empty tensors is a fill, and so is a zeroed accumulator).
_FREE = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "set_", "resize_", "detach",
         "alias", "item", "tolist", "size", "stride", "numel", "dim", "data_ptr", "untyped_storage",
         "element_size", "is_contiguous", "storage_offset", "fill", "fill_", "zero_", "zeros", "zeros_like",
         "ones", "ones_like", "full", "full_like", "new_zeros", "new_ones", "new_full"}
_FILL_KERNELS = ("FillFunctor", "fill_kernel")
_MATMUL = {"mm", "bmm", "addmm", "baddbmm", "addbmm", "addmv", "mv", "dot", "matmul", "linear", "einsum",
           "tensordot", "inner", "outer", "rmatmul"}
_pause = [0]


@dataclass
class WorkMeter:
    own: float = 0.0  # elements (and MACs) of its own Triton kernels
    foreign: dict[str, float] = field(default_factory=dict)  # aten op -> elements (or MACs)

    def add_foreign(self, name: str, work: float) -> None:
        self.foreign[name] = self.foreign.get(name, 0.0) + work


@contextlib.contextmanager
def paused():
    """The judge's own torch work inside a candidate's call (poisoning its empty tensors, the
    interpreter running its kernels) is not the candidate's."""
    _pause[0] += 1
    try:
        yield
    finally:
        _pause[0] -= 1


def _tensors(obj) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in _tensors(o)]
    if isinstance(obj, dict):
        return [t for o in obj.values() for t in _tensors(o)]
    return []


def _name(func) -> str:
    """sum for torch.sum, Tensor.sum, torch.ops.aten.sum.dim_IntList; matmul for __matmul__."""
    name = str(getattr(func, "__name__", "") or getattr(func, "_opname", "") or func).split(".")[0]
    return name.strip("_") if name.startswith("__") else name


def _storage(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return -1


def op_work(func, args, kwargs, out) -> float:
    """Elements a torch function reads and writes, or its multiply-accumulates when that is more;
    0 for allocations and views (every output in an input's memory)."""
    name = _name(func)
    outs = _tensors(out)
    if name in _FREE or not outs:
        return 0.0
    ins = _tensors(args) + _tensors(kwargs)
    mem = {_storage(t) for t in ins if t.numel()}
    if all(_storage(t) in mem or not t.numel() for t in outs):
        return 0.0
    work = float(sum(t.numel() for t in ins) + sum(t.numel() for t in outs))
    mats = [t for t in ins if t.dim() >= 1]
    if name in _MATMUL and len(mats) >= 2:
        work = max(work, float(outs[0].numel() * mats[0].shape[-1]))
    elif name.startswith("conv") and len(mats) >= 2 and mats[1].dim() >= 2:
        work = max(work, float(outs[0].numel() * math.prod(mats[1].shape[1:])))
    elif "scaled_dot_product" in name and len(mats) >= 2:
        work = max(work, 2.0 * mats[0].numel() * mats[1].shape[-2])
    return work


class TorchWork(TorchFunctionMode):
    """Counts the torch functions the candidate calls (outside paused()) into a WorkMeter. Only its
    own calls: inside a handler the mode is off, so what a function calls in turn is not seen."""

    def __init__(self, meter: WorkMeter):
        super().__init__()
        self.meter = meter

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not _pause[0]:
            work = op_work(func, args, kwargs or {}, out)
            if work:
                self.meter.add_foreign(_name(func), work)
        return out


# Convolutions a KernelBench start may leave to cuDNN on levels 2 and 3 (the rest fused around them):
# torch op names under the interpreter, and substrings of cuDNN's convolution kernel names on a GPU.
CONV_OPS = ("conv",)
CONV_KERNELS = ("conv", "fprop", "dgrad", "wgrad", "implicit_gemm", "implicit_convolve", "im2col", "winograd")


def is_convolution(name: str) -> bool:
    """A torch op or GPU kernel that is a convolution (CONV_OPS / CONV_KERNELS)."""
    low = name.lower()
    return low.startswith(CONV_OPS) or any(p in low for p in CONV_KERNELS)


def cpu_share(meter: WorkMeter, exempt=None) -> tuple[float, str]:
    """(library share of the work, what did it) under the interpreter; ops `exempt` accepts count
    neither as library nor as own work."""
    foreign_ops = {k: v for k, v in meter.foreign.items() if exempt is None or not exempt(k)}
    foreign = sum(foreign_ops.values())
    total = foreign + meter.own
    if total <= 0:
        return 0.0, ""
    top = sorted(foreign_ops.items(), key=lambda kv: -kv[1])[:4]
    return foreign / total, ", ".join(f"torch {k} {v / total:.0%}" for k, v in top)


def gpu_share(kernels: list[tuple[str, float]], is_foreign, exempt=None) -> tuple[float, str]:
    """(library share of the GPU time, what did it) from (kernel name, microseconds) pairs; kernels
    `exempt` accepts count neither as library nor as own work."""
    foreign: dict[str, float] = {}
    own = 0.0
    for name, us in kernels:
        if any(f in name for f in _FILL_KERNELS) or (exempt is not None and exempt(name)):
            continue
        if is_foreign(name):
            foreign[name] = foreign.get(name, 0.0) + us
        else:
            own += us
    total = own + sum(foreign.values())
    if total <= 0:
        return 0.0, ""
    top = sorted(foreign.items(), key=lambda kv: -kv[1])[:3]
    return sum(foreign.values()) / total, ", ".join(f"{k[:60]} {v / total:.0%}" for k, v in top)


def share_reason(share: float, what: str, on_gpu: bool, max_share: float = MAX_SHARE) -> str | None:
    """Why the candidate is rejected as a library call, or None."""
    if share <= max_share:
        return None
    unit = "GPU time" if on_gpu else "work (elements read and written under the interpreter)"
    return (f"library/torch ops did {share:.0%} of its {unit}, its own kernels {1 - share:.0%} "
            f"(at most {max_share:.0%} may be library work): {what}")
