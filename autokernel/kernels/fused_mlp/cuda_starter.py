"""CUDA C++ SwiGLU MLP starter: out = (silu(x @ Wg^T) * (x @ Wu^T)) @ Wd^T, two launches.

1. gate/up: a "gated" tiled matmul; each block stages one x tile per K step and multiplies it by
   both weight tiles (two accumulators), then applies silu(g) * u in fp32 in the epilogue and
   writes h once in the input dtype (as LlamaMLP's h is).
2. down: the plain tiled matmul h @ Wd^T.
fp16/bf16 use tensor cores through WMMA (row-major weights read as W^T are K-contiguous and are
staged column-major, with 16-byte vector loads when aligned); fp32 uses a shared-memory tiled
SIMT kernel with true fp32 FMAs. Any strides; edges bounds-checked.

A correct, plain starting point (single-stage shared memory, no cp.async/wgmma/TMA): expect a
fraction of cuBLAS; the loop's job is to improve it.
"""

import torch

KERNEL_TYPE = "fused_mlp"
BACKEND = "cuda"

GU_BLOCK_M = 128
GU_BLOCK_N = 64
DOWN_BLOCK_M = 128
DOWN_BLOCK_N = 128
BLOCK_K = 32
WARPS_M = 2
WARPS_N = 4
F32_TILE = 64
F32_BLOCK_K = 16

SEARCH_SPACE = {
    "GU_BLOCK_M": [64, 128, 256],
    "GU_BLOCK_N": [64, 128],
    "DOWN_BLOCK_M": [64, 128, 256],
    "DOWN_BLOCK_N": [64, 128, 256],
    "BLOCK_K": [16, 32, 64],
    "WARPS_M": [1, 2, 4],
    "WARPS_N": [2, 4],
    "F32_TILE": [32, 64, 128],
    "F32_BLOCK_K": [8, 16, 32],
}

DETERMINISTIC = True  # one block per output tile, fixed K order, no atomics

STATIC_SMEM_LIMIT = 48 * 1024  # the kernels use static shared memory


def _tile_ok(bm, bn, bk, wm, wn, gated):
    if bm % (16 * wm) or bn % (16 * wn) or bk % 16:
        return False
    pad = 8
    a_tile = bm * (bk + pad) * 2
    b_tile = max(bn * (bk + pad), bk * (bn + pad)) * 2 * (2 if gated else 1)
    stage = wm * wn * 2 * 16 * 16 * 4
    acc_regs = (bm // wm // 16) * (bn // wn // 16) * 8 * (2 if gated else 1)
    return a_tile + b_tile + stage <= STATIC_SMEM_LIMIT and acc_regs <= 128


def valid_config(cfg):
    f32_smem = 3 * cfg["F32_BLOCK_K"] * (cfg["F32_TILE"] + 1) * 4
    return (_tile_ok(cfg["GU_BLOCK_M"], cfg["GU_BLOCK_N"], cfg["BLOCK_K"], cfg["WARPS_M"], cfg["WARPS_N"], True)
            and _tile_ok(cfg["DOWN_BLOCK_M"], cfg["DOWN_BLOCK_N"], cfg["BLOCK_K"], cfg["WARPS_M"], cfg["WARPS_N"],
                         False)
            and f32_smem <= STATIC_SMEM_LIMIT)


CUDA_SRC = r"""
// SwiGLU MLP in two launches: h = silu(x @ Wg^T) * (x @ Wu^T), then out = h @ Wd^T.
// The first launch is a "gated" tiled matmul: one x tile per K step feeds both the gate and the
// up products (two accumulators) and silu(g) * u is applied in fp32 in the epilogue, so h is
// written once, in the input dtype (as LlamaMLP's h is). The second is the plain tiled matmul.
// fp16/bf16 use tensor cores through WMMA; tiles are staged in shared memory in the layout the
// global operand is contiguous in (a row-major weight W read as W^T is K-contiguous), with
// 16-byte vector loads when aligned. fp32 uses a shared-memory tiled SIMT path (true fp32).
#include <mma.h>
#include <type_traits>

#ifndef GU_BLOCK_M
#define GU_BLOCK_M 128
#endif
#ifndef GU_BLOCK_N
#define GU_BLOCK_N 64
#endif
#ifndef DOWN_BLOCK_M
#define DOWN_BLOCK_M 128
#endif
#ifndef DOWN_BLOCK_N
#define DOWN_BLOCK_N 128
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
#define PAD 8  // halves: keeps 16-byte rows aligned and staggers shared-memory banks

// half/bf16 have no implicit float conversions under torch's nvcc flags (__CUDA_NO_*_CONVERSIONS__).
template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }

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


// silu(g) * u in fp32: for g << 0, expf(-g) overflows to inf and g / inf is -0, never NaN.
__device__ __forceinline__ float swiglu(float g, float u) { return g / (1.0f + expf(-g)) * u; }

struct Operands {
  const void* a; const void* b; const void* b2; void* c;
  int M, N, K;
  int64_t sam, sak, sbk, sbn, sb2k, sb2n, scm, scn;
};

// C = A @ B, or when GATED C = silu(A @ B) * (A @ B2). A is staged row-major (any strides work;
// K-contiguous A gets vector loads); B_K: B (and B2) contiguous along K, staged column-major.
template <typename T, int BM, int BN, bool B_K, bool GATED>
__global__ void __launch_bounds__(NTHREADS) mlp_wmma_kernel(Operands o, bool vec_a, bool vec_b) {
  constexpr int WARP_M = BM / WARPS_M, WARP_N = BN / WARPS_N;
  constexpr int FRAG_M = WARP_M / 16, FRAG_N = WARP_N / 16;
  static_assert(WARP_M % 16 == 0 && WARP_N % 16 == 0 && BLOCK_K % 16 == 0, "tiles must be multiples of 16");
  constexpr int A_LD = BLOCK_K + PAD;
  constexpr int B_LD = B_K ? BLOCK_K + PAD : BN + PAD;
  constexpr int B_SIZE = B_K ? BN * B_LD : BLOCK_K * B_LD;
  __shared__ __align__(32) T As[BM * A_LD];
  __shared__ __align__(32) T Bs[GATED ? 2 * B_SIZE : B_SIZE];
  __shared__ __align__(32) float stage[NTHREADS / 32][2][16 * 16];

  const T* a = static_cast<const T*>(o.a);
  const T* b = static_cast<const T*>(o.b);
  const T* b2 = static_cast<const T*>(o.b2);
  T* c = static_cast<T*>(o.c);
  const int M = o.M, N = o.N, K = o.K;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / WARPS_N, wn = warp % WARPS_N;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;

  using BLayout = typename std::conditional<B_K, wmma::col_major, wmma::row_major>::type;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[FRAG_M][FRAG_N];
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc2[GATED ? FRAG_M : 1][GATED ? FRAG_N : 1];
#pragma unroll
  for (int i = 0; i < FRAG_M; ++i)
#pragma unroll
    for (int j = 0; j < FRAG_N; ++j) {
      wmma::fill_fragment(acc[i][j], 0.0f);
      if (GATED) wmma::fill_fragment(acc2[GATED ? i : 0][GATED ? j : 0], 0.0f);
    }

  for (int k0 = 0; k0 < K; k0 += BLOCK_K) {
    load_tile<T, BM, BLOCK_K>(As, A_LD, a, o.sam, o.sak, m0, k0, M, K, vec_a);
    if (B_K) load_tile<T, BN, BLOCK_K>(Bs, B_LD, b, o.sbn, o.sbk, n0, k0, N, K, vec_b);
    else     load_tile<T, BLOCK_K, BN>(Bs, B_LD, b, o.sbk, o.sbn, k0, n0, K, N, vec_b);
    if (GATED) {
      if (B_K) load_tile<T, BN, BLOCK_K>(Bs + B_SIZE, B_LD, b2, o.sb2n, o.sb2k, n0, k0, N, K, vec_b);
      else     load_tile<T, BLOCK_K, BN>(Bs + B_SIZE, B_LD, b2, o.sb2k, o.sb2n, k0, n0, K, N, vec_b);
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < BLOCK_K; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa[FRAG_M];
#pragma unroll
      for (int i = 0; i < FRAG_M; ++i) {
        int r = wm * WARP_M + i * 16;
        wmma::load_matrix_sync(fa[i], As + r * A_LD + kk, A_LD);
      }
#pragma unroll
      for (int j = 0; j < FRAG_N; ++j) {
        int col = wn * WARP_N + j * 16;
        int off = B_K ? col * B_LD + kk : kk * B_LD + col;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, BLayout> fb;
        wmma::load_matrix_sync(fb, Bs + off, B_LD);
#pragma unroll
        for (int i = 0; i < FRAG_M; ++i) wmma::mma_sync(acc[i][j], fa[i], fb, acc[i][j]);
        if (GATED) {
          wmma::load_matrix_sync(fb, Bs + B_SIZE + off, B_LD);
#pragma unroll
          for (int i = 0; i < FRAG_M; ++i)
            wmma::mma_sync(acc2[GATED ? i : 0][GATED ? j : 0], fa[i], fb, acc2[GATED ? i : 0][GATED ? j : 0]);
        }
      }
    }
    __syncthreads();
  }

  // Epilogue through a per-warp staging buffer: silu*mul when gated, bounds, any C strides.
  float* st = stage[warp][0];
  float* st2 = stage[warp][1];
#pragma unroll
  for (int i = 0; i < FRAG_M; ++i) {
#pragma unroll
    for (int j = 0; j < FRAG_N; ++j) {
      wmma::store_matrix_sync(st, acc[i][j], 16, wmma::mem_row_major);
      if (GATED) wmma::store_matrix_sync(st2, acc2[GATED ? i : 0][GATED ? j : 0], 16, wmma::mem_row_major);
      __syncwarp();
      int r0 = m0 + wm * WARP_M + i * 16, c0 = n0 + wn * WARP_N + j * 16;
      for (int e = lane; e < 256; e += 32) {
        int r = r0 + e / 16, col = c0 + e % 16;
        if (r < M && col < N) c[r * o.scm + col * o.scn] = from_float<T>(GATED ? swiglu(st[e], st2[e]) : st[e]);
      }
      __syncwarp();
    }
  }
}

// fp32: F32_TILE x F32_TILE outputs per block, 256 threads, each an (F32_TILE/16)^2 micro-tile.
template <bool GATED>
__global__ void __launch_bounds__(256) mlp_f32_kernel(Operands o) {
  constexpr int MICRO = F32_TILE / 16;
  __shared__ float As[F32_BLOCK_K][F32_TILE + 1];
  __shared__ float Bs[GATED ? 2 : 1][F32_BLOCK_K][F32_TILE + 1];
  const float* a = static_cast<const float*>(o.a);
  const float* b = static_cast<const float*>(o.b);
  const float* b2 = static_cast<const float*>(o.b2);
  float* c = static_cast<float*>(o.c);
  const int M = o.M, N = o.N, K = o.K;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int m0 = blockIdx.y * F32_TILE, n0 = blockIdx.x * F32_TILE;
  float acc[MICRO][MICRO] = {};
  float acc2[GATED ? MICRO : 1][GATED ? MICRO : 1] = {};
  for (int k0 = 0; k0 < K; k0 += F32_BLOCK_K) {
    for (int e = threadIdx.x; e < F32_BLOCK_K * F32_TILE; e += 256) {
      // Walk K fastest for K-contiguous operands so neighbouring threads read neighbouring words.
      int kk = o.sak == 1 ? e % F32_BLOCK_K : e / F32_TILE;
      int mm = o.sak == 1 ? e / F32_BLOCK_K : e % F32_TILE;
      As[kk][mm] = (m0 + mm < M && k0 + kk < K) ? a[(m0 + mm) * o.sam + (k0 + kk) * o.sak] : 0.0f;
      int bk = o.sbk == 1 ? e % F32_BLOCK_K : e / F32_TILE;
      int bn = o.sbk == 1 ? e / F32_BLOCK_K : e % F32_TILE;
      bool in = n0 + bn < N && k0 + bk < K;
      Bs[0][bk][bn] = in ? b[(k0 + bk) * o.sbk + (n0 + bn) * o.sbn] : 0.0f;
      if (GATED) Bs[GATED ? 1 : 0][bk][bn] = in ? b2[(k0 + bk) * o.sb2k + (n0 + bn) * o.sb2n] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < F32_BLOCK_K; ++kk) {
      float av[MICRO];
#pragma unroll
      for (int i = 0; i < MICRO; ++i) av[i] = As[kk][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < MICRO; ++j) {
        float bv = Bs[0][kk][tx + 16 * j];
#pragma unroll
        for (int i = 0; i < MICRO; ++i) acc[i][j] = fmaf(av[i], bv, acc[i][j]);
        if (GATED) {
          float bv2 = Bs[GATED ? 1 : 0][kk][tx + 16 * j];
#pragma unroll
          for (int i = 0; i < MICRO; ++i) acc2[GATED ? i : 0][GATED ? j : 0] = fmaf(av[i], bv2, acc2[GATED ? i : 0][GATED ? j : 0]);
        }
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < MICRO; ++i)
#pragma unroll
    for (int j = 0; j < MICRO; ++j) {
      int r = m0 + ty + 16 * i, col = n0 + tx + 16 * j;
      if (r < M && col < N) c[r * o.scm + col * o.scn] = GATED ? swiglu(acc[i][j], acc2[GATED ? i : 0][GATED ? j : 0]) : acc[i][j];
    }
}

static bool vec_ok(const void* p, int64_t stride_outer, int64_t stride_inner) {
  return stride_inner == 1 && stride_outer % 8 == 0 && (reinterpret_cast<uintptr_t>(p) % 16) == 0;
}

template <typename T, int BM, int BN, bool GATED>
static void launch_wmma(const Operands& o, cudaStream_t stream) {
  dim3 grid((o.N + BN - 1) / BN, (o.M + BM - 1) / BM);
  // Gated: both weights must share a layout to share the shared-memory path.
  bool b_k = (o.sbk == 1 || (o.sbn != 1 && o.sbk <= o.sbn)) &&
             (!GATED || o.sb2k == 1 || (o.sb2n != 1 && o.sb2k <= o.sb2n));
  bool va = vec_ok(o.a, o.sam, o.sak);
  bool vb = b_k ? vec_ok(o.b, o.sbn, o.sbk) : vec_ok(o.b, o.sbk, o.sbn);
  if (GATED) vb = vb && (b_k ? vec_ok(o.b2, o.sb2n, o.sb2k) : vec_ok(o.b2, o.sb2k, o.sb2n));
  if (b_k) mlp_wmma_kernel<T, BM, BN, true, GATED><<<grid, NTHREADS, 0, stream>>>(o, va, vb);
  else mlp_wmma_kernel<T, BM, BN, false, GATED><<<grid, NTHREADS, 0, stream>>>(o, va, vb);
}

template <bool GATED>
static void launch(const Operands& o, int dtype, cudaStream_t stream) {
  constexpr int BM = GATED ? GU_BLOCK_M : DOWN_BLOCK_M;
  constexpr int BN = GATED ? GU_BLOCK_N : DOWN_BLOCK_N;
  if (dtype == 0) {
    dim3 grid((o.N + F32_TILE - 1) / F32_TILE, (o.M + F32_TILE - 1) / F32_TILE);
    mlp_f32_kernel<GATED><<<grid, 256, 0, stream>>>(o);
  } else if (dtype == 1) {
    launch_wmma<__half, BM, BN, GATED>(o, stream);
  } else {
    launch_wmma<__nv_bfloat16, BM, BN, GATED>(o, stream);
  }
}

// x[T,D], w_gate/w_up[F,D], w_down[D,F], h[T,F] scratch, out[T,D]; strides in elements.
// dtype: 0 fp32, 1 fp16, 2 bf16 (autokernel.cuda.build.dtype_code). Returns the first launch error.
extern "C" cudaError_t autokernel_fused_mlp_launch(const void* x, const void* wg, const void* wu, const void* wd,
                                           void* h, void* out, int T, int D, int F,
                                           int64_t sxm, int64_t sxk, int64_t sgf, int64_t sgd,
                                           int64_t suf, int64_t sud, int64_t sdd, int64_t sdf,
                                           int64_t shm, int64_t shf, int64_t som, int64_t sod,
                                           int dtype, cudaStream_t stream) {
  // h = swiglu: B = Wg^T is [D,F] with strides (sgd, sgf).
  Operands gu{x, wg, wu, h, T, F, D, sxm, sxk, sgd, sgf, sud, suf, shm, shf};
  launch<true>(gu, dtype, stream);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  Operands down{h, wd, nullptr, out, T, D, F, shm, shf, sdf, sdd, 0, 0, som, sod};
  launch<false>(down, dtype, stream);
  return cudaGetLastError();
}
"""

CPP_SRC = r"""
extern "C" cudaError_t autokernel_fused_mlp_launch(const void* x, const void* wg, const void* wu, const void* wd,
                                                   void* h, void* out, int T, int D, int F,
                                                   int64_t sxm, int64_t sxk, int64_t sgf, int64_t sgd,
                                                   int64_t suf, int64_t sud, int64_t sdd, int64_t sdf,
                                                   int64_t shm, int64_t shf, int64_t som, int64_t sod,
                                                   int dtype, cudaStream_t stream);

torch::Tensor fused_mlp(torch::Tensor x, torch::Tensor w_gate, torch::Tensor w_up, torch::Tensor w_down,
                        int64_t dtype_code, int64_t stream) {
  TORCH_CHECK(x.is_cuda() && w_gate.is_cuda() && w_up.is_cuda() && w_down.is_cuda(), "fused_mlp: CUDA tensors only");
  TORCH_CHECK(x.dim() == 2 && w_gate.dim() == 2 && w_up.dim() == 2 && w_down.dim() == 2, "fused_mlp: 2-D inputs");
  const int64_t T = x.size(0), D = x.size(1), F = w_gate.size(0);
  TORCH_CHECK(w_gate.size(1) == D && w_up.size(0) == F && w_up.size(1) == D, "fused_mlp: w_gate/w_up are [F, D]");
  TORCH_CHECK(w_down.size(0) == D && w_down.size(1) == F, "fused_mlp: w_down is [D, F]");
  auto st = x.scalar_type();
  TORCH_CHECK(w_gate.scalar_type() == st && w_up.scalar_type() == st && w_down.scalar_type() == st,
              "fused_mlp: one dtype for all inputs");
  TORCH_CHECK(T <= INT32_MAX && D <= INT32_MAX && F <= INT32_MAX, "fused_mlp: size too large");
  auto out = torch::empty({T, D}, x.options());
  if (T == 0 || D == 0) return out;
  if (F == 0) return out.zero_();
  auto h = torch::empty({T, F}, x.options());
  cudaError_t err = autokernel_fused_mlp_launch(
      x.data_ptr(), w_gate.data_ptr(), w_up.data_ptr(), w_down.data_ptr(), h.data_ptr(), out.data_ptr(),
      (int)T, (int)D, (int)F, x.stride(0), x.stride(1), w_gate.stride(0), w_gate.stride(1),
      w_up.stride(0), w_up.stride(1), w_down.stride(0), w_down.stride(1), h.stride(0), h.stride(1),
      out.stride(0), out.stride(1), (int)dtype_code, reinterpret_cast<cudaStream_t>(stream));
  TORCH_CHECK(err == cudaSuccess, "fused_mlp launch failed: ", cudaGetErrorString(err));
  return out;
}
"""

FUNCTIONS = ["fused_mlp"]


def _defines():
    return {"GU_BLOCK_M": GU_BLOCK_M, "GU_BLOCK_N": GU_BLOCK_N, "DOWN_BLOCK_M": DOWN_BLOCK_M,
            "DOWN_BLOCK_N": DOWN_BLOCK_N, "BLOCK_K": BLOCK_K, "WARPS_M": WARPS_M, "WARPS_N": WARPS_N,
            "F32_TILE": F32_TILE, "F32_BLOCK_K": F32_BLOCK_K}


def _module():
    from autokernel.cuda.build import load_extension

    return load_extension("fused_mlp", CUDA_SRC, CPP_SRC, FUNCTIONS, defines=_defines())


def kernel_fn(x, w_gate, w_up, w_down):
    from autokernel.cuda.build import dtype_code

    return _module().fused_mlp(x, w_gate, w_up, w_down, dtype_code(x.dtype),
                               torch.cuda.current_stream(x.device).cuda_stream)
