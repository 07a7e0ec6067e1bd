"""The generated row-scan kernel: cumsum / cumprod of a KernelBench problem
over any one dim (pattern_rules.py decides which nodes it computes, solutions.py writes these into the
solution file next to the elementwise kernel).
"""

import torch
import triton
import triton.language as tl

from autokernel.kb.templates.launch import cdiv, launch, next_power_of_2

# ---- generated row-scan Triton kernel (autokernel kb): cumsum / cumprod over one dim ----------
SCAN_BLOCK = 2048  # the widest chunk a program scans at once; longer rows are walked chunk by chunk
SCAN_TILE = 4096  # elements a program holds per step: short rows are packed SCAN_TILE // chunk a program
SCAN_WARPS = 4


@triton.jit
def _kb_scan_kernel(x_ptr, m_ptr, out_ptr, rows, n, sx, sm, PROD: tl.constexpr, REVERSE: tl.constexpr,
                    HAS_MASK: tl.constexpr, WIDE: tl.constexpr, ROWS: tl.constexpr, BLOCK: tl.constexpr,
                    EXCLUSIVE: tl.constexpr = False):
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    rmask = r < rows
    r64 = r.to(tl.int64)
    cols = tl.arange(0, BLOCK)
    # The running total in fp32, or in fp64 for fp32 rows (WIDE): a fp32 tree scan differs from
    # torch's order by a few ulps of the total, and a problem that exponentiates cumulative sums
    # (KernelBench L3 49, Mamba2's segment sums) turns that into misses at 1e-4. torch's CPU cumsum
    # accumulates in double; wide, the difference left is torch's own rounding. The scan reads and
    # writes memory far slower than the GPU does fp64 adds. Rounded once, when stored.
    acc = tl.float64 if WIDE else tl.float32
    if PROD:
        carry = tl.full([ROWS], 1.0, acc)
        ident = 1.0
    else:
        carry = tl.zeros([ROWS], acc)
        ident = 0.0
    for start in range(0, n, BLOCK):
        c = start + cols
        inb = rmask[:, None] & (c < n)[None, :]
        if REVERSE:  # walk the row from its end: a reversed scan is a forward scan of the mirrored row
            c = n - 1 - c
        src = c
        ld = inb
        if EXCLUSIVE:  # out[i] takes the row up to i - 1 (from i + 1 reversed): read one place behind
            src = c + 1 if REVERSE else c - 1
            ld = inb & (src >= 0)[None, :] & (src < n)[None, :]
        # out-of-row lanes hold the identity, so a chunk's last lane is always its row's running total
        v = tl.load(x_ptr + r64[:, None] * sx + src[None, :], mask=ld, other=ident).to(acc)
        if HAS_MASK:  # x * mask fused as a prologue: the product is never written out
            v = v * tl.load(m_ptr + r64[:, None] * sm + src[None, :], mask=ld, other=1).to(acc)
        if PROD:
            y = tl.cumprod(v, axis=1) * carry[:, None]
        else:
            y = tl.cumsum(v, axis=1) + carry[:, None]
        tl.store(out_ptr + r64[:, None] * n + c[None, :], y.to(out_ptr.dtype.element_ty), mask=inb)
        carry = tl.sum(tl.where(cols[None, :] == BLOCK - 1, y, 0.0), axis=1)


def _kb_rows(t, n):
    """t as [rows, n] with unit column stride: in place when its layout allows (a narrowed last dim
    keeps its row stride), else one copy."""
    if t.stride(-1) != 1:
        t = t.contiguous()
    try:
        return t.view(-1, n)
    except RuntimeError:
        return t.contiguous().view(-1, n)


def _kb_scan(x, dim, prod=False, reverse=False, mask=None, contiguous=False, exclusive=False):
    """torch.cumsum / cumprod(x [* mask], dim), flipped before and after when reverse: a row scan
    of a [rows, x.shape[dim]] matrix, fp32 accumulation (fp64 for fp32 and fp64 x), x's dtype out.
    exclusive: element i leaves out x[i] (the identity first: KernelBench L1 92's
    cat([zeros, cumsum(x.narrow(dim, 0, n - 1))]) in one pass, no copy of the scan for the cat)."""
    dim = dim % x.dim()
    n = x.shape[dim]
    last = dim == x.dim() - 1
    # a non-last dim is moved last with one copy, as _kb_softmax's: scanned in place, each row
    # would be strided by the inner size (one element per row of a column, uncoalesced)
    src = x if last else x.movedim(dim, -1).contiguous()
    out = torch.empty(src.shape, device=x.device, dtype=x.dtype)
    if out.numel() == 0:
        return out if last else out.movedim(-1, dim)
    xr = _kb_rows(src, n)
    mr = xr
    if mask is not None:
        m = mask if last else mask.movedim(dim, -1)
        mr = _kb_rows(m.view(torch.uint8) if m.dtype == torch.bool else m, n)
    rows = xr.shape[0]
    block = min(SCAN_BLOCK, next_power_of_2(n))
    per = max(1, min(SCAN_TILE // block, next_power_of_2(rows)))
    launch(_kb_scan_kernel, (cdiv(rows, per),), xr, mr, out, rows, n, xr.stride(0), mr.stride(0), PROD=prod,
                                               REVERSE=reverse, HAS_MASK=mask is not None,
                                               WIDE=x.dtype in (torch.float32, torch.float64), ROWS=per,
                                               BLOCK=block, EXCLUSIVE=exclusive, num_warps=SCAN_WARPS)
    if last:
        return out
    # a permuted view, as _kb_softmax's: x's layout back only where a .view or the return needs it
    y = out.movedim(-1, dim)
    return y.contiguous() if contiguous else y


SEARCH_SPACE = {"SCAN_BLOCK": [256, 512, 1024, 2048, 4096, 8192], "SCAN_TILE": [1024, 2048, 4096, 8192, 16384],
                "SCAN_WARPS": [1, 2, 4, 8, 16]}


def kernel_fn(x, dim=-1, prod=False, reverse=False, mask=None, exclusive=False):
    """The file's entry function: the generated row-scan kernel."""
    return _kb_scan(x, dim, prod=prod, reverse=reverse, mask=mask, exclusive=exclusive)
