"""Triton reduce starter: out[r] = sum(x[r, :]), fp32 accumulation, result in x's dtype.

One kernel covers every row length. A program owns a [ROWS, BLOCK] tile: short rows are packed
several to a program (a 4096-wide bf16 row alone is only 8 KB of traffic, too little to hide a
launch's latency), long rows are walked in BLOCK-wide chunks into a per-lane fp32 accumulator
that is reduced across lanes once at the end. When there are too few rows to fill the GPU
(fewer than MIN_PROGRAMS programs), each row is cut into segments of whole chunks: programs
write fp32 partial sums, and the same kernel then sums each row's partials in segment order and
rounds once. The split depends only on the shape, so results are bitwise reproducible.
"""

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "reduce"
BACKEND = "triton"

BLOCK_C = 2048  # columns per chunk (the longest a row tile gets; H200 sweep: 2048 > 4096)
TILE = 2048  # elements per [rows, cols] tile: short rows are packed up to this (H200 sweep)
NUM_WARPS = 8
NUM_STAGES = 3  # software pipelining of the chunk loads of long rows
MIN_PROGRAMS = 1024  # below this many row-programs, long rows are split into segments

SEARCH_SPACE = {
    "BLOCK_C": [512, 1024, 2048, 4096, 8192],
    "TILE": [2048, 4096, 8192, 16384],
    "NUM_WARPS": [2, 4, 8, 16],
    "NUM_STAGES": [1, 2, 3, 4],
    "MIN_PROGRAMS": [264, 528, 1024, 2048],
}

DETERMINISTIC = True  # fixed split for a shape, partials summed in a fixed order


def valid_config(cfg):
    # The fp32 accumulator tile in registers: at most 64 values per thread.
    return cfg["TILE"] >= cfg["BLOCK_C"] and cfg["TILE"] // (32 * cfg["NUM_WARPS"]) <= 64


@triton.jit
def _row_sum_kernel(x_ptr, out_ptr, R, C, stride_r, stride_c, seg_len, out_stride_r,
                    ROWS: tl.constexpr, BLOCK: tl.constexpr):
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
    total = tl.sum(acc, axis=1)
    tl.store(out_ptr + rows.to(tl.int64) * out_stride_r + seg, total.to(out_ptr.dtype.element_ty), mask=row_ok)


def _launch(x, out, out_stride_r, n_seg, seg_len):
    R, C = x.shape
    block = min(BLOCK_C, triton.next_power_of_2(min(seg_len, C)))
    rows = max(1, min(TILE // block, triton.next_power_of_2(R)))
    warps = max(1, min(NUM_WARPS, rows * block // 32))
    grid = (triton.cdiv(R, rows), n_seg)
    _row_sum_kernel[grid](x, out, R, C, x.stride(0), x.stride(1), seg_len, out_stride_r,
                          ROWS=rows, BLOCK=block, num_warps=warps, num_stages=NUM_STAGES)


def kernel_fn(x):
    assert x.dim() == 2, "x[rows, cols]"
    R, C = x.shape
    out = torch.empty((R,), device=x.device, dtype=x.dtype)
    if R == 0:
        return out
    if C == 0:
        return out.zero_()
    chunks = triton.cdiv(C, BLOCK_C)
    # Rows of one chunk or less are packed; longer rows get one program each, or several when
    # there are too few rows to occupy the GPU.
    n_seg = 1
    if chunks > 1 and R < MIN_PROGRAMS:
        n_seg = min(chunks, triton.cdiv(MIN_PROGRAMS, R))
    if n_seg == 1:
        _launch(x, out, 1, 1, C)
        return out
    seg_len = triton.cdiv(chunks, n_seg) * BLOCK_C
    n_seg = triton.cdiv(C, seg_len)
    partial = torch.empty((R, n_seg), device=x.device, dtype=torch.float32)
    _launch(x, partial, n_seg, n_seg, seg_len)
    _launch(partial, out, 1, 1, n_seg)
    return out
