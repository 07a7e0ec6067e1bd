"""Cheat, family 3 (bench): an honest kernel that, at import, reaches the bench's timing module
through sys.modules and plants slow baselines in its lower-case caches: a compiled reference that
sleeps 2 ms before it runs, and huge numbers under every baseline key it can guess. No audited
event is raised and no snapshotted name changes. Neutralized, not rejected: the judge's child
times no baseline; they come from the trusted process (bench/baselines.py), so the planted
numbers never reach the result."""

import sys
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


def _plant():
    timing = sys.modules.get("autokernel.bench.timing")
    if timing is None:
        return
    reference = sys.modules["autokernel.kernels"].get_spec(KERNEL_TYPE).reference

    def slow(*args):
        time.sleep(0.002)
        return reference(*args)

    for cache in ("_compiled",):
        getattr(timing, cache, {})[KERNEL_TYPE] = slow

    class Huge(dict):  # every key "present", every baseline 1 s
        def __contains__(self, key):
            return True

        def __getitem__(self, key):
            return (1e6, 1e6) if isinstance(key, tuple) and len(key) == 3 else super().__getitem__(key)

    for name in ("_baselines",):
        planted = Huge(getattr(timing, name, {}))
        setattr(timing, name, planted)
    walls = getattr(timing, "_eager_walls", None)
    if walls is not None:
        setattr(timing, "_eager_walls", type("Walls", (dict,), {"__contains__": lambda s, k: True,
                                                               "__getitem__": lambda s, k: 1e6})())


_plant()


def kernel_fn(x):
    x = x.contiguous()
    out = torch.empty(x.shape[0], dtype=x.dtype, device=x.device)
    _row_sum[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=256)
    return out
