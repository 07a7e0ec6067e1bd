"""torch.triu(A @ B) / torch.tril(A @ B) of square matrices by what it computes (KernelBench L1 14, 15):
for upper-triangular A and B, C[i, j] (j >= i) sums A[i, k] * B[k, j] over i <= k <= j only, a sixth
of the full product's work, and tiles below the diagonal are zeros without a product at all.

That holds only when A and B are triangular, which the problem's inputs are but the judge does
not promise: a check kernel reads the halves of A and B that must be zero and sets a device flag
on any non-zero, and the product kernel reads that flag: set, every tile takes the full K range
(the plain triu(A @ B)). No host synchronisation, so the forward stays capturable as a CUDA graph.
fp32 products are "ieee", as the judge's TF32-off reference.
"""

import torch
import triton
import triton.language as tl

from autokernel.kb.templates.launch import cdiv, launch, next_power_of_2

# ---- generated triangular matmul (autokernel kb): triu / tril of A @ B, triangular A and B ----
TRIMM_BLOCK_M = 64
TRIMM_BLOCK_N = 64
TRIMM_BLOCK_K = 32
TRIMM_WARPS = 4
TRIMM_CHECK_BLOCK = 1024


@triton.jit
def _kb_tri_check_kernel(a_ptr, b_ptr, flag_ptr, N, UPPER: tl.constexpr, BLOCK: tl.constexpr):
    # row r of A and of B: the entries that must be zero (left of the diagonal for UPPER)
    r = tl.program_id(0)
    bad = tl.zeros([BLOCK], tl.int32)
    for c0 in range(0, N, BLOCK):
        c = c0 + tl.arange(0, BLOCK)
        zero = (c < r) if UPPER else ((c > r) & (c < N))
        a = tl.load(a_ptr + r.to(tl.int64) * N + c, mask=zero, other=0.0)
        b = tl.load(b_ptr + r.to(tl.int64) * N + c, mask=zero, other=0.0)
        bad = bad | (a != 0.0).to(tl.int32) | (b != 0.0).to(tl.int32)
    if tl.max(bad, 0) > 0:
        tl.atomic_max(flag_ptr, 1)


@triton.jit
def _kb_trimm_kernel(a_ptr, b_ptr, c_ptr, flag_ptr, N, UPPER: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                     BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    m0 = tl.program_id(0) * BM
    n0 = tl.program_id(1) * BN
    acc = tl.zeros([BM, BN], tl.float32)
    general = tl.load(flag_ptr) != 0
    if UPPER:  # C[i, j] = sum over i <= k <= j: k from the tile's first row to its last column
        k_lo = tl.where(general, 0, m0)
        k_hi = tl.where(general, N, tl.minimum(N, n0 + BN))
        live = general | (n0 + BN > m0)
    else:  # lower: j <= k <= i
        k_lo = tl.where(general, 0, n0)
        k_hi = tl.where(general, N, tl.minimum(N, m0 + BM))
        live = general | (m0 + BM > n0)
    if live:
        k_lo = (k_lo // BK) * BK
        for k0 in range(k_lo, k_hi, BK):
            rk = k0 + tl.arange(0, BK)
            a = tl.load(a_ptr + rm[:, None].to(tl.int64) * N + rk[None, :], mask=(rm < N)[:, None] & (rk < N)[None, :],
                        other=0.0)
            b = tl.load(b_ptr + rk[:, None].to(tl.int64) * N + rn[None, :], mask=(rk < N)[:, None] & (rn < N)[None, :],
                        other=0.0)
            acc += tl.dot(a, b, input_precision="ieee")
    keep = (rn[None, :] >= rm[:, None]) if UPPER else (rn[None, :] <= rm[:, None])
    acc = tl.where(keep, acc, 0.0)
    tl.store(c_ptr + rm[:, None].to(tl.int64) * N + rn[None, :], acc.to(c_ptr.dtype.element_ty),
             mask=(rm < N)[:, None] & (rn < N)[None, :])


def _kb_trimm(a, b, upper=True):
    """torch.triu(a @ b) (torch.tril with upper False) of square fp32 matrices: a sixth of the work
    when a and b are triangular the same way, checked on the device."""
    n = a.shape[0]
    a, b = a.contiguous(), b.contiguous()
    c = torch.empty((n, n), device=a.device, dtype=a.dtype)
    flag = torch.zeros(1, device=a.device, dtype=torch.int32)
    if n == 0:
        return c
    launch(_kb_tri_check_kernel, (n,), a, b, flag, n, UPPER=upper, BLOCK=min(TRIMM_CHECK_BLOCK, next_power_of_2(n)),
           num_warps=4)
    launch(_kb_trimm_kernel, (cdiv(n, TRIMM_BLOCK_M), cdiv(n, TRIMM_BLOCK_N)), a, b, c, flag, n, UPPER=upper,
           BM=TRIMM_BLOCK_M, BN=TRIMM_BLOCK_N, BK=TRIMM_BLOCK_K, num_warps=TRIMM_WARPS)
    return c


SEARCH_SPACE = {"TRIMM_BLOCK_M": [32, 64, 128], "TRIMM_BLOCK_N": [32, 64, 128], "TRIMM_BLOCK_K": [16, 32, 64],
                "TRIMM_WARPS": [2, 4, 8]}


def kernel_fn(a, b, upper=True):
    """The file's entry function: the generated triangular matmul."""
    return _kb_trimm(a, b, upper)
