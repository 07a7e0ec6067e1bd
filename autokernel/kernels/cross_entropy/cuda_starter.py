"""CUDA cross-entropy starter: mean of logsumexp(row) - row[target] over non-ignored rows.

Kernel 1, one thread block per row, reads the row once: each thread keeps an online (max, sum of
exp) pair over its 16-byte vector loads (the sum is rescaled only when the max grows, so exp runs
about once per logit), the pairs are merged with warp shuffles and one shared-memory step, and
thread 0 writes the row's loss (0 for an ignored row, which reads nothing else). Kernel 2, one
block, sums the per-row losses and counts the counted rows in a fixed order: deterministic, no
atomics. fp32 math for every input dtype; -inf logits (masked vocabulary) contribute 0.
"""

import torch

from autokernel.cuda.build import dtype_code, load_extension

KERNEL_TYPE = "cross_entropy"
BACKEND = "cuda"

BLOCK_SIZE = 512  # threads per row
VEC_BYTES = 16  # bytes per vector load (16 = 8 bf16 / 4 fp32)
MEAN_THREADS = 1024  # threads of the final fixed-order mean

SEARCH_SPACE = {
    "BLOCK_SIZE": [128, 256, 512, 1024],
    "VEC_BYTES": [4, 8, 16],
    "MEAN_THREADS": [256, 512, 1024],
}

DETERMINISTIC = True  # per-row losses, then one block reduces them in a fixed order

CUDA_SRC = r"""
#ifndef BLOCK_SIZE
#define BLOCK_SIZE 512
#endif
#ifndef VEC_BYTES
#define VEC_BYTES 16
#endif
#ifndef MEAN_THREADS
#define MEAN_THREADS 1024
#endif

template <typename T> __device__ __forceinline__ float to_f(T v);
template <> __device__ __forceinline__ float to_f<float>(float v) { return v; }
template <> __device__ __forceinline__ float to_f<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T, int N> struct alignas(sizeof(T) * N) Pack { T v[N]; };

// Running max m and sum s of exp(x - m); an all -inf prefix keeps (m, s) = (-inf, 0).
struct Lse { float m, s; };

__device__ __forceinline__ void lse_add(Lse& a, float x) {
  if (x > a.m) { a.s *= __expf(a.m - x); a.m = x; }
  a.s += (x == -INFINITY) ? 0.f : __expf(x - a.m);
}

__device__ __forceinline__ Lse lse_merge(Lse a, Lse b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, 0.f};
  return {m, a.s * __expf(a.m - m) + b.s * __expf(b.m - m)};
}

__device__ __forceinline__ Lse warp_merge(Lse v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    Lse o{__shfl_xor_sync(0xffffffffu, v.m, off), __shfl_xor_sync(0xffffffffu, v.s, off)};
    v = lse_merge(v, o);
  }
  return v;
}

template <typename T>
__global__ void __launch_bounds__(BLOCK_SIZE)
ce_row_kernel(const T* __restrict__ logits, const int64_t* __restrict__ targets, float* __restrict__ losses,
              int64_t vocab, int64_t s_row, int64_t s_t, int64_t ignore_index, bool vec_ok) {
  constexpr int VEC = VEC_BYTES / sizeof(T) > 0 ? VEC_BYTES / sizeof(T) : 1;
  const int64_t row = blockIdx.x;
  const int64_t t = targets[row * s_t];
  if (t == ignore_index) {  // uniform over the block: no thread reaches a barrier
    if (threadIdx.x == 0) losses[row] = 0.f;
    return;
  }
  const T* xr = logits + row * s_row;
  Lse acc{-INFINITY, 0.f};
  int64_t done = 0;
  if (vec_ok && VEC > 1) {
    const int64_t nvec = vocab / VEC;
    const Pack<T, VEC>* xv = reinterpret_cast<const Pack<T, VEC>*>(xr);
    for (int64_t i = threadIdx.x; i < nvec; i += BLOCK_SIZE) {
      Pack<T, VEC> p = xv[i];
#pragma unroll
      for (int k = 0; k < VEC; ++k) lse_add(acc, to_f(p.v[k]));
    }
    done = nvec * VEC;
  }
  for (int64_t i = done + threadIdx.x; i < vocab; i += BLOCK_SIZE) lse_add(acc, to_f(xr[i]));

  __shared__ Lse warp_vals[32];
  acc = warp_merge(acc);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_vals[warp] = acc;
  __syncthreads();
  if (warp == 0) {
    acc = lane < (BLOCK_SIZE + 31) / 32 ? warp_vals[lane] : Lse{-INFINITY, 0.f};
    acc = warp_merge(acc);
    if (lane == 0) losses[row] = acc.m + logf(acc.s) - to_f(xr[t]);
  }
}

__global__ void __launch_bounds__(MEAN_THREADS)
ce_mean_kernel(const float* __restrict__ losses, const int64_t* __restrict__ targets, float* __restrict__ out,
               int64_t rows, int64_t s_t, int64_t ignore_index) {
  float sum = 0.f;
  int64_t count = 0;
  for (int64_t i = threadIdx.x; i < rows; i += MEAN_THREADS) {
    sum += losses[i];
    count += targets[i * s_t] != ignore_index;
  }
  __shared__ float sums[32];
  __shared__ long long counts[32];
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    sum += __shfl_xor_sync(0xffffffffu, sum, off);
    count += __shfl_xor_sync(0xffffffffu, (long long)count, off);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) { sums[warp] = sum; counts[warp] = count; }
  __syncthreads();
  if (warp == 0) {
    sum = lane < (MEAN_THREADS + 31) / 32 ? sums[lane] : 0.f;
    count = lane < (MEAN_THREADS + 31) / 32 ? counts[lane] : 0;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      sum += __shfl_xor_sync(0xffffffffu, sum, off);
      count += __shfl_xor_sync(0xffffffffu, (long long)count, off);
    }
    if (lane == 0) out[0] = sum / (float)count;  // no counted row: 0/0 = NaN, as torch returns
  }
}

template <typename T>
static cudaError_t launch_rows(const void* logits, const int64_t* targets, float* losses, int64_t rows,
                               int64_t vocab, int64_t s_row, int64_t s_t, int64_t ignore_index, cudaStream_t st) {
  constexpr int VEC = VEC_BYTES / sizeof(T) > 0 ? VEC_BYTES / sizeof(T) : 1;
  const bool vec_ok = (reinterpret_cast<uintptr_t>(logits) % (VEC * sizeof(T))) == 0 && s_row % VEC == 0;
  ce_row_kernel<T><<<(unsigned)rows, BLOCK_SIZE, 0, st>>>((const T*)logits, targets, losses, vocab, s_row, s_t,
                                                          ignore_index, vec_ok);
  return cudaGetLastError();
}

cudaError_t ce_launch(const void* logits, const int64_t* targets, float* losses, float* out, int64_t rows,
                      int64_t vocab, int64_t s_row, int64_t s_t, int64_t ignore_index, int dtype,
                      cudaStream_t stream) {
  if (rows > 2147483647LL) return cudaErrorInvalidConfiguration;
  cudaError_t err = cudaSuccess;
  if (rows > 0) {
    switch (dtype) {
      case 0: err = launch_rows<float>(logits, targets, losses, rows, vocab, s_row, s_t, ignore_index, stream); break;
      case 1: err = launch_rows<__half>(logits, targets, losses, rows, vocab, s_row, s_t, ignore_index, stream); break;
      case 2: err = launch_rows<__nv_bfloat16>(logits, targets, losses, rows, vocab, s_row, s_t, ignore_index,
                                               stream); break;
      default: return cudaErrorInvalidValue;
    }
    if (err != cudaSuccess) return err;
  }
  ce_mean_kernel<<<1, MEAN_THREADS, 0, stream>>>(losses, targets, out, rows, s_t, ignore_index);
  return cudaGetLastError();
}
"""

CPP_SRC = r"""
cudaError_t ce_launch(const void* logits, const int64_t* targets, float* losses, float* out, int64_t rows,
                      int64_t vocab, int64_t s_row, int64_t s_t, int64_t ignore_index, int dtype,
                      cudaStream_t stream);

torch::Tensor ce_fwd(torch::Tensor logits, torch::Tensor targets, int64_t ignore_index, int64_t dtype,
                     int64_t stream) {
  TORCH_CHECK(logits.is_cuda() && targets.is_cuda(), "cross_entropy: CUDA tensors expected");
  TORCH_CHECK(logits.dim() == 2 && targets.dim() == 1 && targets.size(0) == logits.size(0),
              "cross_entropy: logits [N, V] and targets [N]");
  TORCH_CHECK(targets.scalar_type() == torch::kInt64, "cross_entropy: targets must be int64");
  if (logits.size(1) > 1 && logits.stride(1) != 1) logits = logits.contiguous();
  auto losses = torch::empty({logits.size(0)}, logits.options().dtype(torch::kFloat32));
  auto out = torch::empty({}, logits.options().dtype(torch::kFloat32));
  cudaError_t err = ce_launch(logits.data_ptr(), targets.data_ptr<int64_t>(), losses.data_ptr<float>(),
                              out.data_ptr<float>(), logits.size(0), logits.size(1), logits.stride(0),
                              targets.stride(0), ignore_index, (int)dtype, reinterpret_cast<cudaStream_t>(stream));
  TORCH_CHECK(err == cudaSuccess, "cross_entropy kernel launch failed: ", cudaGetErrorString(err));
  return out;
}
"""

FUNCTIONS = ["ce_fwd"]
DEFINES = {"BLOCK_SIZE": BLOCK_SIZE, "VEC_BYTES": VEC_BYTES, "MEAN_THREADS": MEAN_THREADS}


def valid_config(cfg):
    return cfg["BLOCK_SIZE"] % 32 == 0 and cfg["MEAN_THREADS"] % 32 == 0


def kernel_fn(logits, targets, ignore_index=-100):
    mod = load_extension("cross_entropy", CUDA_SRC, CPP_SRC, FUNCTIONS, defines=DEFINES)
    return mod.ce_fwd(logits, targets, int(ignore_index), dtype_code(logits.dtype),
                      torch.cuda.current_stream(logits.device).cuda_stream)
