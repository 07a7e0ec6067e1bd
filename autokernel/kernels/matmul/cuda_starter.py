"""CUDA C++ matmul starter: C[M,N] = A[M,K] @ B[K,N], fp32 accumulation.

fp16/bf16 run on tensor cores through WMMA: BLOCK_M x BLOCK_N tiles per block of
WARPS_M x WARPS_N warps, each warp a (BLOCK_M/WARPS_M) x (BLOCK_N/WARPS_N) block of 16x16
fragments; operand tiles staged in shared memory (single stage) with 16-byte vector loads when
aligned. B that is a weight's .t() view (K-contiguous) is staged column-major, so nn.Linear
weights are read coalesced. fp32 runs a shared-memory tiled SIMT kernel with true fp32 FMAs
(F32_TILE^2 outputs per block). Any strides; edges bounds-checked.

This is a correct, plain starting point (no cp.async pipelining, no wgmma/TMA): expect a
fraction of cuBLAS; the loop's job is to improve it.
"""

import torch

KERNEL_TYPE = "matmul"
BACKEND = "cuda"

BLOCK_M = 128
BLOCK_N = 128
BLOCK_K = 32
WARPS_M = 2
WARPS_N = 4
F32_TILE = 64
F32_BLOCK_K = 16

SEARCH_SPACE = {
    "BLOCK_M": [64, 128, 256],
    "BLOCK_N": [64, 128, 256],
    "BLOCK_K": [16, 32, 64],
    "WARPS_M": [1, 2, 4],
    "WARPS_N": [2, 4],
    "F32_TILE": [32, 64, 128],
    "F32_BLOCK_K": [8, 16, 32],
}

DETERMINISTIC = True  # one block per output tile, fixed K order

STATIC_SMEM_LIMIT = 48 * 1024  # the kernels use static shared memory


def valid_config(cfg):
    warp_m, warp_n = cfg["BLOCK_M"] // cfg["WARPS_M"], cfg["BLOCK_N"] // cfg["WARPS_N"]
    if cfg["BLOCK_M"] % (16 * cfg["WARPS_M"]) or cfg["BLOCK_N"] % (16 * cfg["WARPS_N"]) or cfg["BLOCK_K"] % 16:
        return False
    pad = 8
    a_tile = cfg["BLOCK_M"] * (cfg["BLOCK_K"] + pad) * 2
    b_tile = max(cfg["BLOCK_N"] * (cfg["BLOCK_K"] + pad), cfg["BLOCK_K"] * (cfg["BLOCK_N"] + pad)) * 2
    stage = cfg["WARPS_M"] * cfg["WARPS_N"] * 16 * 16 * 4
    acc_regs = (warp_m // 16) * (warp_n // 16) * 8  # fp32 accumulator registers per thread
    f32_smem = 2 * cfg["F32_BLOCK_K"] * (cfg["F32_TILE"] + 1) * 4
    return a_tile + b_tile + stage <= STATIC_SMEM_LIMIT and acc_regs <= 128 and f32_smem <= STATIC_SMEM_LIMIT


CUDA_SRC = r"""
// Tiled matmul C[M,N] = A[M,K] @ B[K,N] with fp32 accumulation.
// fp16/bf16: tensor cores through WMMA (16x16x16 fragments); each warp owns a WARP_M x WARP_N
// block of the BLOCK_M x BLOCK_N tile. Tiles are staged in shared memory in the layout the global
// operand is contiguous in (K-contiguous B = nn.Linear weight .t() is stored column-major), so the
// global loads are coalesced 16-byte vectors whenever alignment allows, scalar otherwise.
// fp32: a plain shared-memory tiled SIMT kernel with true fp32 products.
#include <mma.h>
#include <type_traits>

#ifndef BLOCK_M
#define BLOCK_M 128
#endif
#ifndef BLOCK_N
#define BLOCK_N 128
#endif
#ifndef BLOCK_K
#define BLOCK_K 32
#endif
#ifndef WARPS_M
#define WARPS_M 2
#endif
#ifndef WARPS_N
#define WARPS_N 4
#endif
#ifndef F32_TILE
#define F32_TILE 64
#endif
#ifndef F32_BLOCK_K
#define F32_BLOCK_K 16
#endif

using namespace nvcuda;

#define NTHREADS (WARPS_M * WARPS_N * 32)
#define WARP_M (BLOCK_M / WARPS_M)
#define WARP_N (BLOCK_N / WARPS_N)
#define FRAG_M (WARP_M / 16)
#define FRAG_N (WARP_N / 16)
#define PAD 8  // halves: keeps 16-byte rows aligned and staggers shared-memory banks

static_assert(WARP_M % 16 == 0 && WARP_N % 16 == 0 && BLOCK_K % 16 == 0, "tiles must be multiples of 16");

// half/bf16 have no implicit float conversions under torch's nvcc flags (__CUDA_NO_*_CONVERSIONS__).
template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }

// Copy a P x Q tile (Q = the dimension contiguous in global memory) into shared memory with row
// length ld; out-of-range elements become 0 so they add nothing to the dot products.
template <typename T, int P, int Q>
__device__ __forceinline__ void load_tile(T* __restrict__ s, int ld, const T* __restrict__ g,
                                          int64_t stride_p, int64_t stride_q, int p0, int q0,
                                          int p_max, int q_max, bool vec) {
  constexpr int CHUNKS = P * Q / 8;
  for (int c = threadIdx.x; c < CHUNKS; c += NTHREADS) {
    int p = c / (Q / 8), q = (c % (Q / 8)) * 8;
    int gp = p0 + p, gq = q0 + q;
    T* dst = s + p * ld + q;
    if (vec && gp < p_max && gq + 8 <= q_max) {
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(g + gp * stride_p + gq);
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        dst[i] = (gp < p_max && gq + i < q_max) ? g[gp * stride_p + (int64_t)(gq + i) * stride_q] : from_float<T>(0.0f);
      }
    }
  }
}


// A is staged row-major (any A strides work; K-contiguous A gets vector loads). B_K: B is contiguous
// along K (B = W.t() of a row-major weight) and is staged column-major; otherwise row-major.
template <typename T, bool B_K>
__global__ void __launch_bounds__(NTHREADS) mm_wmma_kernel(
    const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ c, int M, int N, int K,
    int64_t sam, int64_t sak, int64_t sbk, int64_t sbn, int64_t scm, int64_t scn, bool vec_a, bool vec_b) {
  constexpr int A_LD = BLOCK_K + PAD;
  constexpr int B_LD = B_K ? BLOCK_K + PAD : BLOCK_N + PAD;
  __shared__ __align__(32) T As[BLOCK_M * A_LD];
  __shared__ __align__(32) T Bs[B_K ? BLOCK_N * B_LD : BLOCK_K * B_LD];
  __shared__ __align__(32) float stage[NTHREADS / 32][16 * 16];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / WARPS_N, wn = warp % WARPS_N;
  const int m0 = blockIdx.y * BLOCK_M, n0 = blockIdx.x * BLOCK_N;

  using BLayout = typename std::conditional<B_K, wmma::col_major, wmma::row_major>::type;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[FRAG_M][FRAG_N];
#pragma unroll
  for (int i = 0; i < FRAG_M; ++i)
#pragma unroll
    for (int j = 0; j < FRAG_N; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

  for (int k0 = 0; k0 < K; k0 += BLOCK_K) {
    load_tile<T, BLOCK_M, BLOCK_K>(As, A_LD, a, sam, sak, m0, k0, M, K, vec_a);
    if (B_K) load_tile<T, BLOCK_N, BLOCK_K>(Bs, B_LD, b, sbn, sbk, n0, k0, N, K, vec_b);
    else     load_tile<T, BLOCK_K, BLOCK_N>(Bs, B_LD, b, sbk, sbn, k0, n0, K, N, vec_b);
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < BLOCK_K; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa[FRAG_M];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, BLayout> fb[FRAG_N];
#pragma unroll
      for (int i = 0; i < FRAG_M; ++i) {
        int r = wm * WARP_M + i * 16;
        wmma::load_matrix_sync(fa[i], As + r * A_LD + kk, A_LD);
      }
#pragma unroll
      for (int j = 0; j < FRAG_N; ++j) {
        int col = wn * WARP_N + j * 16;
        wmma::load_matrix_sync(fb[j], B_K ? Bs + col * B_LD + kk : Bs + kk * B_LD + col, B_LD);
      }
#pragma unroll
      for (int i = 0; i < FRAG_M; ++i)
#pragma unroll
        for (int j = 0; j < FRAG_N; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
    }
    __syncthreads();
  }

  // Epilogue through a per-warp 16x16 staging buffer: bounds-checked, converted, any C strides.
  float* st = stage[warp];
#pragma unroll
  for (int i = 0; i < FRAG_M; ++i) {
#pragma unroll
    for (int j = 0; j < FRAG_N; ++j) {
      wmma::store_matrix_sync(st, acc[i][j], 16, wmma::mem_row_major);
      __syncwarp();
      int r0 = m0 + wm * WARP_M + i * 16, c0 = n0 + wn * WARP_N + j * 16;
      for (int e = lane; e < 256; e += 32) {
        int r = r0 + e / 16, col = c0 + e % 16;
        if (r < M && col < N) c[r * scm + col * scn] = from_float<T>(st[e]);
      }
      __syncwarp();
    }
  }
}

// fp32: F32_TILE x F32_TILE outputs per block, 256 threads, each a 4x4 micro-tile (F32_TILE=64).
#define F32_MICRO (F32_TILE / 16)
__global__ void __launch_bounds__(256) mm_f32_kernel(
    const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int M, int N, int K,
    int64_t sam, int64_t sak, int64_t sbk, int64_t sbn, int64_t scm, int64_t scn) {
  __shared__ float As[F32_BLOCK_K][F32_TILE + 1];
  __shared__ float Bs[F32_BLOCK_K][F32_TILE + 1];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int m0 = blockIdx.y * F32_TILE, n0 = blockIdx.x * F32_TILE;
  float acc[F32_MICRO][F32_MICRO] = {};
  for (int k0 = 0; k0 < K; k0 += F32_BLOCK_K) {
    for (int e = threadIdx.x; e < F32_BLOCK_K * F32_TILE; e += 256) {
      // Walk K fastest when A is K-contiguous so neighbouring threads read neighbouring words.
      int kk = sak == 1 ? e % F32_BLOCK_K : e / F32_TILE;
      int mm = sak == 1 ? e / F32_BLOCK_K : e % F32_TILE;
      int gm = m0 + mm, gk = k0 + kk;
      As[kk][mm] = (gm < M && gk < K) ? a[gm * sam + gk * sak] : 0.0f;
      int bk = sbk == 1 ? e % F32_BLOCK_K : e / F32_TILE;
      int bn = sbk == 1 ? e / F32_BLOCK_K : e % F32_TILE;
      int gn = n0 + bn, gbk = k0 + bk;
      Bs[bk][bn] = (gn < N && gbk < K) ? b[gbk * sbk + gn * sbn] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < F32_BLOCK_K; ++kk) {
      float av[F32_MICRO], bv[F32_MICRO];
#pragma unroll
      for (int i = 0; i < F32_MICRO; ++i) av[i] = As[kk][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < F32_MICRO; ++j) bv[j] = Bs[kk][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < F32_MICRO; ++i)
#pragma unroll
        for (int j = 0; j < F32_MICRO; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < F32_MICRO; ++i)
#pragma unroll
    for (int j = 0; j < F32_MICRO; ++j) {
      int r = m0 + ty + 16 * i, col = n0 + tx + 16 * j;
      if (r < M && col < N) c[r * scm + col * scn] = acc[i][j];
    }
}

static bool vec_ok(const void* p, int64_t stride_outer, int64_t stride_inner) {
  return stride_inner == 1 && stride_outer % 8 == 0 && (reinterpret_cast<uintptr_t>(p) % 16) == 0;
}

template <typename T>
static void launch_wmma(const void* a, const void* b, void* c, int M, int N, int K, int64_t sam, int64_t sak,
                        int64_t sbk, int64_t sbn, int64_t scm, int64_t scn, cudaStream_t stream) {
  dim3 grid((N + BLOCK_N - 1) / BLOCK_N, (M + BLOCK_M - 1) / BLOCK_M);
  const T* A = static_cast<const T*>(a);
  const T* B = static_cast<const T*>(b);
  T* C = static_cast<T*>(c);
  bool b_k = sbk == 1 || (sbn != 1 && sbk <= sbn);
  bool va = vec_ok(a, sam, sak);
  bool vb = b_k ? vec_ok(b, sbn, sbk) : vec_ok(b, sbk, sbn);
  if (b_k) mm_wmma_kernel<T, true><<<grid, NTHREADS, 0, stream>>>(A, B, C, M, N, K, sam, sak, sbk, sbn, scm, scn, va, vb);
  else mm_wmma_kernel<T, false><<<grid, NTHREADS, 0, stream>>>(A, B, C, M, N, K, sam, sak, sbk, sbn, scm, scn, va, vb);
}

// dtype: 0 fp32, 1 fp16, 2 bf16 (autokernel.cuda.build.dtype_code).
extern "C" cudaError_t autokernel_matmul_launch(const void* a, const void* b, void* c, int M, int N, int K,
                                        int64_t sam, int64_t sak, int64_t sbk, int64_t sbn, int64_t scm,
                                        int64_t scn, int dtype, cudaStream_t stream) {
  if (dtype == 0) {
    dim3 grid((N + F32_TILE - 1) / F32_TILE, (M + F32_TILE - 1) / F32_TILE);
    mm_f32_kernel<<<grid, 256, 0, stream>>>(static_cast<const float*>(a), static_cast<const float*>(b),
                                           static_cast<float*>(c), M, N, K, sam, sak, sbk, sbn, scm, scn);
  } else if (dtype == 1) {
    launch_wmma<__half>(a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn, stream);
  } else {
    launch_wmma<__nv_bfloat16>(a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn, stream);
  }
  return cudaGetLastError();
}
"""

CPP_SRC = r"""
extern "C" cudaError_t autokernel_matmul_launch(const void* a, const void* b, void* c, int M, int N, int K,
                                               int64_t sam, int64_t sak, int64_t sbk, int64_t sbn,
                                               int64_t scm, int64_t scn, int dtype, cudaStream_t stream);

torch::Tensor matmul(torch::Tensor a, torch::Tensor b, int64_t dtype_code, int64_t stream) {
  TORCH_CHECK(a.is_cuda() && b.is_cuda(), "matmul: inputs must be CUDA tensors");
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), "matmul: a[M,K] @ b[K,N]");
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "matmul: a and b must share a dtype");
  TORCH_CHECK(a.size(0) <= INT32_MAX && b.size(1) <= INT32_MAX && a.size(1) <= INT32_MAX, "matmul: size too large");
  const int M = a.size(0), K = a.size(1), N = b.size(1);
  auto c = torch::empty({M, N}, a.options());
  if (M == 0 || N == 0) return c;
  cudaError_t err = autokernel_matmul_launch(a.data_ptr(), b.data_ptr(), c.data_ptr(), M, N, K,
                                             a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                             c.stride(0), c.stride(1), (int)dtype_code,
                                             reinterpret_cast<cudaStream_t>(stream));
  TORCH_CHECK(err == cudaSuccess, "matmul launch failed: ", cudaGetErrorString(err));
  return c;
}
"""

FUNCTIONS = ["matmul"]


def _defines():
    return {"BLOCK_M": BLOCK_M, "BLOCK_N": BLOCK_N, "BLOCK_K": BLOCK_K, "WARPS_M": WARPS_M, "WARPS_N": WARPS_N,
            "F32_TILE": F32_TILE, "F32_BLOCK_K": F32_BLOCK_K}


def _module():
    from autokernel.cuda.build import load_extension

    return load_extension("matmul", CUDA_SRC, CPP_SRC, FUNCTIONS, defines=_defines())


def kernel_fn(a, b):
    from autokernel.cuda.build import dtype_code

    return _module().matmul(a, b, dtype_code(a.dtype), torch.cuda.current_stream(a.device).cuda_stream)
