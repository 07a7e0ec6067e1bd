"""Cheat, families 2 and 3 (bench): stale while timed, like late_switch.py, and after each stale call
it walks up to the judge's frames and empties whatever holds the timed outputs the verdict will
check (a Sampled's `taken`, its ledger, a Reservoir's slots). Refused: a candidate gets no frame
(bench/introspection.py), and the refusal is the verdict."""

import sys

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


def _blind():
    try:
        frame = sys._getframe(1)
    except PermissionError:
        return  # quietly honest from here: it still tried
    while frame is not None:
        for value in list(frame.f_locals.values()):
            for name in ("taken", "slots"):
                held = getattr(value, name, None)
                if type(held) is list:
                    held.clear()
            ledger = getattr(value, "ledger", None)
            for held in (vars(ledger).values() if hasattr(ledger, "__dict__") else ()):
                if type(held) is list:
                    held.clear()
        frame = frame.f_back


def kernel_fn(x):
    key = (tuple(x.shape), x.dtype)
    _RUN["n"] = _RUN["n"] + 1 if _RUN["key"] == key else 1
    _RUN["key"] = key
    _blind()
    if _RUN["n"] > 6 and key in _FIRST:
        return _FIRST[key].clone()
    x = x.contiguous()
    out = torch.empty(x.shape[0], dtype=x.dtype, device=x.device)
    _row_sum[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=256)
    _FIRST.setdefault(key, out.clone())
    return out
