"""Triton RMSNorm starter: LLaMA's RMSNorm as transformers computes it.

y = weight * (x * rsqrt(mean(x^2) + eps)).to(x.dtype): the mean of squares in fp32, the
normalised value rounded to x's dtype, then multiplied by the weight and rounded again, which is
bit for bit the order of LlamaRMSNorm. Rows up to MAX_FUSED_COLS are held in registers (one
read, one write); short rows are packed several to a program (tiles of at least TILE_ELEMS) and
the warp count follows the tile size. SCHEDULE (structural): "one_tile" launches a program per
tile; "persistent" launches PROGRAMS_PER_SM programs per SM that walk the tiles (fewer launches
of programs, the weight row reused from cache). Longer rows loop over LOOP_BLOCK chunks (a pass
for the sum of squares, one to write). Any row and column strides; the output is contiguous.
rms_norm_dim is the weightless form over any one dim (KernelBench's RMSNorm over channels).
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

KERNEL_TYPE = "rmsnorm"
BACKEND = "triton"

MAX_FUSED_COLS = 16384  # longest row kept in registers (single read)
ELEMS_PER_THREAD = 4  # fp32 register values per thread in the fused path; sets num_warps (H200 sweep: 4 > 8)
MAX_WARPS = 16
TILE_ELEMS = 16384  # minimum elements per program for short rows (rows are packed; H200 sweep: 16384 > 4096)
LOOP_BLOCK = 4096  # chunk of the long-row path
LOOP_WARPS = 8
# rms_norm_dim over a non-last dim: [R, COL_INNER] tiles, coalesced along the inner positions
COL_INNER = 128
COL_TILE = 8192  # elements a program holds at once; a longer R is read twice (sums, then writes)
COL_WARPS = 8
SCHEDULE = "one_tile"  # fused path: one program per tile, or "persistent" programs walking the tiles
PROGRAMS_PER_SM = 4

SEARCH_SPACE = {
    "SCHEDULE": ["one_tile", "persistent"],
    "PROGRAMS_PER_SM": [1, 2, 4, 8],
    "MAX_FUSED_COLS": [4096, 8192, 16384, 32768],
    "ELEMS_PER_THREAD": [4, 8, 16, 32],
    "MAX_WARPS": [4, 8, 16, 32],
    "TILE_ELEMS": [1024, 2048, 4096, 8192, 16384],
    "LOOP_BLOCK": [1024, 2048, 4096, 8192],
    "LOOP_WARPS": [4, 8, 16],
    "COL_INNER": [32, 64, 128, 256],
    "COL_TILE": [2048, 4096, 8192, 16384],
    "COL_WARPS": [4, 8, 16],
}

STRUCTURAL = ["SCHEDULE"]

DETERMINISTIC = True  # fixed reduction tree


def valid_config(cfg):
    return cfg["LOOP_BLOCK"] <= cfg["MAX_FUSED_COLS"]


def effective_config(cfg, dtype, shapes=None):
    # PROGRAMS_PER_SM matters only to the persistent schedule. Given the kernel's (a model's) shapes:
    # kernel_fn never calls rms_norm_dim (COL_*), and the looped path (LOOP_*) only takes rows longer
    # than MAX_FUSED_COLS. H100 run 6 spent five of rmsnorm's eight first moves on these at
    # 2048 x 4096: programs identical to the start's, timed within 0.4% of it.
    unused = [] if cfg.get("SCHEDULE") == "persistent" else ["PROGRAMS_PER_SM"]
    if shapes is not None:
        unused += ["COL_INNER", "COL_TILE", "COL_WARPS"]
        if all(s.get("cols", 0) <= cfg.get("MAX_FUSED_COLS", 0) for s in shapes):
            unused += ["LOOP_BLOCK", "LOOP_WARPS"]
        # rows no longer than the smallest MAX_FUSED_COLS the search may set take the fused path
        # whatever it is (H100 run 9: 14 of rmsnorm's 61 candidates moved only it and the tile
        # sizes, and ran the best's program)
        if all(s.get("cols", 0) <= min(SEARCH_SPACE["MAX_FUSED_COLS"]) for s in shapes):
            unused.append("MAX_FUSED_COLS")
    return {k: v for k, v in cfg.items() if k not in unused}


@functools.lru_cache(maxsize=None)
def _sm_count(device_index):
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def _programs(x, tiles):
    """Programs of the persistent schedule: PROGRAMS_PER_SM per SM (4 "SMs" in the interpreter)."""
    sms = _sm_count(x.device.index if x.device.index is not None else torch.cuda.current_device()) \
        if x.is_cuda else 4
    return max(1, min(tiles, sms * PROGRAMS_PER_SM))


@triton.jit
def _rmsnorm_tile(x_ptr, w_ptr, y_ptr, tile, rows, cols, eps, sxr, sxc, sw, syr,
                  ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    r = (tile * ROWS + tl.arange(0, ROWS)).to(tl.int64)
    c = tl.arange(0, BLOCK_N)
    cmask = c < cols
    mask = (r < rows)[:, None] & cmask[None, :]
    x = tl.load(x_ptr + r[:, None] * sxr + c[None, :] * sxc, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=1) / cols + eps)
    w = tl.load(w_ptr + c * sw, mask=cmask, other=0.0)
    h = (x * rstd[:, None]).to(y_ptr.dtype.element_ty).to(tl.float32)
    y = h * w.to(tl.float32)[None, :]
    tl.store(y_ptr + r[:, None] * syr + c[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rmsnorm_fused(x_ptr, w_ptr, y_ptr, rows, cols, eps, sxr, sxc, sw, syr, tiles,
                   ROWS: tl.constexpr, BLOCK_N: tl.constexpr, PERSISTENT: tl.constexpr):
    eps = tl.cast(eps, tl.float32)  # torch.compile passes a Python float as fp64
    if PERSISTENT:
        for tile in range(tl.program_id(0), tiles, tl.num_programs(0)):
            _rmsnorm_tile(x_ptr, w_ptr, y_ptr, tile, rows, cols, eps, sxr, sxc, sw, syr, ROWS, BLOCK_N)
    else:
        _rmsnorm_tile(x_ptr, w_ptr, y_ptr, tl.program_id(0), rows, cols, eps, sxr, sxc, sw, syr, ROWS, BLOCK_N)


@triton.jit
def _rmsnorm_looped(x_ptr, w_ptr, y_ptr, cols, eps, sxr, sxc, sw, syr, BLOCK: tl.constexpr):
    eps = tl.cast(eps, tl.float32)  # torch.compile passes a Python float as fp64
    row = tl.program_id(0).to(tl.int64)
    xr = x_ptr + row * sxr
    yr = y_ptr + row * syr
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, cols, BLOCK):
        c = start + tl.arange(0, BLOCK)
        x = tl.load(xr + c * sxc, mask=c < cols, other=0.0).to(tl.float32)
        acc += x * x
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / cols + eps)
    for start in range(0, cols, BLOCK):
        c = start + tl.arange(0, BLOCK)
        m = c < cols
        x = tl.load(xr + c * sxc, mask=m, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + c * sw, mask=m, other=0.0).to(tl.float32)
        h = (x * rstd).to(y_ptr.dtype.element_ty).to(tl.float32)
        tl.store(yr + c, (h * w).to(y_ptr.dtype.element_ty), mask=m)


@triton.jit
def _rmsnorm_cols(x_ptr, y_ptr, R, inner, inner_tiles, eps, div, R_BLOCK: tl.constexpr, I_BLOCK: tl.constexpr,
                  ONE_TILE: tl.constexpr):
    eps = tl.cast(eps, tl.float32)  # torch.compile passes a Python float as fp64
    div = tl.cast(div, tl.float32)  # torch.compile passes a Python float as fp64
    pid = tl.program_id(0)
    o = (pid // inner_tiles).to(tl.int64)
    i = (pid % inner_tiles) * I_BLOCK + tl.arange(0, I_BLOCK)
    imask = i < inner
    base = x_ptr + o * R * inner
    ybase = y_ptr + o * R * inner
    r = tl.arange(0, R_BLOCK)
    if ONE_TILE:
        m = (r < R)[:, None] & imask[None, :]
        offs = r[:, None].to(tl.int64) * inner + i[None, :]
        x = tl.load(base + offs, mask=m, other=0.0).to(tl.float32)
        d = tl.sqrt(tl.sum(x * x, axis=0) / div + eps)
        tl.store(ybase + offs, (x / d[None, :]).to(y_ptr.dtype.element_ty), mask=m)
    else:
        acc = tl.zeros([R_BLOCK, I_BLOCK], tl.float32)
        for start in range(0, R, R_BLOCK):
            rr = start + r
            m = (rr < R)[:, None] & imask[None, :]
            x = tl.load(base + rr[:, None].to(tl.int64) * inner + i[None, :], mask=m, other=0.0).to(tl.float32)
            acc += x * x
        d = tl.sqrt(tl.sum(acc, axis=0) / div + eps)
        for start in range(0, R, R_BLOCK):
            rr = start + r
            m = (rr < R)[:, None] & imask[None, :]
            offs = rr[:, None].to(tl.int64) * inner + i[None, :]
            x = tl.load(base + offs, mask=m, other=0.0).to(tl.float32)
            tl.store(ybase + offs, (x / d[None, :]).to(y_ptr.dtype.element_ty), mask=m)


def rms_norm_dim(x, dim, eps, mean=True):
    """x / sqrt(mean(x ** 2, dim, keepdim=True) + eps) over one dim of x, without a weight: RMS
    normalisation written out as KernelBench L1 36 does (over the channels of NCHW); with mean
    False, x / sqrt(sum(x ** 2) + eps), the L2 normalisation (x / torch.norm(x, dim=d)). fp32 math.
    The mean over the last dim takes the row kernels; the rest is normalised in place as
    [outer, R, inner] tiles (inner 1 for the last dim), no transposing copy."""
    dim %= max(x.dim(), 1)
    if dim == x.dim() - 1 and mean:
        n = x.shape[-1]
        return kernel_fn(x.reshape(-1, n), torch.ones(n, device=x.device, dtype=x.dtype), eps).reshape(x.shape)
    x = x.contiguous()
    y = torch.empty_like(x)
    if y.numel() == 0:
        return y
    outer, R, inner = x.shape[:dim].numel(), x.shape[dim], x.shape[dim + 1:].numel()
    i_block = min(COL_INNER, next_power_of_2(inner))
    one_tile = next_power_of_2(R) * i_block <= COL_TILE
    r_block = next_power_of_2(R) if one_tile else max(1, COL_TILE // i_block)
    tiles = cdiv(inner, i_block)
    launch(_rmsnorm_cols, (outer * tiles,), x, y, R, inner, tiles, float(eps), float(R if mean else 1), R_BLOCK=r_block,
                                    I_BLOCK=i_block, ONE_TILE=one_tile, num_warps=COL_WARPS)
    return y


_PLANS = {}  # (shapes, strides, dtypes, device, eps) -> the launch prepared for them
_Tensor = torch.Tensor


def kernel_fn(x, weight, eps):
    # The launch's grid, tile and strides are a function of the operands' shapes, strides, dtypes,
    # device and eps: worked out once per such key, so a repeated call (every layer of a model,
    # every decode step) allocates y and launches. Tensor subclasses (tracing) take the full path.
    if type(x) is _Tensor and type(weight) is _Tensor and type(eps) is float:
        key = (x.shape, x.stride(), weight.shape, weight.stride(), x.dtype, weight.dtype, x.get_device(), eps)
        plan = _PLANS.get(key)
        if plan is None:
            plan = _plan(x, weight, eps)
            if len(_PLANS) < 1024:
                _PLANS[key] = plan
        return plan(x, weight)
    return rmsnorm_full(x, weight, eps)


def _plan(x, weight, eps):
    """A function (x, weight) -> y for operands like these: the fused path's launch prepared, or
    rmsnorm_full where a call needs more (empty sizes, a copy, the looped path)."""
    rows, cols = x.shape
    if rows == 0 or cols == 0 or cols > MAX_FUSED_COLS or (cols > 1 and x.stride(1) != 1
                                                            and x.stride(1) * cols >= 2**31):
        return lambda x, weight: rmsnorm_full(x, weight, eps)
    block_n = max(next_power_of_2(cols), 16)
    rows_per = max(1, min(TILE_ELEMS // block_n, next_power_of_2(rows)))
    warps = max(1, min(MAX_WARPS, rows_per * block_n // (32 * ELEMS_PER_THREAD)))
    tiles = cdiv(rows, rows_per)
    persistent = SCHEDULE == "persistent"
    fused = Prepared(_rmsnorm_fused, (_programs(x, tiles) if persistent else tiles,),
                     (rows, cols, float(eps), x.stride(0), x.stride(1), weight.stride(0), cols, tiles),
                     ROWS=rows_per, BLOCK_N=block_n, PERSISTENT=persistent, num_warps=warps)
    device, dtype = x.device, x.dtype

    def run(x, weight):
        y = torch.empty((rows, cols), device=device, dtype=dtype)  # fresh: its row stride is cols
        fused(x, weight, y)
        return y
    return run


def rmsnorm_full(x, weight, eps):
    """kernel_fn's every path, worked out afresh at each call."""
    rows, cols = x.shape
    y = torch.empty((rows, cols), device=x.device, dtype=x.dtype)
    if rows == 0 or cols == 0:
        return y
    if cols > 1 and x.stride(1) != 1 and x.stride(1) * cols >= 2**31:
        x = x.contiguous()  # column offsets are 32-bit in the kernels
    args = (x.stride(0), x.stride(1), weight.stride(0), y.stride(0))
    if cols <= MAX_FUSED_COLS:
        block_n = max(next_power_of_2(cols), 16)
        rows_per = max(1, min(TILE_ELEMS // block_n, next_power_of_2(rows)))
        warps = max(1, min(MAX_WARPS, rows_per * block_n // (32 * ELEMS_PER_THREAD)))
        tiles = cdiv(rows, rows_per)
        persistent = SCHEDULE == "persistent"
        launch(_rmsnorm_fused, (_programs(x, tiles) if persistent else tiles,),
            x, weight, y, rows, cols, float(eps), *args, tiles, ROWS=rows_per, BLOCK_N=block_n,
            PERSISTENT=persistent, num_warps=warps)
    else:
        launch(_rmsnorm_looped, (rows,), x, weight, y, cols, float(eps), *args, BLOCK=LOOP_BLOCK, num_warps=LOOP_WARPS)
    return y
