"""Triton reduce starter: out[r] = sum(x[r, :]), fp32 accumulation, result in x's dtype.

One kernel covers every row length. A program owns a [ROWS, BLOCK] tile: short rows are packed
several to a program (a 4096-wide bf16 row alone is only 8 KB of traffic, too little to hide a
launch's latency), long rows are walked in BLOCK-wide chunks into a per-lane fp32 accumulator
that is reduced across lanes once at the end. When there are too few rows to fill the GPU
(fewer than MIN_PROGRAMS programs), each row is cut into segments of whole chunks: programs
write fp32 partial sums, and the same kernel then sums each row's partials in segment order and
rounds once. The split depends only on the shape, so results are bitwise reproducible.

A second entry, sum_dim(x, dim, keepdim, mean), is torch.sum / torch.mean over one dim, a run of
adjacent dims, or all of x. Over trailing dims it is the row sums above. Over leading or middle
dims it reads x in place as [outer, R, inner]: a program owns one outer index and INNER_BLOCK
contiguous inner columns and walks R in [rows, INNER_BLOCK] tiles, so each load is a contiguous
run along `inner` (moving the dim last first would cost a full extra read and write of x). Too
few programs split R into segments the same way, partials summed in segment order.
"""

import torch
import triton
import triton.language as tl

try:  # the lean launch path (autokernel/kernels/launcher.py); standalone, the file launches the usual way
    from autokernel.kernels.launcher import cdiv, launch, next_power_of_2
except ImportError:
    cdiv, next_power_of_2 = triton.cdiv, triton.next_power_of_2

    def launch(kernel, grid, *args, **meta):
        return kernel[grid](*args, **meta)

KERNEL_TYPE = "reduce"
BACKEND = "triton"

BLOCK_C = 2048  # columns per chunk (the longest a row tile gets; H200 sweep: 2048 > 4096)
TILE = 2048  # elements per [rows, cols] tile: short rows are packed up to this (H200 sweep)
NUM_WARPS = 8
NUM_STAGES = 3  # software pipelining of the chunk loads of long rows
MIN_PROGRAMS = 1024  # below this many programs, long rows (or a long R) are split into segments
# sum_dim over a non-trailing dim: 128 fp32 columns = 512 contiguous bytes per tile row, whole
# 128-byte lines for every warp; the tile gives each thread 16 fp32 values in flight at 8 warps.
INNER_BLOCK = 128
COL_TILE = 4096  # elements per [rows of R, INNER_BLOCK] tile

SEARCH_SPACE = {
    "BLOCK_C": [512, 1024, 2048, 4096, 8192],
    "TILE": [2048, 4096, 8192, 16384],
    "NUM_WARPS": [2, 4, 8, 16],
    "NUM_STAGES": [1, 2, 3, 4],
    "MIN_PROGRAMS": [264, 528, 1024, 2048],
    "INNER_BLOCK": [32, 64, 128, 256, 512],
    "COL_TILE": [1024, 2048, 4096, 8192, 16384],
}

DETERMINISTIC = True  # fixed split for a shape, partials summed in a fixed order


def valid_config(cfg):
    # The fp32 accumulator tiles in registers: at most 64 values per thread.
    return cfg["TILE"] >= cfg["BLOCK_C"] and cfg["TILE"] // (32 * cfg["NUM_WARPS"]) <= 64 \
        and cfg["COL_TILE"] >= cfg["INNER_BLOCK"] and cfg["COL_TILE"] // (32 * cfg["NUM_WARPS"]) <= 64


@triton.jit
def _row_sum_kernel(x_ptr, out_ptr, R, C, stride_r, stride_c, seg_len, out_stride_r, scale,
                    ROWS: tl.constexpr, BLOCK: tl.constexpr):
    scale = tl.cast(scale, tl.float32)  # torch.compile passes a Python float as fp64
    pid_r = tl.program_id(0)
    seg = tl.program_id(1)
    rows = pid_r * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    row_ok = rows < R
    row_ptr = x_ptr + rows.to(tl.int64)[:, None] * stride_r
    start = seg * seg_len
    end = tl.minimum(start + seg_len, C)
    acc = tl.zeros((ROWS, BLOCK), tl.float32)
    for c0 in range(start, end, BLOCK):
        c = c0 + cols
        mask = row_ok[:, None] & (c < end)[None, :]
        acc += tl.load(row_ptr + c.to(tl.int64)[None, :] * stride_c, mask=mask, other=0.0).to(tl.float32)
    total = tl.sum(acc, axis=1) * scale
    tl.store(out_ptr + rows.to(tl.int64) * out_stride_r + seg, total.to(out_ptr.dtype.element_ty), mask=row_ok)


@triton.jit
def _col_sum_kernel(x_ptr, out_ptr, R, INNER, stride_o, stride_r, stride_i, seg_len, out_stride_o,
                    out_stride_s, scale, R_BLOCK: tl.constexpr, I_BLOCK: tl.constexpr):
    # outer and the column block share grid axis 0: outer alone can pass axis 1's limit of 65535
    pid = tl.program_id(0)
    seg = tl.program_id(1)
    n_ib = tl.cdiv(INNER, I_BLOCK)
    o = (pid // n_ib).to(tl.int64)
    cols = (pid % n_ib) * I_BLOCK + tl.arange(0, I_BLOCK)
    col_ok = cols < INNER
    col_ptr = x_ptr + o * stride_o + cols.to(tl.int64)[None, :] * stride_i
    rs = tl.arange(0, R_BLOCK)
    start = seg * seg_len
    end = tl.minimum(start + seg_len, R)
    acc = tl.zeros((R_BLOCK, I_BLOCK), tl.float32)
    for r0 in range(start, end, R_BLOCK):
        r = r0 + rs
        mask = (r < end)[:, None] & col_ok[None, :]
        acc += tl.load(col_ptr + r.to(tl.int64)[:, None] * stride_r, mask=mask, other=0.0).to(tl.float32)
    total = tl.sum(acc, axis=0) * scale
    tl.store(out_ptr + o * out_stride_o + seg * out_stride_s + cols, total.to(out_ptr.dtype.element_ty), mask=col_ok)


def _launch(x, out, out_stride_r, n_seg, seg_len, scale):
    R, C = x.shape
    block = min(BLOCK_C, next_power_of_2(min(seg_len, C)))
    rows = max(1, min(TILE // block, next_power_of_2(R)))
    warps = max(1, min(NUM_WARPS, rows * block // 32))
    grid = (cdiv(R, rows), n_seg)
    launch(_row_sum_kernel, grid, x, out, R, C, x.stride(0), x.stride(1), seg_len, out_stride_r, scale,
                          ROWS=rows, BLOCK=block, num_warps=warps, num_stages=NUM_STAGES)


def _row_sums(x, scale):
    R, C = x.shape
    out = torch.empty((R,), device=x.device, dtype=x.dtype)
    if R == 0:
        return out
    if C == 0:
        return out.fill_(0.0 * scale)  # a mean over nothing is nan, as torch's
    chunks = cdiv(C, BLOCK_C)
    # Rows of one chunk or less are packed; longer rows get one program each, or several when
    # there are too few rows to occupy the GPU.
    n_seg = 1
    if chunks > 1 and R < MIN_PROGRAMS:
        n_seg = min(chunks, cdiv(MIN_PROGRAMS, R))
    if n_seg == 1:
        _launch(x, out, 1, 1, C, scale)
        return out
    seg_len = cdiv(chunks, n_seg) * BLOCK_C
    n_seg = cdiv(C, seg_len)
    partial = torch.empty((R, n_seg), device=x.device, dtype=torch.float32)
    _launch(x, partial, n_seg, n_seg, seg_len, 1.0)
    _launch(partial, out, 1, 1, n_seg, scale)  # scaled once, at the rounding
    return out


def _launch_cols(x3, out, n_seg, seg_len, r_block, i_block, scale):
    outer, R, inner = x3.shape
    warps = max(1, min(NUM_WARPS, r_block * i_block // 32))
    grid = (outer * cdiv(inner, i_block), n_seg)
    launch(_col_sum_kernel, grid, x3, out, R, inner, x3.stride(0), x3.stride(1), x3.stride(2), seg_len,
                          n_seg * inner, inner, scale, R_BLOCK=r_block, I_BLOCK=i_block, num_warps=warps)


def _col_sums(x3, scale):
    outer, R, inner = x3.shape
    out = torch.empty((outer, inner), device=x3.device, dtype=x3.dtype)
    if out.numel() == 0:
        return out
    if R == 0:
        return out.fill_(0.0 * scale)
    i_block = min(INNER_BLOCK, next_power_of_2(inner))
    r_block = max(1, min(COL_TILE // i_block, next_power_of_2(R)))
    programs = outer * cdiv(inner, i_block)
    chunks = cdiv(R, r_block)
    n_seg = 1
    if chunks > 1 and programs < MIN_PROGRAMS:
        n_seg = min(chunks, cdiv(MIN_PROGRAMS, programs))
    if n_seg == 1:
        _launch_cols(x3, out, 1, R, r_block, i_block, scale)
        return out
    seg_len = cdiv(chunks, n_seg) * r_block
    n_seg = cdiv(R, seg_len)
    partial = torch.empty((outer, n_seg, inner), device=x3.device, dtype=torch.float32)
    _launch_cols(x3, partial, n_seg, seg_len, r_block, i_block, 1.0)
    p_block = max(1, min(COL_TILE // i_block, next_power_of_2(n_seg)))
    _launch_cols(partial, out, 1, n_seg, p_block, i_block, scale)
    return out


def kernel_fn(x):
    assert x.dim() == 2, "x[rows, cols]"
    return _row_sums(x, 1.0)


def sum_dim(x, dim=None, keepdim=False, mean=False):
    """torch.sum(x, dim, keepdim), or torch.mean with `mean`: dim one dim, a tuple of adjacent
    dims, or None (all of x). The mean divides in fp32 before the one rounding to x's dtype (a
    16-bit sum could overflow where the mean does not)."""
    nd = x.dim()
    if dim is None:
        lo, hi = 0, nd
    else:
        dims = sorted(d % max(nd, 1) for d in ((dim,) if isinstance(dim, int) else dim))
        assert dims and dims == list(range(dims[0], dims[-1] + 1)), "one dim or adjacent dims"
        lo, hi = dims[0], min(dims[-1] + 1, nd)
    shape = tuple(x.shape)
    outer, R, inner = (int(torch.Size(s).numel()) for s in (shape[:lo], shape[lo:hi], shape[hi:]))
    scale = (1.0 / R if R else float("nan")) if mean else 1.0
    out_shape = shape[:lo] + ((1,) * (hi - lo) if keepdim else ()) + shape[hi:]
    if inner == 1:  # trailing dims: each output is the sum of one contiguous row
        return _row_sums(x.reshape(outer, R), scale).reshape(out_shape)
    # a view whenever the reduced dims and the kept ones each merge (always for a contiguous x);
    # only other layouts are copied
    return _col_sums(x.reshape(outer, R, inner), scale).reshape(out_shape)
