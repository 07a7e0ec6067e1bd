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
"""

import math

import torch
import triton
import triton.language as tl

try:  # the lean launch path (autokernel/kernels/launcher.py); standalone, the file launches the usual way
    from autokernel.kernels.launcher import cdiv, launch, next_power_of_2
except ImportError:
    cdiv, next_power_of_2 = triton.cdiv, triton.next_power_of_2

    def launch(kernel, grid, *args, **meta):
        return kernel[grid](*args, **meta)

KERNEL_TYPE = "flash_attention"
BACKEND = "triton"

# fp16 / bf16 on Hopper: a 128-row query tile over 8 warps (two warpgroups of wgmma), 64-key
# blocks double/triple buffered.
BLOCK_M = 128
BLOCK_N = 64
NUM_WARPS = 8
NUM_STAGES = 3

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
}

DETERMINISTIC = True  # each output row is reduced by one program in a fixed key order

SMEM_LIMIT = 227 * 1024  # H100/H200 opt-in shared memory per block
MAX_HEAD_DIM = 128  # the largest head dim valid_config budgets shared memory for


def valid_config(cfg):
    # The causal split needs the diagonal band to start on a key-block boundary.
    if cfg["BLOCK_M"] % cfg["BLOCK_N"] or cfg["FP32_BLOCK_M"] % cfg["FP32_BLOCK_N"]:
        return False
    # q tile + pipelined k and v tiles at the largest head dim must fit in shared memory.
    half = (cfg["BLOCK_M"] + 2 * cfg["BLOCK_N"] * max(cfg["NUM_STAGES"], 1)) * MAX_HEAD_DIM * 2
    single = (cfg["FP32_BLOCK_M"] + 2 * cfg["FP32_BLOCK_N"] * max(cfg["FP32_NUM_STAGES"], 1)) * MAX_HEAD_DIM * 4
    # fp32 accumulator (BLOCK_M x D) plus scores (BLOCK_M x BLOCK_N) per thread. ptxas (Triton 3.6,
    # sm_90, D=128): 96 of these -> 184 registers; 128 -> 255 without spills; 192 -> spills.
    regs = cfg["BLOCK_M"] * (MAX_HEAD_DIM + cfg["BLOCK_N"]) // (32 * cfg["NUM_WARPS"])
    return half <= SMEM_LIMIT and single <= SMEM_LIMIT and regs <= 128


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
        l_i = l_i * alpha + tl.sum(p, 1)
        v = _load_tile(v_base + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd,
                       offs_n, seq, offs_d, HEAD_DIM, BOUNDS_MASK, MASK_D)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=PRECISION)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _attn_fwd(Q, K, V, O, qk_scale, seq, heads, group,
              stride_qb, stride_qh, stride_qm, stride_qd,
              stride_kb, stride_kh, stride_kn, stride_kd,
              stride_vb, stride_vh, stride_vn, stride_vd,
              stride_ob, stride_oh, stride_om, stride_od,
              HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
              BLOCK_N: tl.constexpr, MASK_D: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr):
    if CAUSAL:
        # Heaviest query blocks (most keys) first; the light ones fill the tail of the grid.
        start_m = tl.num_programs(0) - 1 - tl.program_id(0)
    else:
        start_m = tl.program_id(0)
    bh = tl.program_id(1)
    off_b = (bh // heads).to(tl.int64)
    off_h = (bh % heads).to(tl.int64)
    off_kv = off_h // group
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


def _config(dtype):
    if dtype == torch.float32:
        return FP32_BLOCK_M, FP32_BLOCK_N, FP32_NUM_WARPS, FP32_NUM_STAGES, FP32_PRECISION
    # 16-bit inputs: tensor cores multiply them exactly; None keeps Triton's default.
    return BLOCK_M, BLOCK_N, NUM_WARPS, NUM_STAGES, None


def kernel_fn(q, k, v, causal, scale=None):
    assert q.dim() == 4 and k.dim() == 4 and v.dim() == 4, "q[B,Hq,S,D], k and v [B,Hkv,S,D]"
    assert q.dtype == k.dtype == v.dtype, "q, k and v must share a dtype"
    B, H, S, D = q.shape
    Hkv = k.shape[1]
    assert k.shape == v.shape == (B, Hkv, S, D), "k and v must be [B,Hkv,S,D] with q's B, S and D"
    assert Hkv >= 1 and H % Hkv == 0, "q heads must be a multiple of kv heads"
    o = torch.empty((B, H, S, D), device=q.device, dtype=q.dtype)
    if o.numel() == 0:
        return o
    sm_scale = (1.0 / math.sqrt(D)) if scale is None else float(scale)
    block_m, block_n, warps, stages, precision = _config(q.dtype)
    block_d = max(16, next_power_of_2(D))
    grid = (cdiv(S, block_m), B * H)
    launch(_attn_fwd, grid,
        q, k, v, o, sm_scale * 1.4426950408889634, S, H, H // Hkv,
        *q.stride(), *k.stride(), *v.stride(), *o.stride(),  # one call per tensor: host time per launch
        HEAD_DIM=D, BLOCK_D=block_d, BLOCK_M=block_m, BLOCK_N=block_n, MASK_D=(block_d != D),
        CAUSAL=bool(causal),
        PRECISION=precision, num_warps=warps, num_stages=stages,
    )
    return o
