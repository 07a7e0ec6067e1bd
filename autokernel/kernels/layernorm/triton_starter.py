"""Triton layer-norm starter: F.layer_norm over the last dim with weight and bias.

Rows up to MAX_FUSED_COLS are held in registers: x is read once and y is written once. Short rows
are packed several to a program (tiles of at least TILE_ELEMS) so each program moves enough bytes;
the warp count follows the tile size. Longer rows loop over LOOP_BLOCK chunks, one program per row,
unless there are too few rows to fill the GPU (fewer than SPLIT_PROGRAMS, e.g. KernelBench's
16 rows of 4M elements): then each row is cut into segments, a first kernel finds every segment's
count, mean and sum of squared deviations, and a second merges a row's segments (Chan's formula)
and writes its own segment. fp32 statistics and math, one rounding per output. Any row and column
strides; the output is contiguous.

STATS picks how the mean and variance are found:
- "two_pass": the mean, then the variance of the centred values: two dependent reductions (in the
  long-row path two reading passes before the writing one).
- "shifted": one reduction of the pair (sum d, sum d^2) with d = x - x[row, 0], then
  var = E[d^2] - E[d]^2. Shifting by a value of the row keeps E[d] of the order of the row's spread,
  so the subtraction does not cancel the way E[x^2] - E[x]^2 does on rows with a large offset, and a
  constant row still gets a variance of exactly 0. Half the reduction latency in the fused path,
  one reading pass fewer in the long-row path.
"""

import torch
import triton
import triton.language as tl

try:  # the lean launch path (autokernel/kernels/launcher.py); standalone, the file launches the usual way
    from autokernel.kernels.launcher import Prepared, cdiv, launch, next_power_of_2
except ImportError:
    cdiv, next_power_of_2 = triton.cdiv, triton.next_power_of_2

    def launch(kernel, grid, *args, **meta):
        return kernel[grid](*args, **meta)

    class Prepared:  # launch(kernel, grid, *tensors, *rest, **meta) with all but the tensors fixed
        def __init__(self, kernel, grid, rest=(), **meta):
            self.kernel, self.grid, self.rest, self.meta = kernel, grid, tuple(rest), meta

        def __call__(self, *tensors):
            return self.kernel[self.grid](*tensors, *self.rest, **self.meta)

KERNEL_TYPE = "layernorm"
BACKEND = "triton"

MAX_FUSED_COLS = 16384  # longest row kept in registers (single read)
ELEMS_PER_THREAD = 16  # fp32 values per thread in the fused path; sets num_warps (H200 sweep: 16 > 8)
MAX_WARPS = 16
TILE_ELEMS = 8192  # minimum elements per program for short rows (rows are packed; H200 screen: 8192 > 4096 > 16384)
LOOP_BLOCK = 4096  # chunk of the long-row path
LOOP_WARPS = 8
SPLIT_PROGRAMS = 528  # long rows: split them when fewer rows than this; aim for this many programs
MAX_SEGMENTS = 1024
STATS = "two_pass"

SEARCH_SPACE = {
    "MAX_FUSED_COLS": [4096, 8192, 16384, 32768],
    "ELEMS_PER_THREAD": [4, 8, 16, 32],
    "MAX_WARPS": [4, 8, 16, 32],
    "TILE_ELEMS": [1024, 2048, 4096, 8192, 16384],
    "LOOP_BLOCK": [1024, 2048, 4096, 8192],
    "LOOP_WARPS": [4, 8, 16],
    "SPLIT_PROGRAMS": [0, 264, 528, 1056],
    "STATS": ["two_pass", "shifted"],
}

STRUCTURAL = ["STATS"]  # one reduction of (sum d, sum d^2), or two passes

DETERMINISTIC = True  # fixed reduction tree


def valid_config(cfg):
    return cfg["LOOP_BLOCK"] <= cfg["MAX_FUSED_COLS"]


@triton.jit
def _add_pair(a0, a1, b0, b1):
    return a0 + b0, a1 + b1


@triton.jit
def _layernorm_fused(x_ptr, w_ptr, b_ptr, y_ptr, rows, cols, eps, sxr, sxc, sw, sb, syr,
                     ROWS: tl.constexpr, BLOCK_N: tl.constexpr, SHIFTED: tl.constexpr, EVEN: tl.constexpr):
    eps = tl.cast(eps, tl.float32)  # torch.compile passes a Python float as fp64
    r = (tl.program_id(0) * ROWS + tl.arange(0, ROWS)).to(tl.int64)
    c = tl.arange(0, BLOCK_N)
    cmask = c < cols
    mask = (r < rows)[:, None] & cmask[None, :]
    xp = x_ptr + r[:, None] * sxr + c[None, :] * sxc
    if EVEN:  # the tile lies wholly inside: no masks or selects (H200, 4096 columns: 1.2 points of copy)
        x = tl.load(xp).to(tl.float32)
    else:
        x = tl.load(xp, mask=mask, other=0.0).to(tl.float32)
    if SHIFTED:
        shift = tl.load(x_ptr + r * sxr, mask=r < rows, other=0.0).to(tl.float32)
        e = x - shift[:, None]
        if not EVEN:
            e = tl.where(mask, e, 0.0)
        s1, s2 = tl.reduce((e, e * e), 1, _add_pair)
        mean_e = s1 / cols
        var = tl.maximum(s2 / cols - mean_e * mean_e, 0.0)
        d = e - mean_e[:, None]
    else:
        mean = tl.sum(x, axis=1) / cols
        d = x - mean[:, None]
    if not EVEN:
        d = tl.where(mask, d, 0.0)
    if not SHIFTED:
        var = tl.sum(d * d, axis=1) / cols
    rstd = 1.0 / tl.sqrt(var + eps)
    if EVEN:
        w = tl.load(w_ptr + c * sw).to(tl.float32)
        b = tl.load(b_ptr + c * sb).to(tl.float32)
    else:
        w = tl.load(w_ptr + c * sw, mask=cmask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + c * sb, mask=cmask, other=0.0).to(tl.float32)
    y = (d * rstd[:, None] * w[None, :] + b[None, :]).to(y_ptr.dtype.element_ty)
    if EVEN:
        tl.store(y_ptr + r[:, None] * syr + c[None, :], y)
    else:
        tl.store(y_ptr + r[:, None] * syr + c[None, :], y, mask=mask)


@triton.jit
def _shifted_sums(xr, n, sxc, shift, BLOCK: tl.constexpr):
    """(sum of d, sum of d^2) over the first n values of a row, d = x - shift."""
    acc = tl.zeros([BLOCK], tl.float32)
    acc2 = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n, BLOCK):
        c = start + tl.arange(0, BLOCK)
        x = tl.load(xr + c * sxc, mask=c < n, other=0.0).to(tl.float32)
        e = tl.where(c < n, x - shift, 0.0)
        acc += e
        acc2 += e * e
    return tl.sum(acc, axis=0), tl.sum(acc2, axis=0)


@triton.jit
def _layernorm_looped(x_ptr, w_ptr, b_ptr, y_ptr, cols, eps, sxr, sxc, sw, sb, syr, BLOCK: tl.constexpr,
                      SHIFTED: tl.constexpr):
    eps = tl.cast(eps, tl.float32)  # torch.compile passes a Python float as fp64
    row = tl.program_id(0).to(tl.int64)
    xr = x_ptr + row * sxr
    yr = y_ptr + row * syr
    acc = tl.zeros([BLOCK], tl.float32)
    if SHIFTED:
        shift = tl.load(xr).to(tl.float32)
        s1, s2 = _shifted_sums(xr, cols, sxc, shift, BLOCK)
        mean_e = s1 / cols
        mean = shift + mean_e
        var = tl.maximum(s2 / cols - mean_e * mean_e, 0.0)
    else:
        for start in range(0, cols, BLOCK):
            c = start + tl.arange(0, BLOCK)
            acc += tl.load(xr + c * sxc, mask=c < cols, other=0.0).to(tl.float32)
        mean = tl.sum(acc, axis=0) / cols
        acc = tl.zeros([BLOCK], tl.float32)
        for start in range(0, cols, BLOCK):
            c = start + tl.arange(0, BLOCK)
            x = tl.load(xr + c * sxc, mask=c < cols, other=0.0).to(tl.float32)
            d = tl.where(c < cols, x - mean, 0.0)
            acc += d * d
        var = tl.sum(acc, axis=0) / cols
    rstd = 1.0 / tl.sqrt(var + eps)
    for start in range(0, cols, BLOCK):
        c = start + tl.arange(0, BLOCK)
        m = c < cols
        x = tl.load(xr + c * sxc, mask=m, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + c * sw, mask=m, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + c * sb, mask=m, other=0.0).to(tl.float32)
        tl.store(yr + c, ((x - mean) * rstd * w + b).to(y_ptr.dtype.element_ty), mask=m)


@triton.jit
def _layernorm_segment_stats(x_ptr, stats_ptr, cols, seg_len, segs, sxr, sxc, BLOCK: tl.constexpr):
    """stats[row, seg] = (count, mean, sum of squared deviations from that mean) of one segment,
    summed around the segment's first value so that a large offset does not cancel."""
    row = tl.program_id(0).to(tl.int64)
    seg = tl.program_id(1)
    lo = seg.to(tl.int64) * seg_len
    n = tl.minimum(cols - lo, seg_len)
    xr = x_ptr + row * sxr + lo * sxc
    shift = tl.load(xr).to(tl.float32)
    s1, s2 = _shifted_sums(xr, n, sxc, shift, BLOCK)
    nf = n.to(tl.float32)
    m2 = tl.maximum(s2 - s1 * s1 / nf, 0.0)
    out = stats_ptr + (row * segs + seg) * 3
    tl.store(out, nf)
    tl.store(out + 1, shift + s1 / nf)
    tl.store(out + 2, m2)


@triton.jit
def _layernorm_segment_norm(x_ptr, w_ptr, b_ptr, y_ptr, stats_ptr, cols, seg_len, segs, eps, sxr, sxc, sw, sb, syr,
                            BLOCK: tl.constexpr, SEGS: tl.constexpr):
    eps = tl.cast(eps, tl.float32)  # torch.compile passes a Python float as fp64
    row = tl.program_id(0).to(tl.int64)
    seg = tl.program_id(1)
    i = tl.arange(0, SEGS)
    st = stats_ptr + (row * segs + i) * 3
    n_i = tl.load(st, mask=i < segs, other=0.0)
    mean_i = tl.load(st + 1, mask=i < segs, other=0.0)
    m2_i = tl.load(st + 2, mask=i < segs, other=0.0)
    mean = tl.sum(n_i * mean_i, axis=0) / cols
    dev = tl.where(i < segs, mean_i - mean, 0.0)
    var = (tl.sum(m2_i, axis=0) + tl.sum(n_i * dev * dev, axis=0)) / cols
    rstd = 1.0 / tl.sqrt(var + eps)
    lo = seg.to(tl.int64) * seg_len
    n = tl.minimum(cols - lo, seg_len)
    xr = x_ptr + row * sxr + lo * sxc
    yr = y_ptr + row * syr + lo
    for start in range(0, n, BLOCK):
        c = start + tl.arange(0, BLOCK)
        m = c < n
        x = tl.load(xr + c * sxc, mask=m, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + (lo + c) * sw, mask=m, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + (lo + c) * sb, mask=m, other=0.0).to(tl.float32)
        tl.store(yr + c, ((x - mean) * rstd * w + b).to(y_ptr.dtype.element_ty), mask=m)


def _split_rows(x, weight, bias, y, eps, args):
    rows, cols = x.shape
    segs = min(MAX_SEGMENTS, cdiv(SPLIT_PROGRAMS, rows), cdiv(cols, LOOP_BLOCK))
    seg_len = cdiv(cdiv(cols, segs), LOOP_BLOCK) * LOOP_BLOCK
    segs = cdiv(cols, seg_len)
    stats = torch.empty((rows, segs, 3), device=x.device, dtype=torch.float32)
    launch(_layernorm_segment_stats, (rows, segs), x, stats, cols, seg_len, segs, args[0], args[1], BLOCK=LOOP_BLOCK,
                                           num_warps=LOOP_WARPS)
    launch(_layernorm_segment_norm, (rows, segs), x, weight, bias, y, stats, cols, seg_len, segs, float(eps), *args,
                                          BLOCK=LOOP_BLOCK, SEGS=max(next_power_of_2(segs), 2),
                                          num_warps=LOOP_WARPS)
    return y


_PLANS = {}  # (shapes, strides, dtypes, device, eps) -> the launch prepared for them
_Tensor = torch.Tensor


def kernel_fn(x, weight, bias, eps):
    # The fused path's grid, tile and strides are a function of the operands' shapes, strides,
    # dtypes, device and eps: worked out once per such key, so a repeated call (every layer)
    # allocates y and launches. Tensor subclasses (tracing) take the full path.
    if type(x) is _Tensor and type(weight) is _Tensor and type(bias) is _Tensor and type(eps) is float:
        key = (x.shape, x.stride(), weight.shape, weight.stride(), bias.shape, bias.stride(), x.dtype, weight.dtype,
               bias.dtype, x.get_device(), eps)
        plan = _PLANS.get(key)
        if plan is None:
            plan = _plan(x, weight, bias, eps)
            if len(_PLANS) < 1024:
                _PLANS[key] = plan
        return plan(x, weight, bias)
    return layernorm_full(x, weight, bias, eps)


def _plan(x, weight, bias, eps):
    """A function (x, weight, bias) -> y: the fused kernel's launch prepared for operands like these,
    or layernorm_full where a call needs more (empty sizes, a copy, the split and looped paths)."""
    rows, cols = x.shape
    if rows == 0 or cols == 0 or cols > MAX_FUSED_COLS or (cols > 1 and x.stride(1) != 1
                                                            and x.stride(1) * cols >= 2**31):
        return lambda x, weight, bias: layernorm_full(x, weight, bias, eps)
    block_n = max(next_power_of_2(cols), 16)
    rows_per = max(1, min(TILE_ELEMS // block_n, next_power_of_2(rows)))
    warps = max(1, min(MAX_WARPS, rows_per * block_n // (32 * ELEMS_PER_THREAD)))
    fused = Prepared(_layernorm_fused, (cdiv(rows, rows_per),),
                     (rows, cols, float(eps), x.stride(0), x.stride(1), weight.stride(0), bias.stride(0), cols),
                     ROWS=rows_per, BLOCK_N=block_n, SHIFTED=STATS == "shifted",
                     EVEN=block_n == cols and rows % rows_per == 0, num_warps=warps)
    device, dtype = x.device, x.dtype

    def run(x, weight, bias):
        y = torch.empty((rows, cols), device=device, dtype=dtype)  # fresh: its row stride is cols
        fused(x, weight, bias, y)
        return y
    return run


def layernorm_full(x, weight, bias, eps):
    """kernel_fn's every path, worked out afresh at each call."""
    rows, cols = x.shape
    y = torch.empty((rows, cols), device=x.device, dtype=x.dtype)
    if rows == 0 or cols == 0:
        return y
    if cols > 1 and x.stride(1) != 1 and x.stride(1) * cols >= 2**31:
        x = x.contiguous()  # column offsets are 32-bit in the kernels
    args = (x.stride(0), x.stride(1), weight.stride(0), bias.stride(0), cols)  # (y is fresh: row stride cols)
    if cols <= MAX_FUSED_COLS:
        block_n = max(next_power_of_2(cols), 16)
        rows_per = max(1, min(TILE_ELEMS // block_n, next_power_of_2(rows)))
        warps = max(1, min(MAX_WARPS, rows_per * block_n // (32 * ELEMS_PER_THREAD)))
        launch(_layernorm_fused, (cdiv(rows, rows_per),),
            x, weight, bias, y, rows, cols, float(eps), *args, ROWS=rows_per, BLOCK_N=block_n, SHIFTED=STATS == "shifted",
            EVEN=block_n == cols and rows % rows_per == 0,
            num_warps=warps)
    elif rows < SPLIT_PROGRAMS and cols >= 2 * LOOP_BLOCK:
        _split_rows(x, weight, bias, y, eps, args)
    else:
        launch(_layernorm_looped, (rows,), x, weight, bias, y, cols, float(eps), *args,
                                   BLOCK=LOOP_BLOCK, SHIFTED=STATS == "shifted", num_warps=LOOP_WARPS)
    return y
