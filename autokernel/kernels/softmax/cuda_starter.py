"""CUDA softmax starter: softmax over the last dim, one thread block per row.

Pass 1 reads the row once keeping a per-thread online (max, sum of exp) pair, rescaling the sum
only when the max grows; the pairs are merged with warp shuffles and a shared-memory step. Pass 2
re-reads the row (an L2 hit for LLaMA rows) and writes exp(x - max) / sum. fp32 math, one
rounding per output; 16-byte vector loads when the row pointers and length allow. -inf entries
contribute 0 (a fully masked row gives NaN, as torch does). Rows may be strided; the last dim is
made contiguous by the wrapper if it is not.
"""

import torch

from autokernel.cuda.build import dtype_code, load_extension

KERNEL_TYPE = "softmax"
BACKEND = "cuda"

BLOCK_SIZE = 512  # threads per row
VEC_BYTES = 16  # bytes per vector load (16 = 8 bf16 / 4 fp32)

SEARCH_SPACE = {
    "BLOCK_SIZE": [128, 256, 512, 1024],
    "VEC_BYTES": [4, 8, 16],
}

DETERMINISTIC = True  # fixed reduction order

CUDA_SRC = r"""
#ifndef BLOCK_SIZE
#define BLOCK_SIZE 512
#endif
#ifndef VEC_BYTES
#define VEC_BYTES 16
#endif

template <typename T> __device__ __forceinline__ float to_f(T v);
template <> __device__ __forceinline__ float to_f<float>(float v) { return v; }
template <> __device__ __forceinline__ float to_f<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ float from_f<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_f<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

template <typename T, int N> struct alignas(sizeof(T) * N) Pack { T v[N]; };

struct MaxSum { float m, s; };

__device__ __forceinline__ void ms_add(MaxSum& a, float x) {
  if (x > a.m) { a.s *= expf(a.m - x); a.m = x; }
  a.s += (x == -INFINITY) ? 0.f : expf(x - a.m);
}

__device__ __forceinline__ MaxSum ms_merge(MaxSum a, MaxSum b) {
  float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, 0.f};
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

// Merge every thread's pair; all threads get the row's result.
__device__ __forceinline__ MaxSum block_merge(MaxSum v) {
  __shared__ MaxSum warp_vals[32];
  __shared__ MaxSum result;
  for (int off = 16; off > 0; off >>= 1) {
    MaxSum o{__shfl_xor_sync(0xffffffffu, v.m, off), __shfl_xor_sync(0xffffffffu, v.s, off)};
    v = ms_merge(v, o);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_vals[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < (BLOCK_SIZE + 31) / 32 ? warp_vals[lane] : MaxSum{-INFINITY, 0.f};
    for (int off = 16; off > 0; off >>= 1) {
      MaxSum o{__shfl_xor_sync(0xffffffffu, v.m, off), __shfl_xor_sync(0xffffffffu, v.s, off)};
      v = ms_merge(v, o);
    }
    if (lane == 0) result = v;
  }
  __syncthreads();
  return result;
}

template <typename T>
__global__ void __launch_bounds__(BLOCK_SIZE)
softmax_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t cols, int64_t sx, int64_t sy) {
  constexpr int VEC = VEC_BYTES / sizeof(T) > 0 ? VEC_BYTES / sizeof(T) : 1;
  const T* xr = x + (int64_t)blockIdx.x * sx;
  T* yr = y + (int64_t)blockIdx.x * sy;
  const bool vec = VEC > 1 && cols % VEC == 0 &&
                   ((reinterpret_cast<uintptr_t>(xr) | reinterpret_cast<uintptr_t>(yr)) % (VEC * sizeof(T))) == 0;
  MaxSum acc{-INFINITY, 0.f};
  if (vec) {
    for (int64_t i = (int64_t)threadIdx.x * VEC; i < cols; i += (int64_t)BLOCK_SIZE * VEC) {
      Pack<T, VEC> p = *reinterpret_cast<const Pack<T, VEC>*>(xr + i);
#pragma unroll
      for (int k = 0; k < VEC; ++k) ms_add(acc, to_f(p.v[k]));
    }
  } else {
    for (int64_t i = threadIdx.x; i < cols; i += BLOCK_SIZE) ms_add(acc, to_f(xr[i]));
  }
  const MaxSum row = block_merge(acc);
  const float inv = 1.f / row.s;
  if (vec) {
    for (int64_t i = (int64_t)threadIdx.x * VEC; i < cols; i += (int64_t)BLOCK_SIZE * VEC) {
      Pack<T, VEC> p = *reinterpret_cast<const Pack<T, VEC>*>(xr + i);
      Pack<T, VEC> q;
#pragma unroll
      for (int k = 0; k < VEC; ++k) q.v[k] = from_f<T>(expf(to_f(p.v[k]) - row.m) * inv);
      *reinterpret_cast<Pack<T, VEC>*>(yr + i) = q;
    }
  } else {
    for (int64_t i = threadIdx.x; i < cols; i += BLOCK_SIZE) yr[i] = from_f<T>(expf(to_f(xr[i]) - row.m) * inv);
  }
}

cudaError_t softmax_launch(const void* x, void* y, int64_t rows, int64_t cols, int64_t sx, int64_t sy,
                           int dtype, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  if (rows > 2147483647LL) return cudaErrorInvalidConfiguration;
  dim3 grid((unsigned)rows), block(BLOCK_SIZE);
  switch (dtype) {
    case 0: softmax_kernel<float><<<grid, block, 0, stream>>>((const float*)x, (float*)y, cols, sx, sy); break;
    case 1: softmax_kernel<__half><<<grid, block, 0, stream>>>((const __half*)x, (__half*)y, cols, sx, sy); break;
    case 2: softmax_kernel<__nv_bfloat16><<<grid, block, 0, stream>>>(
                (const __nv_bfloat16*)x, (__nv_bfloat16*)y, cols, sx, sy); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}
"""

CPP_SRC = r"""
cudaError_t softmax_launch(const void* x, void* y, int64_t rows, int64_t cols, int64_t sx, int64_t sy,
                           int dtype, cudaStream_t stream);

torch::Tensor softmax_fwd(torch::Tensor x, int64_t dtype, int64_t stream) {
  TORCH_CHECK(x.is_cuda(), "softmax: x must be a CUDA tensor");
  TORCH_CHECK(x.dim() == 2, "softmax: x must be 2-D [rows, cols]");
  if (x.size(1) > 1 && x.stride(1) != 1) x = x.contiguous();
  auto y = torch::empty({x.size(0), x.size(1)}, x.options());
  cudaError_t err = softmax_launch(x.data_ptr(), y.data_ptr(), x.size(0), x.size(1), x.stride(0), y.stride(0),
                                   (int)dtype, reinterpret_cast<cudaStream_t>(stream));
  TORCH_CHECK(err == cudaSuccess, "softmax kernel launch failed: ", cudaGetErrorString(err));
  return y;
}
"""

FUNCTIONS = ["softmax_fwd"]
DEFINES = {"BLOCK_SIZE": BLOCK_SIZE, "VEC_BYTES": VEC_BYTES}


def valid_config(cfg):
    return cfg["BLOCK_SIZE"] % 32 == 0


def kernel_fn(x):
    mod = load_extension("softmax", CUDA_SRC, CPP_SRC, FUNCTIONS, defines=DEFINES)
    return mod.softmax_fwd(x, dtype_code(x.dtype), torch.cuda.current_stream(x.device).cuda_stream)
