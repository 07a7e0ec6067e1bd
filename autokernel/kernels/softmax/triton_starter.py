"""Triton softmax starter: softmax over the last dim, fp32 math, one rounding per output.

Rows up to MAX_FUSED_COLS long are held in registers: one read and one write per element, the
DRAM minimum. Short rows are packed several to a program (a tile of at least TILE_ELEMS
elements) so each program moves enough bytes to hide latency; the warp count follows the tile
size (about ELEMS_PER_THREAD fp32 values per thread); SCHEDULE (structural) launches a program per
tile ("one_tile") or PROGRAMS_PER_SM programs per SM that walk the tiles ("persistent"). Longer
rows take a two-pass path: an
element-wise online (max, sum of exp) over LOOP_BLOCK chunks, then a second read (mostly from
L2) that writes exp(x - max) / sum. Masked lanes load -inf, which contributes exp(-inf) = 0;
a running max of -inf is replaced by 0 before subtracting so that -inf - -inf never makes a NaN.
Any row and column strides; the output is contiguous. kernel_fn(x, log=True) is log_softmax,
written as x - max - log(sum) (a log of the rounded probability would lose the small ones).
"""

import functools

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

KERNEL_TYPE = "softmax"
BACKEND = "triton"

MAX_FUSED_COLS = 32768  # longest row kept in registers (single read)
ELEMS_PER_THREAD = 16  # fp32 register values per thread in the fused path; sets num_warps
MAX_WARPS = 32
TILE_ELEMS = 4096  # minimum elements per program for short rows (rows are packed)
LOOP_BLOCK = 4096  # chunk of the long-row path
LOOP_WARPS = 16
SCHEDULE = "one_tile"  # fused path: one program per tile, or "persistent" programs walking the tiles
PROGRAMS_PER_SM = 4

SEARCH_SPACE = {
    "SCHEDULE": ["one_tile", "persistent"],
    "PROGRAMS_PER_SM": [1, 2, 4, 8],
    "MAX_FUSED_COLS": [8192, 16384, 32768, 65536],
    "ELEMS_PER_THREAD": [4, 8, 16, 32, 64],
    "MAX_WARPS": [8, 16, 32],
    "TILE_ELEMS": [1024, 2048, 4096, 8192, 16384],
    "LOOP_BLOCK": [1024, 2048, 4096, 8192],
    "LOOP_WARPS": [4, 8, 16, 32],
}

STRUCTURAL = ["SCHEDULE"]

DETERMINISTIC = True  # fixed reduction tree


def valid_config(cfg):
    # A loop chunk must be no longer than a fused row, or the fused path is the cheaper one anyway.
    return cfg["LOOP_BLOCK"] <= cfg["MAX_FUSED_COLS"]


@functools.lru_cache(maxsize=None)
def _sm_count(device_index):
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def _programs(x, tiles):
    """Programs of the persistent schedule: PROGRAMS_PER_SM per SM (4 "SMs" in the interpreter)."""
    sms = _sm_count(x.device.index if x.device.index is not None else torch.cuda.current_device()) \
        if x.is_cuda else 4
    return max(1, min(tiles, sms * PROGRAMS_PER_SM))


@triton.jit
def _softmax_tile(x_ptr, y_ptr, tile, rows, cols, sxr, sxc, syr,
                  ROWS: tl.constexpr, BLOCK_N: tl.constexpr, LOG: tl.constexpr):
    r = (tile * ROWS + tl.arange(0, ROWS)).to(tl.int64)
    c = tl.arange(0, BLOCK_N)
    mask = (r < rows)[:, None] & (c < cols)[None, :]
    x = tl.load(x_ptr + r[:, None] * sxr + c[None, :] * sxc, mask=mask, other=-float("inf")).to(tl.float32)
    m = tl.max(x, axis=1)
    m = tl.where(m == -float("inf"), 0.0, m)
    e = tl.exp(x - m[:, None])
    s = tl.sum(e, axis=1)
    if LOG:  # log_softmax: x - max - log(sum), not a log of a rounded probability
        y = (x - m[:, None]) - tl.log(s)[:, None]
    else:
        y = e / s[:, None]
    tl.store(y_ptr + r[:, None] * syr + c[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_fused(x_ptr, y_ptr, rows, cols, sxr, sxc, syr, tiles,
                   ROWS: tl.constexpr, BLOCK_N: tl.constexpr, LOG: tl.constexpr = False,
                   PERSISTENT: tl.constexpr = False):
    if PERSISTENT:
        for tile in range(tl.program_id(0), tiles, tl.num_programs(0)):
            _softmax_tile(x_ptr, y_ptr, tile, rows, cols, sxr, sxc, syr, ROWS, BLOCK_N, LOG)
    else:
        _softmax_tile(x_ptr, y_ptr, tl.program_id(0), rows, cols, sxr, sxc, syr, ROWS, BLOCK_N, LOG)


@triton.jit
def _softmax_looped(x_ptr, y_ptr, cols, sxr, sxc, syr, BLOCK: tl.constexpr, LOG: tl.constexpr = False):
    row = tl.program_id(0).to(tl.int64)
    xr = x_ptr + row * sxr
    yr = y_ptr + row * syr
    m = tl.full([BLOCK], -float("inf"), tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    for start in range(0, cols, BLOCK):
        c = start + tl.arange(0, BLOCK)
        x = tl.load(xr + c * sxc, mask=c < cols, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        m_safe = tl.where(m_new == -float("inf"), 0.0, m_new)
        s = s * tl.exp(m - m_safe) + tl.exp(x - m_safe)
        m = m_new
    row_max = tl.max(m, axis=0)
    row_max = tl.where(row_max == -float("inf"), 0.0, row_max)
    total = tl.sum(s * tl.exp(m - row_max), axis=0)
    inv = 1.0 / total
    lse = row_max + tl.log(total)
    for start in range(0, cols, BLOCK):
        c = start + tl.arange(0, BLOCK)
        x = tl.load(xr + c * sxc, mask=c < cols, other=-float("inf")).to(tl.float32)
        if LOG:
            y = x - lse
        else:
            y = tl.exp(x - row_max) * inv
        tl.store(yr + c, y.to(y_ptr.dtype.element_ty), mask=c < cols)


_PLANS = {}  # (shape, strides, dtype, device, log) -> the launch prepared for them
_Tensor = torch.Tensor


def kernel_fn(x, log=False):
    # The fused path's grid, tile and strides are a function of x's shape, strides, dtype and device
    # (and log): worked out once per such key, so a repeated call allocates y and launches. Tensor
    # subclasses (tracing) take the full path.
    if type(x) is _Tensor and type(log) is bool:
        key = (x.shape, x.stride(), x.dtype, x.get_device(), log)
        plan = _PLANS.get(key)
        if plan is None:
            plan = _plan(x, log)
            if len(_PLANS) < 1024:
                _PLANS[key] = plan
        return plan(x)
    return softmax_full(x, log)


def _plan(x, log):
    """A function x -> y: the fused kernel's launch prepared for inputs like x, or softmax_full where
    a call needs more (empty sizes, a copy, the looped path)."""
    rows, cols = x.shape
    if rows == 0 or cols == 0 or cols > MAX_FUSED_COLS or (cols > 1 and x.stride(1) != 1
                                                            and x.stride(1) * cols >= 2**31):
        return lambda x: softmax_full(x, log)
    block_n = max(next_power_of_2(cols), 16)
    rows_per = max(1, min(TILE_ELEMS // block_n, next_power_of_2(rows)))
    warps = max(1, min(MAX_WARPS, rows_per * block_n // (32 * ELEMS_PER_THREAD)))
    tiles = cdiv(rows, rows_per)
    persistent = SCHEDULE == "persistent"
    fused = Prepared(_softmax_fused, (_programs(x, tiles) if persistent else tiles,),
                     (rows, cols, x.stride(0), x.stride(1), cols, tiles),  # (y is fresh: its row stride is cols)
                     ROWS=rows_per, BLOCK_N=block_n, LOG=log, PERSISTENT=persistent, num_warps=warps)
    device, dtype = x.device, x.dtype

    def run(x):
        y = torch.empty((rows, cols), device=device, dtype=dtype)
        fused(x, y)
        return y
    return run


def softmax_full(x, log=False):
    """kernel_fn's every path, worked out afresh at each call."""
    rows, cols = x.shape
    y = torch.empty((rows, cols), device=x.device, dtype=x.dtype)
    if rows == 0 or cols == 0:
        return y
    if cols > 1 and x.stride(1) != 1 and x.stride(1) * cols >= 2**31:
        x = x.contiguous()  # column offsets are 32-bit in the kernels
    if cols <= MAX_FUSED_COLS:
        block_n = max(next_power_of_2(cols), 16)
        rows_per = max(1, min(TILE_ELEMS // block_n, next_power_of_2(rows)))
        warps = max(1, min(MAX_WARPS, rows_per * block_n // (32 * ELEMS_PER_THREAD)))
        tiles = cdiv(rows, rows_per)
        persistent = SCHEDULE == "persistent"
        launch(_softmax_fused, (_programs(x, tiles) if persistent else tiles,),
            x, y, rows, cols, x.stride(0), x.stride(1), cols, tiles,  # (y is fresh: its row stride is cols)
            ROWS=rows_per, BLOCK_N=block_n, LOG=log, PERSISTENT=persistent, num_warps=warps)
    else:
        launch(_softmax_looped, (rows,), x, y, cols, x.stride(0), x.stride(1), cols,
                                 BLOCK=LOOP_BLOCK, LOG=log, num_warps=LOOP_WARPS)
    return y
