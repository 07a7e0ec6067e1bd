"""Triton flash attention starter: FlashAttention-2 style forward of SDPA (causal or not, GQA).

One program owns BLOCK_M query rows of one (batch, head) and streams the keys/values past them in
BLOCK_N blocks, keeping the softmax online in fp32: running row max m, running normalizer l, and
an fp32 accumulator rescaled by exp2(m_old - m_new) whenever the max grows. The softmax scale is
folded into log2(e) so every exponential is a single exp2.

Causal attention splits the key range: blocks left of the query block's diagonal are fully
visible and run without any mask; only the BLOCK_M-wide diagonal band is masked; blocks right
of it are never loaded. Programs are launched heaviest-first (last query block first) so the
short rows fill the tail of the grid. Non-causal attention masks only the last, ragged key block.

GQA: q head h reads kv head h // (Hq // Hkv), as SDPA's enable_gqa does. Any strides: models pass
transposed views of [B,S,H,D]. Head dims that are not a power of two (or below 16, tl.dot's
minimum) are padded to BLOCK_D with masked loads. 16-bit inputs use the main tunables; fp32
inputs use their own (true fp32 products: TF32 would miss the fp32 tolerance, and 4-byte tiles
need half the shared memory per stage).

VARIANT "tma" (16-bit inputs only; fp32 always runs the pointer kernel with its exact products) is
the Hopper form of the same algorithm: Q, K, V and O tiles move through tensor descriptors
(tl.make_tensor_descriptor, made in the kernel per (batch, head): TMA on sm_90, rows past the
sequence end and head-dim columns past D read as zeros and are clipped on the store, so no load
masks and non-power-of-two head dims pad for free); with TMA_DESC "host" one [B, H, S, D] descriptor
per operand is built on the host and passed as a kernel parameter instead, so no program spends
time writing and fencing descriptors (transposed [B,S,H,D] views keep the per-program ones: see
_outer_first). WARP_SPEC runs the key loop as tl.range(..., warp_specialize=True): Triton's Hopper
pass then splits a 4-warp, 128-row program into a producer warpgroup that issues the TMA loads and
two consumer warpgroups of 64 rows each that do the wgmma and the softmax (12 warps, registers
moved to the consumers with setmaxnreg), the overlap FlashAttention-3 builds by hand. Triton 3.6
partitions only a kernel whose key loop is its only loop (a second loop fails its pass), so with
WARP_SPEC the tile runs one loop over all its key blocks with the causal and sequence-end masks on
every block; at 8 warps the request does nothing, with host descriptors the pass fails
(valid_config allows it at 4 warps, BLOCK_M 128, TMA_DESC "device").
Without WARP_SPEC the causal split is the pointer kernel's: blocks left of the diagonal unmasked,
the band masked.
Operands TMA cannot describe (an inner stride other than 1, a base or outer stride not 16-byte
aligned, a head dim past TMA's 256-element box) run the pointer kernel.

DECODE (a call with a mask, or with keys longer than queries: a KV cache; at most DECODE_MAX_Q
queries) is split-KV attention ("flash-decoding"). One program takes every q head of one kv head
group times the Sq queries (group * Sq rows, padded to a power of two of at least 16 so tl.dot
applies) against one split of the key range: K and V are read once per kv head, not once per q
head. The splits (DECODE_SPLITS, or by default enough of them that B * Hkv * splits fills every SM
DECODE_WAVES times) write an unnormalized fp32 accumulator with its row max and normalizer each;
a second kernel merges them (log-sum-exp rescaling) into O in the input dtype. With one split the
first kernel writes O itself. Causal is bottom-right aligned (query i sees keys <= i + Sk - Sq);
the mask (bool: True = attend, or additive float) is read through its broadcast strides; a row
that sees no key comes out as zeros, as SDPA returns it.
"""

import functools
import math

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

KERNEL_TYPE = "flash_attention"
BACKEND = "triton"

# fp16 / bf16 on Hopper: a 128-row query tile over 8 warps (two warpgroups of wgmma), 64-key
# blocks double/triple buffered.
BLOCK_M = 128
BLOCK_N = 64
NUM_WARPS = 8
NUM_STAGES = 3
VARIANT = "pointer"
WARP_SPEC = False  # the "tma" variant's key loops warp-specialized (producer / consumer warps)
TMA_DESC = "device"  # the "tma" variant's descriptors: built per program ("device") or once on the host

# decode: key blocks per step, the key-range splits per (batch, kv head) (0: DECODE_WAVES programs
# per SM in all), warps and pipeline stages of the split kernel
DECODE_BLOCK_N = 64
DECODE_SPLITS = 0
DECODE_WAVES = 2
DECODE_NUM_WARPS = 4
DECODE_NUM_STAGES = 2
DECODE_MAX_Q = 16  # the most queries a call with a mask or a longer KV may have (the contract)

# fp32: "ieee" products on the FMA path, or 3xTF32 (about as exact, on tensor cores).
FP32_BLOCK_M = 64
FP32_BLOCK_N = 32
FP32_NUM_WARPS = 4
FP32_NUM_STAGES = 2
FP32_PRECISION = "ieee"

SEARCH_SPACE = {
    "BLOCK_M": [64, 128, 256],
    "BLOCK_N": [32, 64, 128],
    "NUM_WARPS": [4, 8],
    "NUM_STAGES": [1, 2, 3, 4, 5],
    "FP32_BLOCK_M": [32, 64, 128],
    "FP32_BLOCK_N": [16, 32, 64],
    "FP32_NUM_WARPS": [4, 8],
    "FP32_NUM_STAGES": [1, 2, 3],
    "FP32_PRECISION": ["ieee", "tf32x3"],
    "VARIANT": ["pointer", "tma"],
    # True compiles for sm_90a but is wrong on the H200 (Triton 3.6, 2026-12-05: NaN and errors of 1.25 at
    # 4x32x4096x128 causal, benchmarks/attention_hopper.py): the search does not propose it until a
    # Triton release gets it right; the benchmark keeps timing it so that the day shows.
    "WARP_SPEC": [False],
    "TMA_DESC": ["device", "host"],
    "DECODE_BLOCK_N": [16, 32, 64, 128, 256],
    "DECODE_SPLITS": [0, 1, 2, 4, 8, 16, 32],
    "DECODE_WAVES": [1, 2, 4, 8],
    "DECODE_NUM_WARPS": [1, 2, 4, 8],
    "DECODE_NUM_STAGES": [1, 2, 3, 4],
}

# the tunables that switch code paths rather than sizes (the search names them in its descriptions)
STRUCTURAL = ["VARIANT", "WARP_SPEC", "TMA_DESC", "FP32_PRECISION"]

DETERMINISTIC = True  # each output row is reduced by one program in a fixed key order

SMEM_LIMIT = 227 * 1024  # H100/H200 opt-in shared memory per block
MAX_HEAD_DIM = 128  # the largest head dim valid_config budgets shared memory for


def valid_config(cfg):
    # The causal split needs the diagonal band to start on a key-block boundary.
    if cfg["BLOCK_M"] % cfg["BLOCK_N"] or cfg["FP32_BLOCK_M"] % cfg["FP32_BLOCK_N"]:
        return False
    warps = cfg["NUM_WARPS"]
    # q tile + pipelined k and v tiles at the largest head dim must fit in shared memory.
    half = (cfg["BLOCK_M"] + 2 * cfg["BLOCK_N"] * max(cfg["NUM_STAGES"], 1)) * MAX_HEAD_DIM * 2
    if cfg.get("VARIANT") == "tma":
        # TMA adds its mbarriers; the O tile staged for the TMA store reuses the K/V buffers (sm_90,
        # Triton 3.6: 230400 bytes at 128x128, 3 stages, D 128, against 229376 for the tiles)
        half += 1024
        # Triton 3.6's Hopper warp specialization (checked by compiling for sm_90a) partitions a
        # 4-warp program into a producer and two consumer warpgroups of BLOCK_M / 2 = 64 rows (the
        # wgmma row count), 12 warps in all; at 8 warps it silently does nothing, and with host
        # descriptors (4-D boxes reshaped to tiles) its pass fails
        if cfg.get("WARP_SPEC"):
            if cfg["NUM_WARPS"] != 4 or cfg["BLOCK_M"] != 128 or cfg.get("TMA_DESC", "device") != "device":
                return False
            warps = 2 * cfg["NUM_WARPS"]  # the two consumer warpgroups hold the tile's registers
            # the consumers' O tiles get their own store buffer (164376 bytes at 128x64, 3 stages,
            # D 128, against 132096 without warp specialization)
            half += cfg["BLOCK_M"] * MAX_HEAD_DIM * 2
    single = (cfg["FP32_BLOCK_M"] + 2 * cfg["FP32_BLOCK_N"] * max(cfg["FP32_NUM_STAGES"], 1)) * MAX_HEAD_DIM * 4
    # decode: a 64-row tile (a GQA group of 4 x 16 queries) and its pipelined fp32 K/V blocks
    decode = (64 + 2 * cfg.get("DECODE_BLOCK_N", 64) * max(cfg.get("DECODE_NUM_STAGES", 1), 1)) * MAX_HEAD_DIM * 4
    if decode > SMEM_LIMIT:
        return False
    # fp32 accumulator (BLOCK_M x D) plus scores (BLOCK_M x BLOCK_N) per thread. ptxas (Triton 3.6,
    # sm_90, D=128): 96 of these -> 184 registers; 128 -> 255 without spills; 192 -> spills.
    regs = cfg["BLOCK_M"] * (MAX_HEAD_DIM + cfg["BLOCK_N"]) // (32 * warps)
    return half <= SMEM_LIMIT and single <= SMEM_LIMIT and regs <= 128


def effective_config(cfg, dtype, shapes=None):
    # fp32 inputs run the pointer kernel with the FP32_* tiles; 16-bit inputs the others, and
    # WARP_SPEC matters only to the "tma" variant: the search spends no trials on unread tunables.
    # `shapes` (the kernel's, when the search knows them): without a call whose keys outnumber its
    # queries, none takes the decode path (a prefill-only model: H100 run 6 spent two of its
    # attention's four first moves on DECODE_* values)
    if dtype == "float32":
        unused = ["BLOCK_M", "BLOCK_N", "NUM_WARPS", "NUM_STAGES", "VARIANT", "WARP_SPEC", "TMA_DESC"]
    else:
        unused = [k for k in cfg if k.startswith("FP32_")]
        if cfg.get("VARIANT") != "tma":
            unused += ["WARP_SPEC", "TMA_DESC"]
    if cfg.get("DECODE_SPLITS"):
        unused.append("DECODE_WAVES")  # a fixed split count: the SM count is not asked
    if shapes is not None and all(s.get("kv_seq", s.get("seq")) == s.get("seq") for s in shapes):
        unused += [k for k in cfg if k.startswith("DECODE_")]
    return {k: v for k, v in cfg.items() if k not in unused}


@triton.jit
def _load_tile(ptrs, rows, n_rows, cols, n_cols, CHECK_ROWS: tl.constexpr, CHECK_COLS: tl.constexpr):
    # Masks only where the tile can cross an edge: the unmasked load is the fast path. One return
    # at the end: the compiler resolves these constexpr branches and keeps only the taken load.
    if CHECK_ROWS:
        if CHECK_COLS:
            x = tl.load(ptrs, mask=(rows[:, None] < n_rows) & (cols[None, :] < n_cols), other=0.0)
        else:
            x = tl.load(ptrs, mask=rows[:, None] < n_rows, other=0.0)
    else:
        if CHECK_COLS:
            x = tl.load(ptrs, mask=cols[None, :] < n_cols, other=0.0)
        else:
            x = tl.load(ptrs)
    return x


@triton.jit
def _softmax_step(qk, l_i, m_i, offs_m, offs_n, seq, qk_scale, CAUSAL_MASK: tl.constexpr, BOUNDS_MASK: tl.constexpr):
    """One key block's online-softmax update of both kernels: the block's probabilities p
    (exp2 of the scaled scores, log2(e) folded into qk_scale), the rescale alpha of the old
    accumulator, and the new normalizer and row max."""
    if BOUNDS_MASK:
        # Scale before masking: -inf * scale can never become NaN this way.
        keep = offs_n[None, :] < seq
        if CAUSAL_MASK:
            keep = keep & (offs_m[:, None] >= offs_n[None, :])
        qk = tl.where(keep, qk * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_new[:, None])
    else:
        m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        p = tl.math.exp2(qk * qk_scale - m_new[:, None])
    alpha = tl.math.exp2(m_i - m_new)
    return p, alpha, l_i * alpha + tl.sum(p, 1), m_new


@triton.jit
def _attn_blocks(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd,
                 offs_m, offs_d, lo, hi, seq, qk_scale,
                 BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, MASK_D: tl.constexpr,
                 CAUSAL_MASK: tl.constexpr, BOUNDS_MASK: tl.constexpr, PRECISION: tl.constexpr):
    """Fold keys [lo, hi) into the running (acc, l, m) of one query tile. The causal band is
    always called with BOUNDS_MASK too (it can reach the sequence end)."""
    offs_n0 = tl.arange(0, BLOCK_N)
    for start_n in tl.range(lo, hi, BLOCK_N):
        offs_n = start_n + offs_n0
        k = _load_tile(k_base + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd,
                       offs_n, seq, offs_d, HEAD_DIM, BOUNDS_MASK, MASK_D)
        qk = tl.dot(q, tl.trans(k), input_precision=PRECISION)
        p, alpha, l_i, m_new = _softmax_step(qk, l_i, m_i, offs_m, offs_n, seq, qk_scale, CAUSAL_MASK, BOUNDS_MASK)
        v = _load_tile(v_base + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd,
                       offs_n, seq, offs_d, HEAD_DIM, BOUNDS_MASK, MASK_D)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=PRECISION)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _program_tile(heads, group, CAUSAL: tl.constexpr):
    """This program's query block, batch, q head and kv head (GQA: q head h reads kv head h // group)."""
    if CAUSAL:
        # Heaviest query blocks (most keys) first; the light ones fill the tail of the grid.
        start_m = tl.num_programs(0) - 1 - tl.program_id(0)
    else:
        start_m = tl.program_id(0)
    bh = tl.program_id(1)
    off_b = (bh // heads).to(tl.int64)
    off_h = (bh % heads).to(tl.int64)
    return start_m, off_b, off_h, off_h // group


@triton.jit
def _attn_fwd(Q, K, V, O, qk_scale, seq, heads, group,
              stride_qb, stride_qh, stride_qm, stride_qd,
              stride_kb, stride_kh, stride_kn, stride_kd,
              stride_vb, stride_vh, stride_vn, stride_vd,
              stride_ob, stride_oh, stride_om, stride_od,
              HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
              BLOCK_N: tl.constexpr, MASK_D: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr):
    qk_scale = tl.cast(qk_scale, tl.float32)  # torch.compile passes a Python float as fp64
    start_m, off_b, off_h, off_kv = _program_tile(heads, group, CAUSAL)
    q_base = Q + off_b * stride_qb + off_h * stride_qh
    k_base = K + off_b * stride_kb + off_kv * stride_kh
    v_base = V + off_b * stride_vb + off_kv * stride_vh
    o_base = O + off_b * stride_ob + off_h * stride_oh

    m0 = start_m * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    q = _load_tile(q_base + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd,
                   offs_m, seq, offs_d, HEAD_DIM, True, MASK_D)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    if CAUSAL:
        # Keys [0, m0) are visible to every row of this tile (m0 is a BLOCK_N multiple): no mask.
        acc, l_i, m_i = _attn_blocks(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_kd,
                                     stride_vn, stride_vd, offs_m, offs_d, 0, m0, seq, qk_scale,
                                     BLOCK_N, HEAD_DIM, MASK_D, False, False, PRECISION)
        # The diagonal band [m0, m0 + BLOCK_M): causal mask, and the sequence end.
        acc, l_i, m_i = _attn_blocks(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_kd,
                                     stride_vn, stride_vd, offs_m, offs_d, m0,
                                     tl.minimum(m0 + BLOCK_M, seq), seq, qk_scale,
                                     BLOCK_N, HEAD_DIM, MASK_D, True, True, PRECISION)
    else:
        n_full = (seq // BLOCK_N) * BLOCK_N
        acc, l_i, m_i = _attn_blocks(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_kd,
                                     stride_vn, stride_vd, offs_m, offs_d, 0, n_full, seq, qk_scale,
                                     BLOCK_N, HEAD_DIM, MASK_D, False, False, PRECISION)
        if n_full < seq:
            acc, l_i, m_i = _attn_blocks(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_kd,
                                         stride_vn, stride_vd, offs_m, offs_d, n_full, seq, seq,
                                         qk_scale, BLOCK_N, HEAD_DIM, MASK_D, False, True, PRECISION)
    # Every row saw at least one key (key 0, or its own diagonal), so l_i > 0.
    out = acc / l_i[:, None]
    o_ptrs = o_base + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od
    tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=(offs_m[:, None] < seq) & (offs_d[None, :] < HEAD_DIM))


@triton.jit
def _desc_load(desc, b, h, row, ROWS: tl.constexpr, BLOCK_D: tl.constexpr, HOST_DESC: tl.constexpr):
    # a host descriptor spans [B, H, S, D] (one for all programs); a device one this head's [S, D]
    if HOST_DESC:
        x = desc.load([b, h, row, 0]).reshape(ROWS, BLOCK_D)
    else:
        x = desc.load([row, 0])
    return x


@triton.jit
def _attn_tma_blocks(acc, l_i, m_i, q, k_desc, v_desc, off_b, off_kv, offs_m, lo, hi, seq, qk_scale,
                     BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, CAUSAL_MASK: tl.constexpr,
                     BOUNDS_MASK: tl.constexpr, WARP_SPEC: tl.constexpr, HOST_DESC: tl.constexpr):
    """_attn_blocks with K and V tiles from tensor descriptors: keys past the sequence end arrive
    as zeros, so BOUNDS_MASK still masks their scores (a zero score is not a missing key)."""
    offs_n0 = tl.arange(0, BLOCK_N)
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WARP_SPEC):
        k = _desc_load(k_desc, off_b, off_kv, start_n, BLOCK_N, BLOCK_D, HOST_DESC)
        qk = tl.dot(q, k.T)
        p, alpha, l_i, m_new = _softmax_step(qk, l_i, m_i, offs_m, start_n + offs_n0, seq, qk_scale,
                                             CAUSAL_MASK, BOUNDS_MASK)
        v = _desc_load(v_desc, off_b, off_kv, start_n, BLOCK_N, BLOCK_D, HOST_DESC)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _attn_fwd_tma(Q, K, V, O, qk_scale, seq, heads, group,
                  stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
                  stride_vb, stride_vh, stride_vn, stride_ob, stride_oh, stride_om,
                  HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
                  BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, WARP_SPEC: tl.constexpr,
                  HOST_DESC: tl.constexpr):
    """_attn_fwd through TMA. HOST_DESC: Q/K/V/O are [B, H, S, D] descriptors built on the host
    (Triton passes them as kernel parameters: nothing to build per program); else pointers, and
    each program builds one [seq, HEAD_DIM] descriptor per operand for its (batch, head) (kv head
    for K and V). Either way the zero fill and the store clipping stop exactly at this head's
    sequence end and head dim, whatever the batch and head strides."""
    qk_scale = tl.cast(qk_scale, tl.float32)  # torch.compile passes a Python float as fp64
    start_m, off_b, off_h, off_kv = _program_tile(heads, group, CAUSAL)
    if HOST_DESC:
        q_desc = Q
        k_desc = K
        v_desc = V
        o_desc = O
    else:
        q_desc = tl.make_tensor_descriptor(Q + off_b * stride_qb + off_h * stride_qh, shape=[seq, HEAD_DIM],
                                           strides=[stride_qm, 1], block_shape=[BLOCK_M, BLOCK_D])
        k_desc = tl.make_tensor_descriptor(K + off_b * stride_kb + off_kv * stride_kh, shape=[seq, HEAD_DIM],
                                           strides=[stride_kn, 1], block_shape=[BLOCK_N, BLOCK_D])
        v_desc = tl.make_tensor_descriptor(V + off_b * stride_vb + off_kv * stride_vh, shape=[seq, HEAD_DIM],
                                           strides=[stride_vn, 1], block_shape=[BLOCK_N, BLOCK_D])
        o_desc = tl.make_tensor_descriptor(O + off_b * stride_ob + off_h * stride_oh, shape=[seq, HEAD_DIM],
                                           strides=[stride_om, 1], block_shape=[BLOCK_M, BLOCK_D])
    b32 = off_b.to(tl.int32)
    h32 = off_h.to(tl.int32)
    kv32 = off_kv.to(tl.int32)

    m0 = start_m * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)
    q = _desc_load(q_desc, b32, h32, m0, BLOCK_M, BLOCK_D, HOST_DESC)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    if WARP_SPEC:
        # One warp-specialized loop over every key block this tile sees, each block masked (causal
        # and sequence end): Triton 3.6's Hopper pass partitions a kernel whose key loop is its only
        # loop, and fails on a second one after it (or before it), so the two-stage split is off here.
        if CAUSAL:
            hi = tl.minimum(m0 + BLOCK_M, seq)
        else:
            hi = seq
        acc, l_i, m_i = _attn_tma_blocks(acc, l_i, m_i, q, k_desc, v_desc, b32, kv32, offs_m, 0, hi, seq, qk_scale,
                                         BLOCK_N, BLOCK_D, CAUSAL, True, True, HOST_DESC)
    elif CAUSAL:
        # stage 1: keys [0, m0), left of the diagonal, visible to every row: no mask
        acc, l_i, m_i = _attn_tma_blocks(acc, l_i, m_i, q, k_desc, v_desc, b32, kv32, offs_m, 0, m0, seq, qk_scale,
                                         BLOCK_N, BLOCK_D, False, False, False, HOST_DESC)
        # stage 2: the diagonal band, causal mask and sequence end
        acc, l_i, m_i = _attn_tma_blocks(acc, l_i, m_i, q, k_desc, v_desc, b32, kv32, offs_m, m0,
                                         tl.minimum(m0 + BLOCK_M, seq), seq, qk_scale,
                                         BLOCK_N, BLOCK_D, True, True, False, HOST_DESC)
    else:
        n_full = (seq // BLOCK_N) * BLOCK_N
        acc, l_i, m_i = _attn_tma_blocks(acc, l_i, m_i, q, k_desc, v_desc, b32, kv32, offs_m, 0, n_full, seq,
                                         qk_scale, BLOCK_N, BLOCK_D, False, False, False, HOST_DESC)
        if n_full < seq:
            acc, l_i, m_i = _attn_tma_blocks(acc, l_i, m_i, q, k_desc, v_desc, b32, kv32, offs_m, n_full, seq, seq,
                                             qk_scale, BLOCK_N, BLOCK_D, False, True, False, HOST_DESC)
    out = (acc / l_i[:, None]).to(o_desc.dtype)
    # rows past seq and columns past HEAD_DIM are clipped
    if HOST_DESC:
        o_desc.store([b32, h32, m0, 0], out.reshape(1, 1, BLOCK_M, BLOCK_D))
    else:
        o_desc.store([m0, 0], out)


# ---------------------------------------------------------------- decode: split-KV attention


@triton.jit
def _decode_split(Q, K, V, Mask, O, Part, Stat, qk_scale, sq, sk, kv_heads, group, split_len,
                  stride_qb, stride_qh, stride_qm, stride_qd,
                  stride_kb, stride_kh, stride_kn, stride_kd,
                  stride_vb, stride_vh, stride_vn, stride_vd,
                  stride_mb, stride_mh, stride_mm, stride_mn,
                  stride_ob, stride_oh, stride_om, stride_od,
                  HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_R: tl.constexpr,
                  BLOCK_N: tl.constexpr, MASK_D: tl.constexpr, CAUSAL: tl.constexpr,
                  MASK_KIND: tl.constexpr, DIRECT: tl.constexpr, PRECISION: tl.constexpr):
    """One split of the keys for one (batch, kv head): rows r = (q head in the group) * sq + query.
    MASK_KIND: 0 none, 1 bool (nonzero = attend), 2 additive. DIRECT: the only split, writes O."""
    qk_scale = tl.cast(qk_scale, tl.float32)  # torch.compile passes a Python float as fp64
    split = tl.program_id(0)
    n_splits = tl.num_programs(0)
    bkv = tl.program_id(1)
    off_b = (bkv // kv_heads).to(tl.int64)
    off_kv = (bkv % kv_heads).to(tl.int64)
    offs_r = tl.arange(0, BLOCK_R)
    offs_d = tl.arange(0, BLOCK_D)
    row_ok = offs_r < group * sq
    off_h = off_kv * group + offs_r // sq  # each row's q head
    off_i = offs_r % sq  # ... and query
    q = _load_tile(Q + off_b * stride_qb + off_h[:, None] * stride_qh + off_i[:, None] * stride_qm
                   + offs_d[None, :] * stride_qd, offs_r, group * sq, offs_d, HEAD_DIM, True, MASK_D)
    k_base = K + off_b * stride_kb + off_kv * stride_kh
    v_base = V + off_b * stride_vb + off_kv * stride_vh
    m_base = Mask + off_b * stride_mb + off_h * stride_mh + off_i * stride_mm
    last_key = off_i + sk - sq  # bottom-right causal: the last key each row sees

    m_i = tl.full([BLOCK_R], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_R], dtype=tl.float32)
    acc = tl.zeros([BLOCK_R, BLOCK_D], dtype=tl.float32)
    lo = split * split_len
    hi = tl.minimum(lo + split_len, sk)
    offs_n0 = tl.arange(0, BLOCK_N)
    for start_n in tl.range(lo, hi, BLOCK_N):
        offs_n = start_n + offs_n0
        k = _load_tile(k_base + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd,
                       offs_n, hi, offs_d, HEAD_DIM, True, MASK_D)
        qk = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale
        keep = (offs_n[None, :] < hi) & row_ok[:, None]
        if CAUSAL:
            keep = keep & (offs_n[None, :] <= last_key[:, None])
        if MASK_KIND == 1:
            allowed = tl.load(m_base[:, None] + offs_n[None, :] * stride_mn, mask=keep, other=0)
            keep = keep & (allowed != 0)
        if MASK_KIND == 2:
            bias = tl.load(m_base[:, None] + offs_n[None, :] * stride_mn, mask=keep, other=0.0)
            qk = qk + bias.to(tl.float32) * 1.4426950408889634  # the scores are in log2 units
        qk = tl.where(keep, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        # a row with nothing visible yet keeps m = -inf; exp2 against 0 then gives p = alpha = 0
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.math.exp2(qk - m_safe[:, None])
        alpha = tl.math.exp2(m_i - m_safe)
        v = _load_tile(v_base + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd,
                       offs_n, hi, offs_d, HEAD_DIM, True, MASK_D)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=PRECISION)
        m_i = m_new
    if DIRECT:
        out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]  # no key seen: acc is 0, the row is zeros
        o_ptrs = O + off_b * stride_ob + off_h[:, None] * stride_oh + off_i[:, None] * stride_om \
            + offs_d[None, :] * stride_od
        tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=row_ok[:, None] & (offs_d[None, :] < HEAD_DIM))
    else:
        # partials of row (batch, q head, query) = bkv * group * sq + r: [rows, splits, BLOCK_D]
        part_row = (bkv * group * sq + offs_r).to(tl.int64) * n_splits + split
        tl.store(Part + part_row[:, None] * BLOCK_D + offs_d[None, :], acc, mask=row_ok[:, None])
        tl.store(Stat + part_row * 2, m_i, mask=row_ok)
        tl.store(Stat + part_row * 2 + 1, l_i, mask=row_ok)


@triton.jit
def _decode_merge(Part, Stat, O, n_splits, sq, heads,
                  stride_ob, stride_oh, stride_om, stride_od,
                  HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr):
    """One output row from its splits: weights exp2(m_s - max m), O = sum(w acc) / sum(w l)."""
    row = tl.program_id(0).to(tl.int64)
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, BLOCK_D)
    s_ok = offs_s < n_splits
    base = row * n_splits + offs_s
    m = tl.load(Stat + base * 2, mask=s_ok, other=float("-inf"))
    l = tl.load(Stat + base * 2 + 1, mask=s_ok, other=0.0)
    m_max = tl.max(m, 0)
    w = tl.math.exp2(m - tl.where(m_max == float("-inf"), 0.0, m_max))  # empty splits weigh 0
    acc = tl.load(Part + base[:, None] * BLOCK_D + offs_d[None, :], mask=s_ok[:, None], other=0.0)
    total = tl.sum(w * l, 0)
    out = tl.sum(acc * w[:, None], 0) / tl.where(total > 0, total, 1.0)
    off_b = row // (heads * sq)
    off_h = (row // sq) % heads
    o_ptrs = O + off_b * stride_ob + off_h * stride_oh + (row % sq) * stride_om + offs_d * stride_od
    tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=offs_d < HEAD_DIM)


@functools.lru_cache(maxsize=None)
def _sm_count(device_index):
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def decode_splits(t, batch_kv, n_blocks):
    """The key-range splits: DECODE_SPLITS, or enough that the B * Hkv * splits programs fill every SM
    DECODE_WAVES times (3 SMs under the interpreter, so the CPU tests split too), at most one per
    key block, and none left empty once the blocks are dealt out evenly."""
    if DECODE_SPLITS:
        return DECODE_SPLITS
    sms = _sm_count(t.device.index if t.device.index is not None else torch.cuda.current_device()) if t.is_cuda else 3
    splits = max(1, min(n_blocks, cdiv(DECODE_WAVES * sms, batch_kv)))
    return cdiv(n_blocks, cdiv(n_blocks, splits))  # 9 wanted of 32 blocks: 8 splits of 4 blocks


def _decode_mask(mask, shape):
    """(kind, tensor, strides) of the optional mask, broadcast to [B, H, Sq, Sk] by its strides."""
    if mask is None:
        return 0, None, (0, 0, 0, 0)
    if mask.dim() < 4:
        mask = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))
    mask = mask.expand(shape)
    if mask.dtype == torch.bool:
        return 1, mask.view(torch.uint8), mask.stride()
    return 2, mask, mask.stride()


def _decode(q, k, v, causal, sm_scale, mask, o, precision):
    B, H, Sq, D = q.shape
    Hkv, Sk = k.shape[1], k.shape[2]
    group = H // Hkv
    block_n = DECODE_BLOCK_N
    block_d = max(16, next_power_of_2(D))
    n_blocks = cdiv(Sk, block_n)
    splits = decode_splits(q, B * Hkv, n_blocks)
    split_len = cdiv(n_blocks, splits) * block_n  # whole key blocks per split; the last may be empty
    kind, m, m_strides = _decode_mask(mask, (B, H, Sq, Sk))
    direct = splits == 1
    if direct:
        part = stat = o  # not read
    else:
        part = torch.empty((B * H * Sq, splits, block_d), device=q.device, dtype=torch.float32)
        stat = torch.empty((B * H * Sq, splits, 2), device=q.device, dtype=torch.float32)
    launch(_decode_split, (splits, B * Hkv),
        q, k, v, q if m is None else m, o, part, stat, sm_scale * 1.4426950408889634, Sq, Sk, Hkv, group,
        split_len, *q.stride(), *k.stride(), *v.stride(), *m_strides, *o.stride(),
        HEAD_DIM=D, BLOCK_D=block_d, BLOCK_R=max(16, next_power_of_2(group * Sq)), BLOCK_N=block_n,
        MASK_D=(block_d != D), CAUSAL=bool(causal), MASK_KIND=kind, DIRECT=direct, PRECISION=precision,
        num_warps=DECODE_NUM_WARPS, num_stages=DECODE_NUM_STAGES,
    )
    if not direct:
        launch(_decode_merge, (B * H * Sq,), part, stat, o, splits, Sq, H, *o.stride(),
               HEAD_DIM=D, BLOCK_D=block_d, BLOCK_S=max(2, next_power_of_2(splits)), num_warps=4)
    return o


def _config(dtype):
    if dtype == torch.float32:
        return FP32_BLOCK_M, FP32_BLOCK_N, FP32_NUM_WARPS, FP32_NUM_STAGES, FP32_PRECISION
    # 16-bit inputs: tensor cores multiply them exactly; None keeps Triton's default.
    return BLOCK_M, BLOCK_N, NUM_WARPS, NUM_STAGES, None


def _base_aligned(t):
    """t's first element is 16-byte aligned. A fake or functional tensor (torch.compile or a triton_op
    being traced) has no memory to ask, and asking warns; Inductor's buffers start 16-byte aligned and it
    copies graph inputs that do not, so there its storage offset decides."""
    if type(t) is torch.Tensor or type(t) is torch.nn.Parameter:
        return t.data_ptr() % 16 == 0
    return (t.storage_offset() * t.element_size()) % 16 == 0


def tma_ok(t):
    """TMA can describe t's [seq, head_dim] planes: unit head-dim stride, 16-byte aligned base and
    sequence stride, and 16-byte aligned batch / head strides where those dims are walked (a
    [B,S,H,D]-transposed view qualifies when D * element size is a multiple of 16)."""
    es = t.element_size()
    return (t.stride(3) == 1 and _base_aligned(t) and (t.stride(2) * es) % 16 == 0
            and all((t.stride(i) * es) % 16 == 0 for i in (0, 1) if t.shape[i] > 1))


def _tma_scratch(size, alignment, stream):
    # Device-side tensor descriptors live in a global scratch buffer Triton asks the allocator for.
    return torch.empty(size, dtype=torch.int8, device="cuda")


def _outer_first(t):
    """t's batch, head and sequence strides do not grow inwards (dims of size 1 aside): the layout
    a host descriptor is given. A [B,S,H,D]-transposed view (head stride below the sequence
    stride) keeps per-program descriptors: TMA documents strides that grow outwards only."""
    strides = [st for st, n in zip(t.stride()[:3], t.shape[:3]) if n > 1]
    return all(a >= b for a, b in zip(strides, strides[1:]))


def _host_desc(t, rows, block_d):
    """A [B, H, S, D] TMA descriptor of t, one box a [rows, block_d] tile of one head. A size-1
    dim's stride is never stepped: it is given an aligned value (TMA checks every stride)."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    strides = [st if n > 1 or i == 3 else t.shape[3] * 8 for i, (st, n) in enumerate(zip(t.stride(), t.shape))]
    return TensorDescriptor(t, list(t.shape), strides, [1, 1, rows, block_d])


_PLANS = {}  # (shapes, strides, dtype, device, causal, scale) -> the prefill launch prepared for them
_Tensor = torch.Tensor


def kernel_fn(q, k, v, causal, scale=None, mask=None):
    # The pointer kernel's grid, tiles and strides are a function of the operands' shapes, strides,
    # dtype and device, causal and scale: worked out once per such key, so a repeated call (every
    # layer) allocates o and launches. The decode path, the TMA variant and tensor subclasses
    # (tracing) take the full path.
    if mask is None and VARIANT == "pointer" and type(q) is _Tensor and type(k) is _Tensor and type(v) is _Tensor \
            and type(causal) is bool and (scale is None or type(scale) is float):
        key = (q.shape, k.shape, v.shape, q.stride(), k.stride(), v.stride(), q.dtype, k.dtype, v.dtype,
               q.get_device(), causal, scale)
        plan = _PLANS.get(key)
        if plan is None:
            plan = _plan(q, k, v, causal, scale)
            if len(_PLANS) < 1024:
                _PLANS[key] = plan
        return plan(q, k, v)
    return attention_full(q, k, v, causal, scale, mask)


def _plan(q, k, v, causal, scale):
    """A function (q, k, v) -> o: the pointer kernel's launch prepared for operands like these, or
    attention_full where a call needs more (the decode path, empty sizes)."""
    _check(q, k, v)
    B, H, S, D = q.shape
    if k.shape[2] != S or q.numel() == 0:
        return lambda q, k, v: attention_full(q, k, v, causal, scale)
    Hkv = k.shape[1]
    sm_scale = (1.0 / math.sqrt(D)) if scale is None else float(scale)
    block_m, block_n, warps, stages, precision = _config(q.dtype)
    block_d = max(16, next_power_of_2(D))
    attend = Prepared(_attn_fwd, (cdiv(S, block_m), B * H),
                      (sm_scale * 1.4426950408889634, S, H, H // Hkv, *q.stride(), *k.stride(), *v.stride(),
                       H * S * D, S * D, D, 1),
                      HEAD_DIM=D, BLOCK_D=block_d, BLOCK_M=block_m, BLOCK_N=block_n, MASK_D=(block_d != D),
                      CAUSAL=causal, PRECISION=precision, num_warps=warps, num_stages=stages)
    device, dtype = q.device, q.dtype

    def run(q, k, v):
        o = torch.empty((B, H, S, D), device=device, dtype=dtype)  # fresh: contiguous strides
        attend(q, k, v, o)
        return o
    return run


def _check(q, k, v):
    assert q.dim() == 4 and k.dim() == 4 and v.dim() == 4, "q[B,Hq,S,D], k and v [B,Hkv,Sk,D]"
    assert q.dtype == k.dtype == v.dtype, "q, k and v must share a dtype"
    B, H, S, D = q.shape
    Hkv, Sk = k.shape[1], k.shape[2]
    assert k.shape == v.shape == (B, Hkv, Sk, D), "k and v must be [B,Hkv,Sk,D] with q's B and D"
    assert Hkv >= 1 and H % Hkv == 0, "q heads must be a multiple of kv heads"


def attention_full(q, k, v, causal, scale=None, mask=None):
    """kernel_fn's every path, worked out afresh at each call."""
    _check(q, k, v)
    B, H, S, D = q.shape
    Hkv, Sk = k.shape[1], k.shape[2]
    o = torch.empty((B, H, S, D), device=q.device, dtype=q.dtype)
    if o.numel() == 0:
        return o
    sm_scale = (1.0 / math.sqrt(D)) if scale is None else float(scale)
    block_m, block_n, warps, stages, precision = _config(q.dtype)
    if mask is not None or Sk != S:
        if Sk < S or S > DECODE_MAX_Q:
            raise ValueError(f"flash_attention: a mask or a longer KV is covered for up to {DECODE_MAX_Q} queries "
                             f"with at least as many keys, got {S} queries and {Sk} keys")
        return _decode(q, k, v, causal, sm_scale, mask, o, precision)
    block_d = max(16, next_power_of_2(D))
    grid = (cdiv(S, block_m), B * H)
    if VARIANT == "tma" and q.dtype != torch.float32 and block_d <= 256 and \
            tma_ok(q) and tma_ok(k) and tma_ok(v) and tma_ok(o):
        host = TMA_DESC == "host" and _outer_first(q) and _outer_first(k) and _outer_first(v)
        if host:
            ins = (_host_desc(q, block_m, block_d), _host_desc(k, block_n, block_d), _host_desc(v, block_n, block_d),
                   _host_desc(o, block_m, block_d))
        else:
            ins = (q, k, v, o)
            if q.is_cuda:
                triton.set_allocator(_tma_scratch)
        launch(_attn_fwd_tma, grid,
            *ins, sm_scale * 1.4426950408889634, S, H, H // Hkv,
            q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
            v.stride(0), v.stride(1), v.stride(2), o.stride(0), o.stride(1), o.stride(2),
            HEAD_DIM=D, BLOCK_D=block_d, BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=bool(causal),
            WARP_SPEC=bool(WARP_SPEC), HOST_DESC=host, num_warps=warps, num_stages=stages,
        )
        return o
    launch(_attn_fwd, grid,
        q, k, v, o, sm_scale * 1.4426950408889634, S, H, H // Hkv,
        *q.stride(), *k.stride(), *v.stride(), *o.stride(),  # one call per tensor: host time per launch
        HEAD_DIM=D, BLOCK_D=block_d, BLOCK_M=block_m, BLOCK_N=block_n, MASK_D=(block_d != D),
        CAUSAL=bool(causal),
        PRECISION=precision, num_warps=warps, num_stages=stages,
    )
    return o
