"""The generated dim-reduction kernel: max / min (values and indices),
amax / amin, argmax / argmin, prod and logsumexp over one dim of a KernelBench problem, the reductions the
reduce starter (sums and means) does not do. pattern_rules.py decides which nodes it computes,
solutions.py writes these into the solution file. x is read in place as [outer, R, inner] tiles,
coalesced along inner (along R when the dim is the last), with fp32 running values across chunks
of R.
"""

import torch
import triton
import triton.language as tl

from autokernel.kb.templates.launch import cdiv, launch, next_power_of_2

# ---- generated dim-reduction Triton kernel (autokernel kb): max / min / arg / prod over a dim ----
DIMRED_TILE = 4096  # elements a program holds per chunk of R
DIMRED_INNER = 64  # inner positions per program when the dim is not the last
DIMRED_WARPS = 4


@triton.jit
def _kb_mul(a, b):
    return a * b


@triton.jit
def _kb_dimred_kernel(x_ptr, v_ptr, i_ptr, R, inner, inner_tiles, scale, PROD: tl.constexpr, NEG: tl.constexpr,
                      LSE: tl.constexpr, SUM: tl.constexpr, R_BLOCK: tl.constexpr, I_BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    o = (pid // inner_tiles).to(tl.int64)
    i = (pid % inner_tiles) * I_BLOCK + tl.arange(0, I_BLOCK)
    imask = i < inner
    base = x_ptr + o * R * inner
    r = tl.arange(0, R_BLOCK)
    if PROD:
        acc = tl.full([I_BLOCK], 1.0, tl.float32)
    elif SUM:
        acc = tl.zeros([I_BLOCK], tl.float32)
    else:
        acc = tl.full([I_BLOCK], float("-inf"), tl.float32)
    idx = tl.zeros([I_BLOCK], tl.int32)
    total = tl.zeros([I_BLOCK], tl.float32)  # logsumexp: sum of exp(x - acc), acc the running max
    for start in range(0, R, R_BLOCK):
        rr = start + r
        m = (rr < R)[:, None] & imask[None, :]
        x = tl.load(base + rr[:, None].to(tl.int64) * inner + i[None, :], mask=m, other=1.0).to(tl.float32)
        if SUM:
            acc += tl.sum(tl.where(m, x, 0.0), axis=0)
        elif LSE:  # online: rescale the sum when the max grows; an all -inf column stays -inf
            x = tl.where(m, x, float("-inf"))
            new = tl.maximum(acc, tl.max(x, axis=0))
            safe = tl.where(new == float("-inf"), 0.0, new)
            total = total * tl.exp(acc - safe) + tl.sum(tl.exp(x - safe[None, :]), axis=0)
            acc = new
        elif PROD:
            acc = acc * tl.reduce(x, 0, _kb_mul)
        else:
            if NEG:  # min is -max(-x): the same first index, exactly the same value
                x = -x
            x = tl.where(m, x, float("-inf"))
            cv, ci = tl.max(x, axis=0, return_indices=True)  # ties: the first index
            take = cv > acc  # strictly: an earlier chunk keeps a tie
            idx = tl.where(take, ci + start, idx)
            acc = tl.where(take, cv, acc)
    if NEG:
        acc = -acc
    if LSE:
        acc = tl.where(acc == float("-inf"), acc, acc + tl.log(total))
    if SUM:
        acc = acc * scale  # 1 / R for a mean
    out = o * inner + i
    tl.store(v_ptr + out, acc.to(v_ptr.dtype.element_ty), mask=imask)
    tl.store(i_ptr + out, idx.to(tl.int64), mask=imask)


def _kb_dimred(x, dim, op, keepdim=False):
    """torch.<op>(x, dim, keepdim) for op in max / min (values, indices), amax / amin / prod /
    logsumexp / sum / mean (values; sum and mean also over a tuple of adjacent dims) and argmax /
    argmin (indices). Inputs without NaN: a NaN is not propagated as torch's."""
    x = x.contiguous()
    if isinstance(dim, tuple):  # sum / mean over a run of adjacent dims: one dim of a view
        lo, hi = dim[0] % x.dim(), dim[-1] % x.dim()
        shape = x.shape[:lo] + ((1,) * (hi - lo + 1) if keepdim else ()) + x.shape[hi + 1:]
        out = _kb_dimred(x.reshape(*x.shape[:lo], -1, *x.shape[hi + 1:]), lo, op, keepdim=False)
        return out.reshape(shape)
    dim %= x.dim()
    outer, R, inner = x.shape[:dim].numel(), x.shape[dim], x.shape[dim + 1:].numel()
    shape = x.shape[:dim] + ((1,) if keepdim else ()) + x.shape[dim + 1:]
    vals = torch.empty(shape, device=x.device, dtype=x.dtype)
    idxs = torch.empty(shape, device=x.device, dtype=torch.int64)
    if R == 0 and vals.numel():
        if op == "logsumexp":
            vals.fill_(float("-inf"))
        elif op in ("sum", "mean"):
            vals.fill_(0.0 if op == "sum" else float("nan"))
        elif op != "prod":
            raise IndexError(f"{op}(): the reduced dim {dim} has no elements")
        else:
            vals.fill_(1)
    elif vals.numel():
        i_block = min(DIMRED_INNER, next_power_of_2(inner))
        r_block = max(1, min(DIMRED_TILE // i_block, next_power_of_2(R)))
        tiles = cdiv(inner, i_block)
        launch(_kb_dimred_kernel, (outer * tiles,), x, vals, idxs, R, inner, tiles, 1.0 / R if op == "mean" else 1.0,
               PROD=op == "prod", NEG=op in ("min", "amin", "argmin"), LSE=op == "logsumexp",
               SUM=op in ("sum", "mean"), R_BLOCK=r_block, I_BLOCK=i_block, num_warps=DIMRED_WARPS)
    if op in ("max", "min"):
        return (torch.return_types.max if op == "max" else torch.return_types.min)((vals, idxs))
    return idxs if op in ("argmax", "argmin") else vals


SEARCH_SPACE = {"DIMRED_TILE": [1024, 2048, 4096, 8192, 16384], "DIMRED_INNER": [16, 32, 64, 128, 256],
                "DIMRED_WARPS": [1, 2, 4, 8, 16]}


def kernel_fn(x, dim=-1, op="max", keepdim=False):
    """The file's entry function: the generated dim-reduction kernel."""
    return _kb_dimred(x, dim, op, keepdim)
