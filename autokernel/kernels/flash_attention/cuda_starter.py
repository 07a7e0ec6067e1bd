"""CUDA flash attention starter: FlashAttention-2 style forward of SDPA (causal or not, GQA).

16-bit inputs at head dims 16/32/64/128 run on tensor cores (PTX mma.sync m16n8k16, fp32
accumulation): one warp owns 16 query rows, a block of NUM_WARPS warps owns 16*NUM_WARPS rows of
one (batch, head), and BLOCK_N-key tiles of K and V stream through double-buffered shared memory
(cp.async prefetches the next tile while the current one is multiplied). The S = Q K^T
accumulators are laid out exactly as the A operand of P @ V, so P stays in registers; V's B
operand comes from ldmatrix.trans. The softmax is online in fp32 with exp2 and the scale folded
into log2(e). Causal: key tiles right of the diagonal are never loaded, only tiles that cross
the diagonal or the sequence end are masked, and the heaviest query blocks launch first.

Shared memory is dynamic and opted in with cudaFuncSetAttribute: Q plus two stages of K and V
is 87 KB at D=128 with 4 warps (104 KB with 8), past the 48 KB static limit that kept the earlier
AutoKernel's CUDA attention from compiling.

fp32 inputs (and 16-bit inputs at other head dims, up to 256) take a simple scalar path: four
lanes per query row, true fp32 FMAs, K/V tiles staged as fp32 in shared memory. Exact, not fast.

GQA: q head h reads kv head h // (Hq // Hkv). Rows may be strided (transposed [B,S,H,D] views);
a head-dim stride other than 1, or rows not 16-byte aligned on the tensor-core path, is copied.

Keys longer than queries (a KV cache, Sk >= Sq) and a mask (bool: True = attend, or additive, read
through its broadcast strides) run on both paths: causal is then bottom-right aligned (query i sees
keys <= i + Sk - Sq), every key tile that a mask touches is masked, and a row that sees no key is
zeros, as SDPA returns it. Decode shapes run one block per (batch, head) over the whole cache:
correct, not a split-KV decode (the Triton starter's DECODE path is one).
"""

import math

import torch

from autokernel.cuda.build import dtype_code, load_extension

KERNEL_TYPE = "flash_attention"
BACKEND = "cuda"

NUM_WARPS = 4  # tensor-core path: warps per block; the block owns 16 * NUM_WARPS query rows
BLOCK_N = 64  # keys per shared-memory tile
FP32_ROWS = 64  # scalar path: query rows per block (4 threads each)
FP32_KEYS = 32  # scalar path: keys per shared-memory tile

SEARCH_SPACE = {
    "NUM_WARPS": [2, 4, 8],
    "BLOCK_N": [32, 64, 128],
    "FP32_ROWS": [32, 64, 128],
    "FP32_KEYS": [16, 32, 64],
}

DETERMINISTIC = True  # each output row is reduced by one block in a fixed key order

# Every point of SEARCH_SPACE fits Hopper: Q + 2 x (K + V) at D=128 is at most 174 KB of shared
# memory (8 warps, 128-key tiles), and the S + O + Q fragments at most 160 registers a thread.

CUDA_SRC = r"""
#ifndef NUM_WARPS
#define NUM_WARPS 4
#endif
#ifndef BLOCK_N
#define BLOCK_N 64
#endif
#ifndef FP32_ROWS
#define FP32_ROWS 64
#endif
#ifndef FP32_KEYS
#define FP32_KEYS 32
#endif

// Element strides of q/k/v/o over (batch, head, row); the head-dim stride is 1 (the host makes it so).
struct FaParams {
  const void* q; const void* k; const void* v; void* o;
  long long sqb, sqh, sqm, skb, skh, skn, svb, svh, svn, sob, soh, som;
  int heads, group, seq, head_dim;
  int kv_seq, kv_off;  // keys (>= seq) and kv_seq - seq: query i sees keys <= i + kv_off when causal
  float scale_log2;  // softmax scale * log2(e): every exponential is one exp2
  int causal;
  const void* mask;  // mask_kind 1: bytes (nonzero = attend); 2: additive, q's dtype; 0: none
  long long smb, smh, smm, smn;  // the mask's element strides over (batch, head, query, key)
  int mask_kind;
};

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }

// The score of (row, key) after the mask, in log2 units; -inf where the mask forbids it. `mo` is
// the element offset of the row's mask in this (batch, head).
template <typename T>
__device__ __forceinline__ float apply_mask(const FaParams& p, long long mo, int row, int key, float val) {
  if (p.mask_kind == 0 || row >= p.seq) return val;
  const long long off = mo + (long long)row * p.smm + (long long)key * p.smn;
  if (p.mask_kind == 1) return static_cast<const unsigned char*>(p.mask)[off] ? val : -INFINITY;
  return val + to_f(static_cast<const T*>(p.mask)[off]) * 1.4426950408889634f;
}

// ------------------------------------------------------------------ tensor-core path (fp16 / bf16)

__device__ __forceinline__ uint32_t pack2(float a, float b, __half) {
  __half2 h = __floats2half2_rn(a, b);
  return *reinterpret_cast<uint32_t*>(&h);
}
__device__ __forceinline__ uint32_t pack2(float a, float b, __nv_bfloat16) {
  __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<uint32_t*>(&h);
}

// D[16x8] += A[16x16] * B[16x8], fp32 accumulate (PTX mma.sync m16n8k16).
__device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], const uint32_t b[2], __half) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], const uint32_t b[2], __nv_bfloat16) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// 16-byte global->shared copy that bypasses registers; src_bytes 0 writes zeros (rows past the end).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Copies ROWS x D elements (rows r0.. of a [seq, D] slab with row stride ld_g) into smem rows of LD.
template <typename T, int ROWS, int D, int LD, int THREADS>
__device__ __forceinline__ void load_tile(T* smem, const T* g, long long ld_g, int r0, int seq, int tid) {
  constexpr int CHUNKS = D / 8;  // 16-byte pieces per row
  for (int c = tid; c < ROWS * CHUNKS; c += THREADS) {
    int r = c / CHUNKS, col = (c % CHUNKS) * 8;
    int row = r0 + r;
    bool ok = row < seq;
    cp_async16(smem + r * LD + col, g + (long long)(ok ? row : 0) * ld_g + col, ok);
  }
}

// One warp owns 16 query rows; a block of WARPS warps owns 16*WARPS rows of one (batch, head) and
// streams BN-key tiles of K and V through double-buffered shared memory (cp.async prefetches tile
// j+1 while tile j is multiplied). S = Q K^T and O += P V run on mma.sync; the S accumulators are
// laid out exactly like the A operand of the P V product, so P never leaves registers. Shared
// memory is dynamic (Q + 2 x (K + V) is 104 KB at D=128, far past the 48 KB static limit).
template <typename T, int D, int WARPS, int BN>
__global__ void __launch_bounds__(WARPS * 32) fa2_fwd_mma_kernel(FaParams p) {
  constexpr int BM = 16 * WARPS;
  constexpr int THREADS = WARPS * 32;
  constexpr int LD = D + 8;  // padded rows: conflict-free fragment loads, rows stay 16-byte aligned
  constexpr int NT = BN / 8;  // 8-key column tiles of S
  constexpr int DT = D / 8;   // 8-wide column tiles of O
  constexpr int KC = D / 16;  // 16-deep steps of Q K^T
  extern __shared__ __align__(16) unsigned char fa_smem[];
  T* Qs = reinterpret_cast<T*>(fa_smem);
  T* Ks = Qs + BM * LD;
  T* Vs = Ks + 2 * BN * LD;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, t = lane & 3;
  // Causal: heaviest query blocks first, so the short ones fill the tail of the grid.
  const int mblk = p.causal ? (gridDim.x - 1 - blockIdx.x) : blockIdx.x;
  const int b = blockIdx.y / p.heads, h = blockIdx.y % p.heads, kvh = h / p.group;
  const T* qg = static_cast<const T*>(p.q) + b * p.sqb + h * p.sqh;
  const T* kg = static_cast<const T*>(p.k) + b * p.skb + kvh * p.skh;
  const T* vg = static_cast<const T*>(p.v) + b * p.svb + kvh * p.svh;
  T* og = static_cast<T*>(p.o) + b * p.sob + h * p.soh;
  const long long mo = b * p.smb + h * p.smh;
  const int m0 = mblk * BM;
  // keys right of the (bottom-right aligned) diagonal never load
  const int n_end = p.causal ? min(p.kv_seq, m0 + BM + p.kv_off) : p.kv_seq;
  const int num_n = (n_end + BN - 1) / BN;

  load_tile<T, BM, D, LD, THREADS>(Qs, qg, p.sqm, m0, p.seq, tid);
  load_tile<T, BN, D, LD, THREADS>(Ks, kg, p.skn, 0, p.kv_seq, tid);
  load_tile<T, BN, D, LD, THREADS>(Vs, vg, p.svn, 0, p.kv_seq, tid);
  cp_async_commit();

  float o[DT][4];
  #pragma unroll
  for (int i = 0; i < DT; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m_r[2] = {-INFINITY, -INFINITY}, l_r[2] = {0.f, 0.f};  // rows g and g + 8 of this warp
  uint32_t qf[KC][4];
  const int row0 = m0 + warp * 16 + g, row1 = row0 + 8;

  for (int j = 0; j < num_n; ++j) {
    if (j + 1 < num_n) {
      const int st = (j + 1) & 1;
      load_tile<T, BN, D, LD, THREADS>(Ks + st * BN * LD, kg, p.skn, (j + 1) * BN, p.kv_seq, tid);
      load_tile<T, BN, D, LD, THREADS>(Vs + st * BN * LD, vg, p.svn, (j + 1) * BN, p.kv_seq, tid);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (j == 0) {
      const T* qw = Qs + (warp * 16 + g) * LD + 2 * t;
      #pragma unroll
      for (int kc = 0; kc < KC; ++kc) {
        qf[kc][0] = *reinterpret_cast<const uint32_t*>(qw + kc * 16);
        qf[kc][1] = *reinterpret_cast<const uint32_t*>(qw + 8 * LD + kc * 16);
        qf[kc][2] = *reinterpret_cast<const uint32_t*>(qw + kc * 16 + 8);
        qf[kc][3] = *reinterpret_cast<const uint32_t*>(qw + 8 * LD + kc * 16 + 8);
      }
    }
    const T* Kt = Ks + (j & 1) * BN * LD;
    const T* Vt = Vs + (j & 1) * BN * LD;

    float s[NT][4];
    #pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
      const T* kr = Kt + (nt * 8 + g) * LD + 2 * t;
      #pragma unroll
      for (int kc = 0; kc < KC; ++kc) {
        uint32_t bf[2] = {*reinterpret_cast<const uint32_t*>(kr + kc * 16),
                          *reinterpret_cast<const uint32_t*>(kr + kc * 16 + 8)};
        mma16816(s[nt], qf[kc], bf, T());
      }
    }

    const int n0 = j * BN;
    const bool need_mask = (n0 + BN > p.kv_seq) || (p.causal && n0 + BN - 1 > m0 + p.kv_off) || p.mask_kind;
    float mx[2] = {-INFINITY, -INFINITY};
    #pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      #pragma unroll
      for (int e = 0; e < 4; ++e) {
        float val = s[nt][e] * p.scale_log2;
        if (need_mask) {
          const int col = n0 + nt * 8 + 2 * t + (e & 1);
          const int row = e < 2 ? row0 : row1;
          if (col >= p.kv_seq || (p.causal && col > row + p.kv_off)) val = -INFINITY;
          else val = apply_mask<T>(p, mo, row, col, val);
        }
        s[nt][e] = val;
        mx[e >> 1] = fmaxf(mx[e >> 1], val);
      }
    }
    float alpha[2], m_use[2];
    #pragma unroll
    for (int r = 0; r < 2; ++r) {
      // The four lanes of a quad hold one row between them.
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffff, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffff, mx[r], 2));
      const float m_new = fmaxf(m_r[r], mx[r]);
      m_use[r] = m_new == -INFINITY ? 0.f : m_new;  // a row with nothing visible yet: no inf - inf
      alpha[r] = exp2f(m_r[r] - m_use[r]);
      m_r[r] = m_new;
      l_r[r] *= alpha[r];
    }
    #pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      #pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[nt][e] = exp2f(s[nt][e] - m_use[e >> 1]);
        l_r[e >> 1] += s[nt][e];  // per-lane partial sums; the quad is summed once at the end
      }
    }
    #pragma unroll
    for (int dt = 0; dt < DT; ++dt) {
      o[dt][0] *= alpha[0]; o[dt][1] *= alpha[0];
      o[dt][2] *= alpha[1]; o[dt][3] *= alpha[1];
    }
    #pragma unroll
    for (int kc = 0; kc < BN / 16; ++kc) {
      uint32_t pf[4] = {pack2(s[2 * kc][0], s[2 * kc][1], T()), pack2(s[2 * kc][2], s[2 * kc][3], T()),
                        pack2(s[2 * kc + 1][0], s[2 * kc + 1][1], T()), pack2(s[2 * kc + 1][2], s[2 * kc + 1][3], T())};
      // V is [key][d] in smem; ldmatrix.trans hands each lane the (2 keys, 1 d) pairs of the B operand.
      const T* vrow = Vt + (kc * 16 + (lane & 15)) * LD;
      #pragma unroll
      for (int dt = 0; dt < DT; ++dt) {
        uint32_t bf[2];
        unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(vrow + dt * 8));
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                     : "=r"(bf[0]), "=r"(bf[1]) : "r"(addr));
        mma16816(o[dt], pf, bf, T());
      }
    }
    __syncthreads();  // every warp is done with this stage before it is refilled
  }

  #pragma unroll
  for (int r = 0; r < 2; ++r) {
    l_r[r] += __shfl_xor_sync(0xffffffff, l_r[r], 1);
    l_r[r] += __shfl_xor_sync(0xffffffff, l_r[r], 2);
  }
  // a row that saw no key (all masked) has o = 0 and l = 0: zeros, as SDPA returns it
  const float inv0 = l_r[0] > 0.f ? 1.f / l_r[0] : 0.f, inv1 = l_r[1] > 0.f ? 1.f / l_r[1] : 0.f;
  #pragma unroll
  for (int dt = 0; dt < DT; ++dt) {
    const int col = dt * 8 + 2 * t;
    if (row0 < p.seq)
      *reinterpret_cast<uint32_t*>(og + row0 * p.som + col) = pack2(o[dt][0] * inv0, o[dt][1] * inv0, T());
    if (row1 < p.seq)
      *reinterpret_cast<uint32_t*>(og + row1 * p.som + col) = pack2(o[dt][2] * inv1, o[dt][3] * inv1, T());
  }
}

// ------------------------------------------------------------------ scalar path (fp32, any head dim)

template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// Four lanes per query row, each holding every 4th element of q and of the fp32 accumulator
// (DPT of them); K and V tiles of KEYS keys are staged in shared memory as fp32. One key at a
// time, online: true fp32 FMAs, exact to fp32 and simple, not fast (the tensor-core path serves
// fp16/bf16). The key loop stays rolled so the nine instantiations compile quickly.
template <typename T, int DPT>
__global__ void __launch_bounds__(FP32_ROWS * 4) fa_fwd_fp32_kernel(FaParams p) {
  constexpr int ROWS = FP32_ROWS, KEYS = FP32_KEYS, THREADS = ROWS * 4;
  extern __shared__ __align__(16) unsigned char fa_smem[];
  const int D = p.head_dim;
  float* Ks = reinterpret_cast<float*>(fa_smem);
  float* Vs = Ks + KEYS * D;
  const int tid = threadIdx.x, r = tid >> 2, t = tid & 3;
  const int mblk = p.causal ? (gridDim.x - 1 - blockIdx.x) : blockIdx.x;
  const int b = blockIdx.y / p.heads, h = blockIdx.y % p.heads, kvh = h / p.group;
  const T* qg = static_cast<const T*>(p.q) + b * p.sqb + h * p.sqh;
  const T* kg = static_cast<const T*>(p.k) + b * p.skb + kvh * p.skh;
  const T* vg = static_cast<const T*>(p.v) + b * p.svb + kvh * p.svh;
  T* og = static_cast<T*>(p.o) + b * p.sob + h * p.soh;
  const long long mo = b * p.smb + h * p.smh;
  const int m0 = mblk * ROWS, row = m0 + r;
  const int n_end = p.causal ? min(p.kv_seq, m0 + ROWS + p.kv_off) : p.kv_seq;

  float q[DPT], acc[DPT];
#pragma unroll
  for (int i = 0; i < DPT; ++i) {
    const int d = t + 4 * i;
    q[i] = (row < p.seq && d < D) ? to_f(qg[row * p.sqm + d]) : 0.f;
    acc[i] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  for (int n0 = 0; n0 < n_end; n0 += KEYS) {
    __syncthreads();
    for (int c = tid; c < KEYS * D; c += THREADS) {
      const int key = n0 + c / D, d = c % D;
      const bool ok = key < p.kv_seq;
      Ks[c] = ok ? to_f(kg[key * p.skn + d]) : 0.f;
      Vs[c] = ok ? to_f(vg[key * p.svn + d]) : 0.f;
    }
    __syncthreads();
    const int keys = min(KEYS, n_end - n0);
#pragma unroll 1
    for (int j = 0; j < keys; ++j) {
      const float* kr = Ks + j * D + t;
      float part = 0.f;
#pragma unroll
      for (int i = 0; i < DPT; ++i)
        if (t + 4 * i < D) part = fmaf(q[i], kr[4 * i], part);
      // The four lanes of a row sum their pieces (they are adjacent lanes of one warp).
      part += __shfl_xor_sync(0xffffffff, part, 1);
      part += __shfl_xor_sync(0xffffffff, part, 2);
      const int key = n0 + j;
      if (p.causal && key > row + p.kv_off) continue;  // lane-uniform within the quad: shuffles done
      const float sv = apply_mask<T>(p, mo, row, key, part * p.scale_log2);
      if (sv == -INFINITY) continue;  // masked: m and l stay as they are (no -inf - -inf)
      const float m_new = fmaxf(m, sv);
      const float alpha = exp2f(m - m_new), pj = exp2f(sv - m_new);
      l = l * alpha + pj;
      const float* vr = Vs + j * D + t;
#pragma unroll
      for (int i = 0; i < DPT; ++i)
        if (t + 4 * i < D) acc[i] = fmaf(pj, vr[4 * i], acc[i] * alpha);
      m = m_new;
    }
  }
  if (row < p.seq) {
    const float inv = l > 0.f ? 1.f / l : 0.f;  // no key seen: zeros, as SDPA returns it
#pragma unroll
    for (int i = 0; i < DPT; ++i) {
      const int d = t + 4 * i;
      if (d < D) og[row * p.som + d] = from_f<T>(acc[i] * inv);
    }
  }
}

// ------------------------------------------------------------------ launcher (no torch)

template <typename K>
static cudaError_t set_smem(K kernel, size_t bytes) {
  if (bytes <= 48 * 1024) return cudaSuccess;
  // Past the 48 KB static default: opt in to the large dynamic carve-out (227 KB on Hopper).
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

template <typename T, int D>
static cudaError_t launch_mma(const FaParams& p, int batch, cudaStream_t stream) {
  constexpr int BM = 16 * NUM_WARPS;
  const size_t smem = (size_t)(BM + 4 * BLOCK_N) * (D + 8) * sizeof(T);
  auto kernel = fa2_fwd_mma_kernel<T, D, NUM_WARPS, BLOCK_N>;
  cudaError_t err = set_smem(kernel, smem);
  if (err != cudaSuccess) return err;
  dim3 grid((p.seq + BM - 1) / BM, batch * p.heads);
  kernel<<<grid, NUM_WARPS * 32, smem, stream>>>(p);
  return cudaGetLastError();
}

template <typename T, int DPT>
static cudaError_t launch_fp32(const FaParams& p, int batch, cudaStream_t stream) {
  const size_t smem = (size_t)2 * FP32_KEYS * p.head_dim * sizeof(float);
  auto kernel = fa_fwd_fp32_kernel<T, DPT>;
  cudaError_t err = set_smem(kernel, smem);
  if (err != cudaSuccess) return err;
  dim3 grid((p.seq + FP32_ROWS - 1) / FP32_ROWS, batch * p.heads);
  kernel<<<grid, FP32_ROWS * 4, smem, stream>>>(p);
  return cudaGetLastError();
}

template <typename T>
static cudaError_t launch_simple(const FaParams& p, int batch, cudaStream_t stream) {
  const int D = p.head_dim;
  if (D <= 32) return launch_fp32<T, 8>(p, batch, stream);
  if (D <= 128) return launch_fp32<T, 32>(p, batch, stream);
  return launch_fp32<T, 64>(p, batch, stream);
}

template <typename T>
static cudaError_t launch_tc(const FaParams& p, int batch, cudaStream_t stream) {
  switch (p.head_dim) {
    case 16: return launch_mma<T, 16>(p, batch, stream);
    case 32: return launch_mma<T, 32>(p, batch, stream);
    case 64: return launch_mma<T, 64>(p, batch, stream);
    case 128: return launch_mma<T, 128>(p, batch, stream);
    default: return launch_simple<T>(p, batch, stream);
  }
}

// strides: 12 element strides, (batch, head, row) of q, k, v, o; the head-dim stride is 1.
cudaError_t fa_launch(const void* q, const void* k, const void* v, void* o, const int64_t* strides,
                      int batch, int heads, int kv_heads, int seq, int kv_seq, int head_dim, float scale,
                      int causal, const void* mask, const int64_t* mask_strides, int mask_kind,
                      int tensor_cores, int dtype, cudaStream_t stream) {
  if (batch == 0 || heads == 0 || seq == 0 || head_dim == 0) return cudaSuccess;
  if (head_dim > 256 || kv_heads < 1 || heads % kv_heads || (long long)batch * heads > 65535 || kv_seq < seq)
    return cudaErrorInvalidValue;
  FaParams p;
  p.q = q; p.k = k; p.v = v; p.o = o;
  p.sqb = strides[0]; p.sqh = strides[1]; p.sqm = strides[2];
  p.skb = strides[3]; p.skh = strides[4]; p.skn = strides[5];
  p.svb = strides[6]; p.svh = strides[7]; p.svn = strides[8];
  p.sob = strides[9]; p.soh = strides[10]; p.som = strides[11];
  p.heads = heads; p.group = heads / kv_heads; p.seq = seq; p.head_dim = head_dim;
  p.kv_seq = kv_seq; p.kv_off = kv_seq - seq;
  p.scale_log2 = scale * 1.4426950408889634f;
  p.causal = causal;
  p.mask = mask; p.mask_kind = mask_kind;
  p.smb = mask_strides[0]; p.smh = mask_strides[1]; p.smm = mask_strides[2]; p.smn = mask_strides[3];
  switch (dtype) {
    case 0: return launch_simple<float>(p, batch, stream);
    case 1: return tensor_cores ? launch_tc<__half>(p, batch, stream) : launch_simple<__half>(p, batch, stream);
    case 2: return tensor_cores ? launch_tc<__nv_bfloat16>(p, batch, stream)
                                : launch_simple<__nv_bfloat16>(p, batch, stream);
    default: return cudaErrorInvalidValue;
  }
}
"""

CPP_SRC = r"""
cudaError_t fa_launch(const void* q, const void* k, const void* v, void* o, const int64_t* strides,
                      int batch, int heads, int kv_heads, int seq, int kv_seq, int head_dim, float scale,
                      int causal, const void* mask, const int64_t* mask_strides, int mask_kind,
                      int tensor_cores, int dtype, cudaStream_t stream);

static bool rows_16b_aligned(const torch::Tensor& x) {
  // cp.async moves 16-byte pieces: every row must start on a 16-byte boundary.
  const int64_t e = x.element_size();
  return reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0 && (x.stride(0) * e) % 16 == 0 &&
         (x.stride(1) * e) % 16 == 0 && (x.stride(2) * e) % 16 == 0;
}

// mask: [B, H, Sq, Sk] (broadcast strides allowed), uint8 (mask_kind 1) or q's dtype (2); any
// tensor with mask_kind 0.
torch::Tensor fa_forward(torch::Tensor q, torch::Tensor k, torch::Tensor v, bool causal, double scale,
                         torch::Tensor mask, int64_t mask_kind, int64_t dtype, int64_t stream) {
  TORCH_CHECK(q.is_cuda() && k.is_cuda() && v.is_cuda(), "flash_attention: q, k, v must be CUDA tensors");
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "flash_attention: q[B,Hq,S,D], k and v [B,Hkv,S,D]");
  TORCH_CHECK(q.scalar_type() == k.scalar_type() && q.scalar_type() == v.scalar_type(),
              "flash_attention: q, k and v must share a dtype");
  const int64_t B = q.size(0), H = q.size(1), S = q.size(2), D = q.size(3), Hkv = k.size(1), Sk = k.size(2);
  TORCH_CHECK(k.sizes() == v.sizes() && k.size(0) == B && Sk >= S && k.size(3) == D,
              "flash_attention: k and v must be [B,Hkv,Sk,D] with q's B and D and Sk >= S");
  TORCH_CHECK(mask_kind == 0 || (mask.dim() == 4 && mask.size(0) == B && mask.size(1) == H && mask.size(2) == S &&
                                 mask.size(3) == Sk && mask.is_cuda()),
              "flash_attention: the mask must be broadcast to [B,H,Sq,Sk] on the GPU");
  TORCH_CHECK(Hkv >= 1 && H % Hkv == 0, "flash_attention: q heads must be a multiple of kv heads");
  TORCH_CHECK(D <= 256, "flash_attention: head dims up to 256");
  TORCH_CHECK(S < (1LL << 31) && B * H <= 65535, "flash_attention: sequence or batch*heads too large");
  // Tensor cores for 16-bit inputs at the head dims the mma path is instantiated for.
  const bool tc = dtype != 0 && (D == 16 || D == 32 || D == 64 || D == 128);
  // The kernels read rows with a unit head-dim stride (16-byte aligned rows on the tensor-core
  // path); any other layout is copied once.
  auto prep = [&](const torch::Tensor& x) {
    return (x.stride(3) != 1 || (tc && !rows_16b_aligned(x))) ? x.contiguous() : x;
  };
  q = prep(q); k = prep(k); v = prep(v);
  auto o = torch::empty({B, H, S, D}, q.options());
  const int64_t strides[12] = {q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
                               v.stride(0), v.stride(1), v.stride(2), o.stride(0), o.stride(1), o.stride(2)};
  const int64_t mask_strides[4] = {mask_kind ? mask.stride(0) : 0, mask_kind ? mask.stride(1) : 0,
                                   mask_kind ? mask.stride(2) : 0, mask_kind ? mask.stride(3) : 0};
  cudaError_t err = fa_launch(q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), strides, (int)B, (int)H,
                              (int)Hkv, (int)S, (int)Sk, (int)D, (float)scale, causal ? 1 : 0,
                              mask_kind ? mask.data_ptr() : nullptr, mask_strides, (int)mask_kind, tc ? 1 : 0,
                              (int)dtype, reinterpret_cast<cudaStream_t>(stream));
  TORCH_CHECK(err == cudaSuccess, "flash_attention kernel launch failed: ", cudaGetErrorString(err));
  return o;
}
"""

FUNCTIONS = ["fa_forward"]
DEFINES = {"NUM_WARPS": NUM_WARPS, "BLOCK_N": BLOCK_N, "FP32_ROWS": FP32_ROWS, "FP32_KEYS": FP32_KEYS}


def _mask_arg(mask, q, k):
    """(mask broadcast to [B, H, Sq, Sk] by its strides, kind): bytes for a bool mask, q's dtype
    for an additive one."""
    if mask is None:
        return q, 0
    if mask.dim() < 4:
        mask = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))
    shape = (q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    if mask.dtype == torch.bool:
        return mask.view(torch.uint8).expand(shape), 1
    return mask.to(q.dtype).expand(shape), 2


def kernel_fn(q, k, v, causal, scale=None, mask=None):
    mod = load_extension("flash_attention", CUDA_SRC, CPP_SRC, FUNCTIONS, defines=DEFINES)
    sm_scale = (1.0 / math.sqrt(q.shape[-1])) if scale is None else float(scale)
    m, kind = _mask_arg(mask, q, k)
    with torch.cuda.device(q.device):
        return mod.fa_forward(q, k, v, bool(causal), sm_scale, m, kind, dtype_code(q.dtype),
                              torch.cuda.current_stream(q.device).cuda_stream)
