"""The generic elementwise Triton kernel of a KernelBench solution: every floating-point
elementwise op of a problem (the ops of EW, by name) as `_kb_ew(EW.<OP>, x[, y])`, y a tensor of
x's shape, a row, a block broadcast over a run of x's dims, or a scalar. The branches of
`_kb_ew_kernel` are also the expressions the generated fused kernels compute each op with
(autokernel/kb/elementwise.py reads them from this source).
"""

import torch
import triton
import triton.language as tl

from autokernel.kb.templates.launch import cdiv, launch


class EW:
    """The ops of _kb_ew_kernel (its OP), by name."""
    RELU, GELU, GELU_TANH, SIGMOID, TANH, SILU, EXP, NEG, ABS, RSQRT = range(10)
    ADD, SUB, MUL, DIV, RSUB, RDIV, MAXIMUM, MINIMUM, CLAMP, LEAKY_RELU = range(10, 20)
    SQUARE, SQRT, LOG, MISH, SOFTPLUS, HARDSWISH, ELU, SMOOTH_L1, CUBE, SELU = range(20, 30)
    HARDSIGMOID, XLOGY = range(30, 32)

# ---- generic elementwise Triton kernel (autokernel kb) -------------------------------------------
EW_BLOCK = 1024
EW_WARPS = 4


@triton.jit
def _kb_softplus(x, beta, threshold):
    # PyTorch's: x itself above the threshold; exp(bx)/b far below 0, where 1 + exp(bx) rounds to 1
    bx = x * beta
    mid = tl.log(1.0 + tl.exp(tl.minimum(bx, threshold))) / beta
    return tl.where(bx > threshold, x, tl.where(bx < -15.0, tl.exp(tl.minimum(bx, -15.0)) / beta, mid))


@triton.jit
def _kb_mish(x):
    # tanh(log(1 + e^x)) = n(n + 2) / (n(n + 2) + 2) with n = e^x: no cancellation for x < 0, and
    # exactly 1 in fp32 once x passes 20 (PyTorch's softplus threshold)
    n = tl.exp(tl.minimum(x, 20.0))
    m = n * (n + 2.0)
    return x * (m / (m + 2.0))


@triton.jit
def _kb_smooth_l1(d, beta):
    # F.smooth_l1_loss per element of d = input - target; beta == 0 selects |d| (torch's l1_loss)
    ad = tl.abs(d)
    return tl.where(ad < beta, 0.5 * d * d / beta, ad - 0.5 * beta)


@triton.jit
def _kb_ew_kernel(x_ptr, y_ptr, out_ptr, n, ncols, alpha, beta, inner, size, OP: tl.constexpr,
                  HAS_Y: tl.constexpr, BLOCK: tl.constexpr):
    base = tl.program_id(0).to(tl.int64) * BLOCK
    offs = base + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=1.0).to(tl.float32)
    if HAS_Y == 1:  # y of x's shape
        y = tl.load(y_ptr + offs, mask=mask, other=1.0).to(tl.float32)
    elif HAS_Y == 2:  # y a row along the last dim (a bias)
        y = tl.load(y_ptr + offs % ncols, mask=mask, other=1.0).to(tl.float32)
    elif HAS_Y == 3:  # y broadcast over a run of x's dims ([C, 1, 1], [rows, 1], one element)
        y = tl.load(y_ptr + _kb_bidx(base, inner, size, BLOCK), mask=mask, other=1.0).to(tl.float32)
    else:
        y = alpha
    if OP == 0:
        r = tl.maximum(x, 0.0)
    elif OP == 1:
        r = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
    elif OP == 2:
        r = 0.5 * x * (1.0 + (2.0 / (1.0 + tl.exp(-2.0 * (0.7978845608028654 * (x + 0.044715 * x * x * x)))) - 1.0))
    elif OP == 3:
        r = 1.0 / (1.0 + tl.exp(-x))
    elif OP == 4:
        r = 2.0 / (1.0 + tl.exp(-2.0 * x)) - 1.0
    elif OP == 5:
        r = x / (1.0 + tl.exp(-x))
    elif OP == 6:
        r = tl.exp(x)
    elif OP == 7:
        r = -x
    elif OP == 8:
        r = tl.abs(x)
    elif OP == 9:
        r = tl.rsqrt(x)
    elif OP == 10:
        r = x + y
    elif OP == 11:
        r = x - y
    elif OP == 12:
        r = x * y
    elif OP == 13:
        r = x / y
    elif OP == 14:
        r = y - x
    elif OP == 15:
        r = y / x
    elif OP == 16:
        r = tl.maximum(x, y)
    elif OP == 17:
        r = tl.minimum(x, y)
    elif OP == 18:
        r = tl.minimum(tl.maximum(x, alpha), beta)
    elif OP == 19:
        r = tl.where(x >= 0.0, x, x * alpha)
    elif OP == 20:
        r = x * x
    elif OP == 21:
        r = tl.sqrt(x)
    elif OP == 22:
        r = tl.log(x)
    elif OP == 23:
        r = _kb_mish(x)
    elif OP == 24:
        r = _kb_softplus(x, alpha, beta)
    elif OP == 25:
        r = x * tl.minimum(tl.maximum(x + 3.0, 0.0), 6.0) / 6.0
    elif OP == 26:
        r = tl.where(x > 0.0, x, alpha * (tl.exp(x) - 1.0))
    elif OP == 28:
        r = x * x * x
    elif OP == 29:
        r = 1.0507009873554805 * tl.where(x > 0.0, x, 1.6732632423543772 * (tl.exp(x) - 1.0))
    elif OP == 30:
        r = tl.minimum(tl.maximum(x + 3.0, 0.0), 6.0) / 6.0
    elif OP == 31:
        r = tl.where(x == 0.0, 0.0, x * tl.log(y))
    else:  # EW.SMOOTH_L1: smooth_l1(x - y, beta=alpha)
        r = _kb_smooth_l1(x - y, alpha)
    tl.store(out_ptr + offs, r.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _kb_bidx(base, inner, size, BLOCK: tl.constexpr):
    # (offs // inner) % size for offs = base + arange(BLOCK): the 64-bit division once per
    # program, 32-bit ones per element (a 64-bit division per element costs more than the load)
    q0 = ((base // inner) % size).to(tl.int32)
    j = (base % inner).to(tl.int32) + tl.arange(0, BLOCK)
    if inner >= BLOCK:  # j < 2 * inner: the block crosses at most one boundary, no division per element
        q = q0 + (j >= inner).to(tl.int32)
        idx = tl.where(q >= size, q - size, q)
    else:
        idx = (q0 + j // inner) % size
    return idx


def _kb_block(full, shape):
    """(inner, size) when a tensor of `shape` broadcasts to `full` with its non-1 dims one run of
    full's dims ([C, 1, 1] against [N, C, H, W]): element i of the broadcast is element
    (i // inner) % size of the tensor. None otherwise, or past the kernels' 32-bit index. The
    generator uses it on traced shapes; the solution file carries its source for run-time shapes."""
    if len(shape) > len(full):
        return None
    shape = (1,) * (len(full) - len(shape)) + tuple(shape)
    big = [d for d, v in enumerate(shape) if v != 1]
    if big and any(shape[d] != full[d] for d in range(big[0], big[-1] + 1)):
        return None
    inner = size = 1
    for v in full[big[-1] + 1:] if big else ():
        inner *= v
    for v in shape:
        size *= v
    return (inner, size) if inner < 2**30 and size < 2**30 else None


# x OP y == y OP' x
_KB_SWAP = {EW.ADD: EW.ADD, EW.SUB: EW.RSUB, EW.MUL: EW.MUL, EW.DIV: EW.RDIV, EW.MAXIMUM: EW.MAXIMUM,
            EW.MINIMUM: EW.MINIMUM}


def _kb_ew(op, x, y=None, alpha=0.0, beta=0.0):
    """out = op(x[, y]) elementwise; y a tensor (broadcast) or None (scalar alpha)."""
    mode, inner, size = 0, 1, 1
    if isinstance(y, torch.Tensor):
        shape = torch.broadcast_shapes(x.shape, y.shape)
        dtype = torch.result_type(x, y)
        if tuple(shape) != tuple(x.shape) and tuple(shape) == tuple(y.shape) and op in _KB_SWAP:
            # x is the broadcast one (diag(a) @ B written a[:, None] * B): swapped, so that it is
            # indexed in place instead of expanded into a copy of B's size
            x, y, op = y, x, _KB_SWAP[op]
        if y.dim() == 1 and x.dim() >= 1 and tuple(shape) == tuple(x.shape) and y.shape[0] == x.shape[-1]:
            mode, xx, yy = 2, x.to(dtype).contiguous(), y.to(dtype).contiguous()
        elif tuple(shape) == tuple(x.shape) and (block := _kb_block(shape, y.shape)):
            mode, xx, yy = 3, x.to(dtype).contiguous(), y.to(dtype).contiguous()
            inner, size = block
        else:
            mode = 1
            xx = x.to(dtype).expand(shape).contiguous()
            yy = y.to(dtype).expand(shape).contiguous()
    else:
        shape, dtype = x.shape, x.dtype
        xx = x.contiguous()
        yy = xx
    out = torch.empty(shape, device=x.device, dtype=dtype)
    n = out.numel()
    if n == 0:
        return out
    launch(_kb_ew_kernel, (cdiv(n, EW_BLOCK),), xx, yy, out, n, max(1, xx.shape[-1] if xx.dim() else 1),
                                               float(alpha), float(beta), inner, size, OP=op, HAS_Y=mode,
                                               BLOCK=EW_BLOCK, num_warps=EW_WARPS)
    return out


kb_ew = _kb_ew  # its public name, for kernels/matmul/kb_helper.py (no solution file has it)

SEARCH_SPACE = {"EW_BLOCK": [256, 512, 1024, 2048, 4096], "EW_WARPS": [1, 2, 4, 8]}


def kernel_fn(x, y=None, op=EW.RELU):
    """The file's entry function: the generic elementwise kernel."""
    return _kb_ew(op, x, y)
