"""Triton SwiGLU MLP starter: out = (silu(x @ Wg^T) * (x @ Wu^T)) @ Wd^T, two launches.

1. gate/up: each program computes the same [BM, BN] tile of x @ Wg^T and x @ Wu^T from one
   shared x tile per K step (x is read once for both), applies silu(g) * u in fp32 in the
   epilogue and writes h once, in the input dtype (as LlamaMLP's h is).
2. down: a grouped-ordering tiled matmul h @ Wd^T.
Both use grouped program ordering for L2 reuse, any strides, masked edges, fp32 accumulation.
fp32 inputs use their own tunables with true fp32 products (ieee) or 3xTF32.

GU_VARIANT / DOWN_VARIANT "persistent" (16-bit inputs; the Hopper schedule of the matmul starter's
persistent variant): one program per SM walks the output tiles in the grouped order, loading x,
the weights and h through TMA tensor descriptors made on the device and storing through one,
EPILOGUE_SUBTILE column pieces at a time; PERSISTENT_LOOP "flatten" fuses the tile and K loops into
one pipelined loop (the next tile's loads overlap this tile's epilogue), "plain" pipelines the K
loop per tile. Operands TMA cannot describe (weights that are not K-contiguous, rows not 16-byte
aligned) take the pointer kernels.

GU_ORDER, how the persistent gate/up kernel computes a tile of h (measured on an H100 at
2048x4096x11008: "together" at 128x128 did both products in 0.68 ms, 543 TFLOP/s, where cuBLAS does
each in 0.247 ms, 749 TFLOP/s):
- "together": one K loop, two dots per step from one x tile, two accumulators; h written once.
- "sequential": the gate's whole K loop, then the up's, one dot per step each (the plain matmul's
  pipeline), the gate's accumulator held meanwhile; x is read twice (the second time mostly from
  L2); h written once.
- "split": two launches of the plain persistent GEMM, so the gate/up tiles can be the full
  one-accumulator size (128x256): the first writes g = x @ Wg^T into h's buffer, the second
  computes u and, in its epilogue, loads its own g tile back and writes h = silu(g) * u over it.
  g goes to memory and back once (2 x T x F elements), rounded to the input dtype as eager does.

TAIL_NARROW (persistent kernels): the tiles that do not fill a last wave of programs (at N = 11008,
688 tiles of 128x256 on 132 SMs leave 28 for a sixth wave that takes as long as a full one) are
walked by a second launch as TAIL_NARROW column pieces each, so that more programs share the last
wave; only where the pieces fit in one wave. 1: off.
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

KERNEL_TYPE = "fused_mlp"
BACKEND = "triton"

# gate/up kernel (16-bit): two fp32 accumulators, so the tile is half the plain matmul's.
GU_BLOCK_M = 128
GU_BLOCK_N = 128
GU_BLOCK_K = 64
GU_NUM_WARPS = 8
GU_NUM_STAGES = 4
# down kernel (16-bit)
DOWN_BLOCK_M = 128
DOWN_BLOCK_N = 256
DOWN_BLOCK_K = 64
DOWN_NUM_WARPS = 8
DOWN_NUM_STAGES = 3
GROUP_M = 16
# the persistent variants (16-bit inputs; see the module docstring). The llama-7b loop's best on an
# H200 (run 3, 302 experiments): the K loop pipelined per tile ("plain"), a one-piece epilogue,
# 3 down stages, GROUP_M 16: 24.5-25.0 ms against 29.7 ms for 32 calls at 2048x4096x11008 bf16,
# 1.09x eager and torch.compile (the loop's timing). Before it, both persistent, s4/s4, two pieces: 0.943 ms against the pointer
# kernels' 1.018 on an H100 (do_bench; benchmarks/RESULTS.md)
GU_VARIANT = "persistent"
DOWN_VARIANT = "persistent"
EPILOGUE_SUBTILE = 1
PERSISTENT_LOOP = "plain"
GU_ORDER = "together"
TAIL_NARROW = 1
# fp32 inputs, both kernels
FP32_BLOCK_M = 64
FP32_BLOCK_N = 64
FP32_BLOCK_K = 32
FP32_NUM_WARPS = 4
FP32_NUM_STAGES = 3
FP32_PRECISION = "ieee"

SEARCH_SPACE = {
    "GU_BLOCK_M": [64, 128, 256],
    "GU_BLOCK_N": [64, 128, 256],
    "GU_BLOCK_K": [32, 64, 128],
    "GU_NUM_WARPS": [4, 8],
    "GU_NUM_STAGES": [2, 3, 4, 5],
    "DOWN_BLOCK_M": [64, 128, 256],
    "DOWN_BLOCK_N": [64, 128, 256],
    "DOWN_BLOCK_K": [32, 64, 128],
    "DOWN_NUM_WARPS": [4, 8],
    "DOWN_NUM_STAGES": [2, 3, 4, 5],
    "GROUP_M": [1, 4, 8, 16],
    "GU_VARIANT": ["pointer", "persistent"],
    "DOWN_VARIANT": ["pointer", "persistent"],
    "EPILOGUE_SUBTILE": [1, 2],
    "PERSISTENT_LOOP": ["plain", "flatten"],
    "GU_ORDER": ["together", "sequential", "split"],
    "TAIL_NARROW": [1, 2, 4],
    "FP32_BLOCK_M": [32, 64, 128],
    "FP32_BLOCK_N": [32, 64, 128],
    "FP32_BLOCK_K": [16, 32],
    "FP32_NUM_WARPS": [4, 8],
    "FP32_NUM_STAGES": [2, 3],
    "FP32_PRECISION": ["ieee", "tf32x3"],
}

# the gate/up order first: the gate/up kernel is the MLP's deficit (the module docstring), and a kernel
# close behind the library is explored for only a few experiments, structural and numeric moves alternating
STRUCTURAL = ["GU_ORDER", "GU_VARIANT", "DOWN_VARIANT", "PERSISTENT_LOOP", "FP32_PRECISION"]

DETERMINISTIC = True  # no atomics, no split-K: every output element reduced in a fixed order

SMEM_LIMIT = 227 * 1024  # H100/H200 opt-in shared memory per block


def valid_config(cfg):
    gu = (cfg["GU_BLOCK_M"] + 2 * cfg["GU_BLOCK_N"]) * cfg["GU_BLOCK_K"] * 2 * cfg["GU_NUM_STAGES"]
    down = (cfg["DOWN_BLOCK_M"] + cfg["DOWN_BLOCK_N"]) * cfg["DOWN_BLOCK_K"] * 2 * cfg["DOWN_NUM_STAGES"]
    # the persistent variants stage their output tile in shared memory for the TMA store,
    # EPILOGUE_SUBTILE pieces at a time
    sub = cfg.get("EPILOGUE_SUBTILE", 1)
    if cfg.get("GU_VARIANT") == "persistent":
        gu += cfg["GU_BLOCK_M"] * cfg["GU_BLOCK_N"] // sub * 2
    if cfg.get("DOWN_VARIANT") == "persistent":
        down += cfg["DOWN_BLOCK_M"] * cfg["DOWN_BLOCK_N"] // sub * 2
    f32 = ((cfg["FP32_BLOCK_M"] + 2 * cfg["FP32_BLOCK_N"]) * cfg["FP32_BLOCK_K"] * 4
           * cfg["FP32_NUM_STAGES"])
    # fp32 accumulator registers per thread: two tiles for gate/up, one for down.
    # ("split" runs the plain GEMM twice: one accumulator, one weight tile per stage)
    split = cfg.get("GU_VARIANT") == "persistent" and cfg.get("GU_ORDER") == "split"
    if split:
        # (its epilogue holds a g piece besides the store's: two [BM, BN / sub] tiles)
        gu = ((cfg["GU_BLOCK_M"] + cfg["GU_BLOCK_N"]) * cfg["GU_BLOCK_K"] * 2 * cfg["GU_NUM_STAGES"]
              + 2 * cfg["GU_BLOCK_M"] * cfg["GU_BLOCK_N"] // sub * 2)
    gu_regs = (1 if split else 2) * cfg["GU_BLOCK_M"] * cfg["GU_BLOCK_N"] // (32 * cfg["GU_NUM_WARPS"])
    down_regs = cfg["DOWN_BLOCK_M"] * cfg["DOWN_BLOCK_N"] // (32 * cfg["DOWN_NUM_WARPS"])
    # a tail piece's store is at least 16 columns wide (TMA boxes of 32 bytes and up)
    narrow = cfg.get("TAIL_NARROW", 1)
    pieces = min(cfg["GU_BLOCK_N"], cfg["DOWN_BLOCK_N"]) // (narrow * sub) >= 16
    return max(gu, down, f32) <= SMEM_LIMIT and gu_regs <= 256 and down_regs <= 256 and pieces


def effective_config(cfg, dtype):
    # fp32 inputs run the pointer kernels on the FP32_* tiles, 16-bit inputs the GU_* and DOWN_*
    # tiles; the persistent switches matter only where a 16-bit variant is "persistent", GU_ORDER
    # only where the gate/up one is: the search does not spend trials on tunables the kernel never reads
    if dtype == "float32":
        unused = [k for k in cfg if k.startswith(("GU_", "DOWN_"))] + ["EPILOGUE_SUBTILE", "PERSISTENT_LOOP",
                                                                        "TAIL_NARROW"]
    else:
        unused = [k for k in cfg if k.startswith("FP32_")]
        if cfg.get("GU_VARIANT") != "persistent":
            unused.append("GU_ORDER")
            if cfg.get("DOWN_VARIANT") != "persistent":
                unused += ["EPILOGUE_SUBTILE", "PERSISTENT_LOOP", "TAIL_NARROW"]
    return {k: v for k, v in cfg.items() if k not in unused}


@triton.jit
def _tile_ids(pid, M, N, BM: tl.constexpr, BN: tl.constexpr, GROUP: tl.constexpr):
    # Grouped ordering: GROUP row-tiles sweep one column of tiles together, so the weight tiles
    # they share are read from DRAM once per group.
    num_m = tl.cdiv(M, BM)
    num_n = tl.cdiv(N, BN)
    per_group = GROUP * num_n
    first_m = (pid // per_group) * GROUP
    group_rows = min(num_m - first_m, GROUP)
    pid_m = first_m + ((pid % per_group) % group_rows)
    pid_n = (pid % per_group) // group_rows
    return pid_m, pid_n


@triton.jit
def _gate_up_kernel(x_ptr, wg_ptr, wu_ptr, h_ptr, M, N, K,
                    stride_xm, stride_xk, stride_wgn, stride_wgk, stride_wun, stride_wuk,
                    stride_hm, stride_hn,
                    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr,
                    EVEN_K: tl.constexpr, PRECISION: tl.constexpr):
    pid_m, pid_n = _tile_ids(tl.program_id(0), M, N, BM, BN, GROUP)
    # Edge rows/cols wrap (% M, % N) so loads need no M/N mask; the store mask drops duplicates.
    rm = (pid_m * BM + tl.arange(0, BM)) % M
    rn = (pid_n * BN + tl.arange(0, BN)) % N
    rk = tl.arange(0, BK)
    x_ptrs = x_ptr + rm.to(tl.int64)[:, None] * stride_xm + rk[None, :] * stride_xk
    # W is [N, K]; read it as the [K, N] tile of W^T.
    wg_ptrs = wg_ptr + rk[:, None] * stride_wgk + rn.to(tl.int64)[None, :] * stride_wgn
    wu_ptrs = wu_ptr + rk[:, None] * stride_wuk + rn.to(tl.int64)[None, :] * stride_wun

    acc_g = tl.zeros((BM, BN), dtype=tl.float32)
    acc_u = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        if EVEN_K:
            x = tl.load(x_ptrs)
            wg = tl.load(wg_ptrs)
            wu = tl.load(wu_ptrs)
        else:
            k_left = K - k * BK
            x = tl.load(x_ptrs, mask=rk[None, :] < k_left, other=0.0)
            wg = tl.load(wg_ptrs, mask=rk[:, None] < k_left, other=0.0)
            wu = tl.load(wu_ptrs, mask=rk[:, None] < k_left, other=0.0)
        acc_g = tl.dot(x, wg, acc_g, input_precision=PRECISION)
        acc_u = tl.dot(x, wu, acc_u, input_precision=PRECISION)
        x_ptrs += BK * stride_xk
        wg_ptrs += BK * stride_wgk
        wu_ptrs += BK * stride_wuk

    # silu in fp32: sigmoid saturates cleanly (exp overflow gives 0, not NaN) for |g| in the hundreds.
    h = acc_g * tl.sigmoid(acc_g) * acc_u
    hm = pid_m * BM + tl.arange(0, BM)
    hn = pid_n * BN + tl.arange(0, BN)
    h_ptrs = h_ptr + hm.to(tl.int64)[:, None] * stride_hm + hn[None, :] * stride_hn
    tl.store(h_ptrs, h.to(h_ptr.dtype.element_ty), mask=(hm[:, None] < M) & (hn[None, :] < N))


@triton.jit
def _down_kernel(a_ptr, w_ptr, c_ptr, M, N, K,
                 stride_am, stride_ak, stride_wn, stride_wk, stride_cm, stride_cn,
                 BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr,
                 EVEN_K: tl.constexpr, PRECISION: tl.constexpr):
    pid_m, pid_n = _tile_ids(tl.program_id(0), M, N, BM, BN, GROUP)
    rm = (pid_m * BM + tl.arange(0, BM)) % M
    rn = (pid_n * BN + tl.arange(0, BN)) % N
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + rm.to(tl.int64)[:, None] * stride_am + rk[None, :] * stride_ak
    w_ptrs = w_ptr + rk[:, None] * stride_wk + rn.to(tl.int64)[None, :] * stride_wn

    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        if EVEN_K:
            a = tl.load(a_ptrs)
            w = tl.load(w_ptrs)
        else:
            k_left = K - k * BK
            a = tl.load(a_ptrs, mask=rk[None, :] < k_left, other=0.0)
            w = tl.load(w_ptrs, mask=rk[:, None] < k_left, other=0.0)
        acc = tl.dot(a, w, acc, input_precision=PRECISION)
        a_ptrs += BK * stride_ak
        w_ptrs += BK * stride_wk

    cm = pid_m * BM + tl.arange(0, BM)
    cn = pid_n * BN + tl.arange(0, BN)
    c_ptrs = c_ptr + cm.to(tl.int64)[:, None] * stride_cm + cn[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(cm[:, None] < M) & (cn[None, :] < N))


@triton.jit
def _put(desc, off_m, off_n, piece, GATE_IN: tl.constexpr):
    # one column piece of the tile: stored, or with GATE_IN ("split"'s epilogue) the piece of g the
    # first launch stored read back (rounded to the input dtype, as eager's) and silu(g) * piece
    # written over it, in fp32
    if GATE_IN:
        g = desc.load([off_m, off_n]).to(tl.float32)
        piece = g * tl.sigmoid(g) * piece
    desc.store([off_m, off_n], piece.to(desc.dtype))


@triton.jit
def _store_tile(desc, off_m, off_n, tile, BM: tl.constexpr, BN: tl.constexpr, SUBTILE: tl.constexpr,
                GATE_IN: tl.constexpr):
    # the TMA store of a [BM, BN] tile, in SUBTILE (1 or 2) column pieces; clipped at the edges (a
    # GATE_IN piece's g buffer is then the store's size, not the whole tile's)
    if SUBTILE == 1:
        _put(desc, off_m, off_n, tile, GATE_IN)
    else:
        left, right = tl.split(tl.permute(tl.reshape(tile, (BM, 2, BN // 2)), (0, 2, 1)))
        _put(desc, off_m, off_n, left, GATE_IN)
        _put(desc, off_m, off_n + BN // 2, right, GATE_IN)


@triton.jit
def _tile_offsets(t, M, N, BM: tl.constexpr, BN: tl.constexpr, GROUP: tl.constexpr, FIRST, NARROW: tl.constexpr):
    # tile t of a launch: piece t % NARROW (BN wide) of the (FIRST + t // NARROW)-th tile BN * NARROW
    # wide in the grouped order (NARROW 1: the launch's own tiles)
    pid_m, pid_n = _tile_ids(FIRST + t // NARROW, M, N, BM, BN * NARROW, GROUP)
    return pid_m * BM, pid_n * (BN * NARROW) + (t % NARROW) * BN


@triton.jit
def _persistent_kernel(a_ptr, w_ptr, w2_ptr, c_ptr, M, N, K, stride_am, stride_w, stride_w2, stride_cm, FIRST, COUNT,
                       BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr,
                       PROGRAMS: tl.constexpr, SUBTILE: tl.constexpr, FLATTEN: tl.constexpr, GATED: tl.constexpr,
                       SEQUENTIAL: tl.constexpr = False, GATE_IN: tl.constexpr = False, NARROW: tl.constexpr = 1):
    """c = a @ W^T for a K-contiguous W [N, K] (the down projection, or the first half of "split"),
    with GATED c = silu(a @ W^T) * (a @ W2^T) (gate/up: both products in one K loop, or with
    SEQUENTIAL one K loop after the other), with GATE_IN c = silu(c) * (a @ W^T) (the second half of
    "split": c holds g on entry, each program reads its own tile before writing it); PROGRAMS
    programs walk COUNT [BM, BN] tiles of c: from the FIRST in the grouped order, or with NARROW > 1
    the pieces of the tiles NARROW times as wide from the FIRST of those (a tail, see TAIL_NARROW)."""
    start = tl.program_id(0)
    k_tiles = tl.cdiv(K, BK)
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1], block_shape=[BM, BK])
    w_desc = tl.make_tensor_descriptor(w_ptr, shape=[N, K], strides=[stride_w, 1], block_shape=[BN, BK])
    if GATED:
        w2_desc = tl.make_tensor_descriptor(w2_ptr, shape=[N, K], strides=[stride_w2, 1], block_shape=[BN, BK])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[stride_cm, 1], block_shape=[BM, BN // SUBTILE])
    # the epilogue's tile comes from its own counter (see the matmul starter's persistent kernel)
    tile_c = start - PROGRAMS
    for tile in tl.range(start, COUNT, PROGRAMS, flatten=FLATTEN):
        off_m, off_n = _tile_offsets(tile, M, N, BM, BN, GROUP, FIRST, NARROW)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        if GATED:
            acc_u = tl.zeros((BM, BN), dtype=tl.float32)
        if GATED and SEQUENTIAL:
            for ki in range(k_tiles):
                acc = tl.dot(a_desc.load([off_m, ki * BK]), w_desc.load([off_n, ki * BK]).T, acc)
            for ki in range(k_tiles):
                acc_u = tl.dot(a_desc.load([off_m, ki * BK]), w2_desc.load([off_n, ki * BK]).T, acc_u)
        else:
            for ki in range(k_tiles):
                a = a_desc.load([off_m, ki * BK])
                acc = tl.dot(a, w_desc.load([off_n, ki * BK]).T, acc)
                if GATED:
                    acc_u = tl.dot(a, w2_desc.load([off_n, ki * BK]).T, acc_u)
        tile_c += PROGRAMS
        off_m, off_n = _tile_offsets(tile_c, M, N, BM, BN, GROUP, FIRST, NARROW)
        if GATED:  # silu in fp32, as the pointer kernel; h is written once
            acc = acc * tl.sigmoid(acc) * acc_u
        _store_tile(c_desc, off_m, off_n, acc, BM, BN, SUBTILE, GATE_IN)


def _base_aligned(t):
    """t's first element is 16-byte aligned. A fake or functional tensor (torch.compile or a triton_op
    being traced) has no memory to ask, and asking warns; Inductor's buffers start 16-byte aligned and it
    copies graph inputs that do not, so there its storage offset decides."""
    if type(t) is torch.Tensor or type(t) is torch.nn.Parameter:
        return t.data_ptr() % 16 == 0
    return (t.storage_offset() * t.element_size()) % 16 == 0


def _tma_rows(t):
    """TMA can describe t as [rows, cols]: unit column stride, 16-byte aligned base and row stride."""
    return (t.stride(1) == 1 and _base_aligned(t) and (t.stride(0) * t.element_size()) % 16 == 0
            and t.shape[0] > 0)


def _tma_scratch(size, alignment, stream):
    # Device-side tensor descriptors live in a global scratch buffer Triton asks the allocator for.
    return torch.empty(size, dtype=torch.int8, device="cuda")


@functools.lru_cache(maxsize=None)
def _sm_count(device_index):
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def _programs(t):
    """The persistent kernels' program count: the device's SMs (3 under the interpreter, so that
    programs walk several tiles in the CPU tests)."""
    if not t.is_cuda:
        return 3
    return _sm_count(t.device.index if t.device.index is not None else torch.cuda.current_device())


def _configs(dtype):
    if dtype == torch.float32:
        f32 = (FP32_BLOCK_M, FP32_BLOCK_N, FP32_BLOCK_K, FP32_NUM_WARPS, FP32_NUM_STAGES)
        return f32, f32, FP32_PRECISION
    gu = (GU_BLOCK_M, GU_BLOCK_N, GU_BLOCK_K, GU_NUM_WARPS, GU_NUM_STAGES)
    down = (DOWN_BLOCK_M, DOWN_BLOCK_N, DOWN_BLOCK_K, DOWN_NUM_WARPS, DOWN_NUM_STAGES)
    return gu, down, None  # None: Triton's default, exact products for 16-bit inputs


_PLANS = {}  # (shapes, strides, dtypes, device) -> the call prepared for them (see _plan)
_Tensor = torch.Tensor


def kernel_fn(x, w_gate, w_up, w_down):
    # As the matmul starter: the host work of a call is a function of the operands' shapes, strides,
    # dtype and device (the tunables are constants of this file), done once per such key; a repeated
    # call only checks the base addresses TMA needs, allocates h and the output and launches. Tensor
    # subclasses (torch.compile tracing) always take the full path.
    if type(x) is _Tensor and type(w_gate) is _Tensor and type(w_up) is _Tensor and type(w_down) is _Tensor:
        key = (x.shape, w_gate.shape, w_up.shape, w_down.shape, x.stride(), w_gate.stride(), w_up.stride(),
               w_down.stride(), x.dtype, w_gate.dtype, w_up.dtype, w_down.dtype, x.get_device())
        plan = _PLANS.get(key)
        if plan is None:
            plan = _plan(x, w_gate, w_up, w_down)
            if len(_PLANS) < 1024:
                _PLANS[key] = plan
        return plan(x, w_gate, w_up, w_down)
    return mlp_full(x, w_gate, w_up, w_down)


def _plan(x, w_gate, w_up, w_down):
    """A function of the four operands doing the call's launches with everything but the tensors
    worked out (the persistent kernels' where TMA can describe the operands, checked per call for the
    base addresses, which the key does not fix; the pointer kernels' otherwise), or mlp_full for
    empty sizes."""
    assert x.dim() == 2 and w_gate.shape == w_up.shape and w_gate.shape[1] == x.shape[1], "x[T,D], w[F,D]"
    assert w_down.shape == (x.shape[1], w_gate.shape[0]), "w_down[D,F]"
    assert x.dtype == w_gate.dtype == w_up.dtype == w_down.dtype, "one dtype for all inputs"
    T, D = x.shape
    F = w_gate.shape[0]
    if T == 0 or D == 0 or F == 0:
        return mlp_full
    (gbm, gbn, gbk, gw, gs), (dbm, dbn, dbk, dw, ds), precision = _configs(x.dtype)
    gu_args = (T, F, D, *x.stride(), *w_gate.stride(), *w_up.stride(), F, 1)  # h is fresh: strides (F, 1)
    gu_grid = (cdiv(T, gbm) * cdiv(F, gbn),)
    gu_meta = dict(BM=gbm, BN=gbn, BK=gbk, GROUP=GROUP_M, EVEN_K=(D % gbk == 0), PRECISION=precision,
                   num_warps=gw, num_stages=gs)
    down_args = (T, D, F, F, 1, *w_down.stride(), D, 1)  # out is fresh: strides (D, 1)
    down_grid = (cdiv(T, dbm) * cdiv(D, dbn),)
    down_meta = dict(BM=dbm, BN=dbn, BK=dbk, GROUP=GROUP_M, EVEN_K=(F % dbk == 0), PRECISION=precision,
                     num_warps=dw, num_stages=ds)
    dtype, device = x.dtype, x.device
    gate_up = Prepared(_gate_up_kernel, gu_grid, gu_args, **gu_meta)
    down = Prepared(_down_kernel, down_grid, down_args, **down_meta)
    # the persistent launches, where the fresh h and out have TMA-describable rows (16-byte strides)
    sixteen = lambda n: (n * x.element_size()) % 16 == 0  # noqa: E731
    tma = x.dtype != torch.float32 and sixteen(F)
    gu_tma = _persistent_gate_up(x, w_gate, w_up, T, F, D) if tma and GU_VARIANT == "persistent" else None
    down_tma = None
    if tma and DOWN_VARIANT == "persistent" and sixteen(D):
        down_tma = _persistent((T, D, F, F, w_down.stride(0), 0, D), (dbm, dbn, dbk, dw, ds), _programs(x),
                               GATED=False)
    allocator = (gu_tma is not None or down_tma is not None) and x.is_cuda

    def run(x, w_gate, w_up, w_down):
        h = torch.empty((T, F), device=device, dtype=dtype)
        out = torch.empty((T, D), device=device, dtype=dtype)
        if allocator:  # device-side descriptors need Triton's scratch allocator (another kernel may have set its own)
            triton.set_allocator(_tma_scratch)
        if gu_tma is not None and _tma_rows(x) and _tma_rows(w_gate) and _tma_rows(w_up):
            for launch_gu in gu_tma:
                launch_gu(x, w_gate, w_up, h)
        else:
            gate_up(x, w_gate, w_up, h)
        if down_tma is not None and _tma_rows(w_down):
            for launch_down in down_tma:
                launch_down(h, w_down, w_down, out)
        else:
            down(h, w_down, out)
        return out
    return run


def _persistent(rest, tiling, programs, **flags):
    """The persistent kernel's launches over the [M, N] output of `rest` (M, N, K and the row strides
    of a, w, w2, c) at `tiling` (BM, BN, BK, warps, stages): one walking every tile, or with
    TAIL_NARROW one for the full waves and one for the last wave's tiles in narrower pieces, where
    those pieces fit in one wave."""
    bm, bn, bk, warps, stages = tiling
    M, N = rest[0], rest[1]
    tiles = cdiv(M, bm) * cdiv(N, bn)
    tail = tiles % programs
    narrow = TAIL_NARROW if tail and 1 < TAIL_NARROW and tail * TAIL_NARROW <= programs else 1
    full = tiles - tail if narrow > 1 else tiles
    meta = dict(GROUP=GROUP_M, PROGRAMS=programs, SUBTILE=EPILOGUE_SUBTILE, FLATTEN=PERSISTENT_LOOP == "flatten",
                num_warps=warps, num_stages=stages, **flags)
    launches = []
    if full:
        launches.append(Prepared(_persistent_kernel, (min(programs, full),), rest + (0, full), BM=bm, BN=bn, BK=bk,
                                 **meta))
    if narrow > 1:
        launches.append(Prepared(_persistent_kernel, (tail * narrow,), rest + (full, tail * narrow), BM=bm,
                                 BN=bn // narrow, BK=bk, NARROW=narrow, **meta))
    return tuple(launches)


def _persistent_gate_up(x, w_gate, w_up, T, F, D):
    """The persistent gate/up launches of GU_ORDER, each a function of (x, w_gate, w_up, h)."""
    tiling, _, _ = _configs(x.dtype)
    programs = _programs(x)
    if GU_ORDER == "split":  # g into h's buffer, then h = silu(g) * u over it
        gate = _persistent((T, F, D, x.stride(0), w_gate.stride(0), 0, F), tiling, programs, GATED=False)
        up = _persistent((T, F, D, x.stride(0), w_up.stride(0), 0, F), tiling, programs, GATED=False, GATE_IN=True)
        return (tuple((lambda x, w_gate, w_up, h, g=g: g(x, w_gate, w_gate, h)) for g in gate)
                + tuple((lambda x, w_gate, w_up, h, u=u: u(x, w_up, w_up, h)) for u in up))
    return _persistent((T, F, D, x.stride(0), w_gate.stride(0), w_up.stride(0), F), tiling, programs,
                       GATED=True, SEQUENTIAL=GU_ORDER == "sequential")


def mlp_full(x, w_gate, w_up, w_down):
    """kernel_fn's every path, decided afresh at each call (a tensor subclass's, while tracing)."""
    assert x.dim() == 2 and w_gate.shape == w_up.shape and w_gate.shape[1] == x.shape[1], "x[T,D], w[F,D]"
    assert w_down.shape == (x.shape[1], w_gate.shape[0]), "w_down[D,F]"
    assert x.dtype == w_gate.dtype == w_up.dtype == w_down.dtype, "one dtype for all inputs"
    T, D = x.shape
    F = w_gate.shape[0]
    out = torch.empty((T, D), device=x.device, dtype=x.dtype)
    if T == 0 or D == 0:
        return out
    if F == 0:
        return out.zero_()
    return _plan(x, w_gate, w_up, w_down)(x, w_gate, w_up, w_down)
