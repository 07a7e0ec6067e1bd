"""Whose work is it? The share of a candidate's work that library code did.

A candidate may launch one throwaway kernel of its own for show and get the result from the
library op it was meant to replace, reached however indirectly (torch.ops.aten.*, getattr or
importlib strings, tensor methods): every path ends in the same library kernels. So library work
counts against the candidate by its share of all the work its calls did:

- on the GPU, kernel time from the profiler (session_work): its own kernels (its Triton functions,
  or for a CUDA file kernels that are neither library nor generic) where no library kernel runs
  beside them, against the library's (the spec's library kernels, cuBLAS/cuDNN, aten's generic
  kernels) and, on a warm call, the GPU time between the judge's marker kernels that no kernel the
  profiler saw accounts for. A candidate can turn the profiler's collection off around a library
  call (torch's own toggle_collection_dynamic does it), but not the GPU's clock: what it hid still
  takes the GPU time between the markers, and counts against it;
- under the Triton interpreter, work counted in elements: what its own kernels load and store
  (and multiply-accumulate in tl.dot), against what every torch function it calls reads and
  writes (or multiply-accumulates, for matmuls and convolutions), seen by a TorchFunctionMode
  under every call (it sees torch.ops.aten.*, tensor methods and functions however they were
  looked up). Views (an output in an input's memory) and allocations are free; what the
  interpreter and the judge do is not counted. (A TorchDispatchMode would see the same at the aten
  level, but entering one imports torch._dynamo: seconds per worker.)

Over MAX_SHARE of the work (a judge's own limit) is a library call, rejected as a cheat.

The interpreter's count is weaker than the GPU's clock: the meter lives in the judge's process, and
a candidate that pauses it or pops its mode for the length of a library call is not seen doing it
(there is no clock to show the hidden work). The CPU judges correctness; the verdicts that keep a
kernel for its speed are the GPU's, where the share is measured against the clock.
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


# The GPU's idle time that a profiled call may have without a kernel to account for it: what the
# launches queued behind the judge's lead sleep leave between kernels that run back to back (a few
# microseconds each), and a floor for the timeline's own jitter.
GAP_US = 3.0
IDLE_FLOOR_US = 20.0
UNSEEN = "GPU time no kernel the profiler saw accounts for"
NEUTRAL_KERNELS = _FILL_KERNELS + ("Memcpy", "Memset")  # the profiler's names for fills and copies


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for s, e in sorted(spans):
        if e <= s:
            continue
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def _length(spans: list[tuple[float, float]]) -> float:
    return sum(e - s for s, e in spans)


def covered_us(spans: list[tuple[float, float]]) -> float:
    """The time some of `spans` covers (overlaps counted once)."""
    return _length(_union(spans))


def _minus(spans: list[tuple[float, float]], cut: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The parts of `spans` (a union) outside `cut` (a union)."""
    out, j = [], 0
    for s, e in spans:
        while j < len(cut) and cut[j][1] <= s:
            j += 1
        k = j
        while s < e:
            if k >= len(cut) or cut[k][0] >= e:
                out.append((s, e))
                break
            if cut[k][0] > s:
                out.append((s, cut[k][0]))
            s = max(s, cut[k][1])
            k += 1
    return out


def session_work(session, is_foreign, exempt=None) -> tuple[float, float, dict[str, float]]:
    """(library microseconds, own microseconds, library time by kernel name) of one profiled call.

    Only what is proven the candidate's own counts as its own: its kernels' time where no library
    kernel runs beside them (a spinner of its own on another stream, as long as the library call,
    proves nothing). On a warm call (queued behind the judge's lead sleep, so that its kernels run
    back to back) the GPU time between the judge's markers that no kernel the profiler saw accounts
    for counts as library time: work the profiler was kept from seeing (its collection turned off
    for the library call) is work the candidate cannot show to be its own. Fills, copies and
    `exempt` kernels count on neither side (and do account for their time)."""
    lo, hi = session.span
    clip = [(n, max(s, lo), min(e, hi)) for n, s, e in session.intervals]
    clip = [(n, s, e) for n, s, e in clip if e > s]
    rest = [(n, s, e) for n, s, e in clip if not (any(f in n for f in NEUTRAL_KERNELS)
                                                  or (exempt is not None and exempt(n)))]
    foreign = [(n, s, e) for n, s, e in rest if is_foreign(n)]
    lib = _union([(s, e) for _n, s, e in foreign])
    own = _length(_minus(_union([(s, e) for n, s, e in rest if not is_foreign(n)]), lib))
    by_name: dict[str, float] = {}
    for n, s, e in foreign:
        by_name[n] = by_name.get(n, 0.0) + (e - s)
    library = _length(lib)
    if session.warm:
        seen = [(s, e) for _n, s, e in clip] + [(max(s, lo), min(e, hi)) for s, e in session.marks]
        idle = max(0.0, hi - lo) - covered_us(seen)
        unseen = idle - (IDLE_FLOOR_US + GAP_US * (len(clip) + 1))
        if unseen > 0:
            library += unseen
            by_name[UNSEEN] = by_name.get(UNSEEN, 0.0) + unseen
    return library, own, by_name


def gpu_share(sessions, is_foreign, exempt=None) -> tuple[float, str]:
    """(library share of the GPU time, what did it) over the profiled calls (launches.GpuSession):
    session_work summed; kernels `exempt` accepts count neither as library nor as own work."""
    library = own = 0.0
    names: dict[str, float] = {}
    for session in sessions:
        lib, mine, by_name = session_work(session, is_foreign, exempt)
        library, own = library + lib, own + mine
        for n, us in by_name.items():
            names[n] = names.get(n, 0.0) + us
    total = library + own
    if total <= 0:
        return 0.0, ""
    top = sorted(names.items(), key=lambda kv: -kv[1])[:3]
    return library / total, ", ".join(f"{k[:60]} {v / total:.0%}" for k, v in top)


def share_reason(share: float, what: str, on_gpu: bool, max_share: float = MAX_SHARE) -> str | None:
    """Why the candidate is rejected as a library call, or None."""
    if share <= max_share:
        return None
    unit = "GPU time" if on_gpu else "work (elements read and written under the interpreter)"
    return (f"library/torch ops did {share:.0%} of its {unit}, its own kernels {1 - share:.0%} "
            f"(at most {max_share:.0%} may be library work): {what}")
