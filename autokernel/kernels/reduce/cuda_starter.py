"""CUDA reduce starter: out[r] = sum(x[r, :]), fp32 accumulation, result in x's dtype.

Short rows (up to SHORT_COLS) get one warp each, WARPS_PER_BLOCK rows to a block, reduced with
warp shuffles only. Longer rows get a thread block each: 16-byte vector loads into per-thread
fp32 sums, then warp shuffles and one shared-memory step. When there are fewer rows than
MIN_BLOCKS, each row is cut into segments of whole block-chunks; blocks write fp32 partial sums
and the same block kernel sums each row's partials in segment order. Every order is fixed by the
shape, so results are bitwise reproducible. Rows may be strided; a strided last dim is made
contiguous by the wrapper.
"""

import torch

from autokernel.cuda.build import dtype_code, load_extension

KERNEL_TYPE = "reduce"
BACKEND = "cuda"

BLOCK_SIZE = 256  # threads per row for long rows
VEC_BYTES = 16  # bytes per vector load (16 = 8 bf16 / 4 fp32)
SHORT_COLS = 1024  # rows up to this long are summed by one warp
WARPS_PER_BLOCK = 8  # short rows per block
MIN_BLOCKS = 1024  # fewer long rows than this: split rows into segments

SEARCH_SPACE = {
    "BLOCK_SIZE": [128, 256, 512, 1024],
    "VEC_BYTES": [4, 8, 16],
    "SHORT_COLS": [256, 1024, 4096],
    "WARPS_PER_BLOCK": [4, 8, 16],
    "MIN_BLOCKS": [264, 528, 1024, 2048],
}

DETERMINISTIC = True  # fixed split and reduction order for a shape

CUDA_SRC = r"""
#ifndef BLOCK_SIZE
#define BLOCK_SIZE 256
#endif
#ifndef VEC_BYTES
#define VEC_BYTES 16
#endif
#ifndef SHORT_COLS
#define SHORT_COLS 1024
#endif
#ifndef WARPS_PER_BLOCK
#define WARPS_PER_BLOCK 8
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 1024
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

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// Sum of xr[lo, hi) by `threads` threads of index t, stepping `threads` vectors at a time.
template <typename T, int VEC>
__device__ __forceinline__ float strided_sum(const T* __restrict__ xr, int64_t lo, int64_t hi, int t, int threads) {
  float acc = 0.f;
  int64_t done = lo;
  if (VEC > 1) {
    using P = Pack<T, VEC>;
    const int64_t nvec = (hi - lo) / VEC;
    const P* xv = reinterpret_cast<const P*>(xr + lo);
#pragma unroll 4
    for (int64_t i = t; i < nvec; i += threads) {
      const P p = xv[i];
#pragma unroll
      for (int k = 0; k < VEC; ++k) acc += to_f(p.v[k]);
    }
    done = lo + nvec * VEC;
  }
  for (int64_t i = done + t; i < hi; i += threads) acc += to_f(xr[i]);
  return acc;
}

// One warp per row; blockIdx.x * WARPS_PER_BLOCK + warp is the row.
template <typename T, typename O, int VEC>
__global__ void __launch_bounds__(WARPS_PER_BLOCK * 32)
warp_rows_kernel(const T* __restrict__ x, O* __restrict__ out, int64_t rows, int64_t cols, int64_t sx) {
  const int lane = threadIdx.x & 31;
  const int64_t row = (int64_t)blockIdx.x * WARPS_PER_BLOCK + (threadIdx.x >> 5);
  if (row >= rows) return;  // whole warps leave together: the shuffles below stay full
  const float s = warp_sum(strided_sum<T, VEC>(x + row * sx, 0, cols, lane, 32));
  if (lane == 0) out[row] = from_f<O>(s);
}

// One block per (row, segment); out[row * n_seg + seg].
template <typename T, typename O, int VEC>
__global__ void __launch_bounds__(BLOCK_SIZE)
block_rows_kernel(const T* __restrict__ x, O* __restrict__ out, int64_t cols, int64_t sx, int64_t seg_len) {
  const int64_t row = blockIdx.x, seg = blockIdx.y;
  const int64_t lo = seg * seg_len;
  int64_t hi = lo + seg_len < cols ? lo + seg_len : cols;
  if (hi < lo) hi = lo;  // a trailing segment past the end (seg_len was rounded up) sums nothing
  float acc = warp_sum(strided_sum<T, VEC>(x + row * sx, lo, hi, threadIdx.x, BLOCK_SIZE));
  __shared__ float warp_vals[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_vals[warp] = acc;
  __syncthreads();
  if (warp == 0) {
    acc = warp_sum(lane < BLOCK_SIZE / 32 ? warp_vals[lane] : 0.f);
    if (lane == 0) out[row * gridDim.y + seg] = from_f<O>(acc);
  }
}

// How many segments each row is cut into (1: no split, no workspace).
int64_t reduce_segments(int64_t rows, int64_t cols) {
  const int64_t chunk = (int64_t)BLOCK_SIZE * 8;
  if (cols <= SHORT_COLS || rows >= MIN_BLOCKS || cols <= 2 * chunk) return 1;
  int64_t want = (MIN_BLOCKS + rows - 1) / rows;
  const int64_t most = (cols + chunk - 1) / chunk;
  return want < most ? want : most;
}

template <typename T, typename O>
static cudaError_t launch_one(const void* x, void* out, int64_t rows, int64_t cols, int64_t sx, int64_t n_seg,
                              cudaStream_t st) {
  constexpr int VEC = VEC_BYTES / sizeof(T) > 0 ? VEC_BYTES / sizeof(T) : 1;
  const bool vec = VEC > 1 && reinterpret_cast<uintptr_t>(x) % (VEC * sizeof(T)) == 0 && sx % VEC == 0;
  if (n_seg == 1 && cols <= SHORT_COLS) {
    const int64_t blocks = (rows + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK;
    if (blocks > 2147483647LL) return cudaErrorInvalidConfiguration;
    if (vec) warp_rows_kernel<T, O, VEC><<<(unsigned)blocks, WARPS_PER_BLOCK * 32, 0, st>>>((const T*)x, (O*)out, rows, cols, sx);
    else warp_rows_kernel<T, O, 1><<<(unsigned)blocks, WARPS_PER_BLOCK * 32, 0, st>>>((const T*)x, (O*)out, rows, cols, sx);
    return cudaGetLastError();
  }
  // Segments are whole multiples of VEC so every segment's vector loads stay aligned.
  int64_t seg_len = (cols + n_seg - 1) / n_seg;
  seg_len = (seg_len + (int64_t)BLOCK_SIZE * VEC - 1) / ((int64_t)BLOCK_SIZE * VEC) * ((int64_t)BLOCK_SIZE * VEC);
  if (rows > 2147483647LL || n_seg > 65535) return cudaErrorInvalidConfiguration;
  dim3 grid((unsigned)rows, (unsigned)n_seg);
  if (vec) block_rows_kernel<T, O, VEC><<<grid, BLOCK_SIZE, 0, st>>>((const T*)x, (O*)out, cols, sx, seg_len);
  else block_rows_kernel<T, O, 1><<<grid, BLOCK_SIZE, 0, st>>>((const T*)x, (O*)out, cols, sx, seg_len);
  return cudaGetLastError();
}

template <typename T>
static cudaError_t launch_all(const void* x, void* out, float* partial, int64_t rows, int64_t cols, int64_t sx,
                              int64_t n_seg, cudaStream_t st) {
  if (n_seg == 1) return launch_one<T, T>(x, out, rows, cols, sx, 1, st);
  cudaError_t err = launch_one<T, float>(x, partial, rows, cols, sx, n_seg, st);
  if (err != cudaSuccess) return err;
  return launch_one<float, T>(partial, out, rows, n_seg, n_seg, 1, st);
}

cudaError_t reduce_launch(const void* x, void* out, float* partial, int64_t rows, int64_t cols, int64_t sx,
                          int64_t n_seg, int dtype, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  switch (dtype) {
    case 0: return launch_all<float>(x, out, partial, rows, cols, sx, n_seg, stream);
    case 1: return launch_all<__half>(x, out, partial, rows, cols, sx, n_seg, stream);
    case 2: return launch_all<__nv_bfloat16>(x, out, partial, rows, cols, sx, n_seg, stream);
    default: return cudaErrorInvalidValue;
  }
}
"""

CPP_SRC = r"""
int64_t reduce_segments(int64_t rows, int64_t cols);
cudaError_t reduce_launch(const void* x, void* out, float* partial, int64_t rows, int64_t cols, int64_t sx,
                          int64_t n_seg, int dtype, cudaStream_t stream);

torch::Tensor reduce_fwd(torch::Tensor x, int64_t dtype, int64_t stream) {
  TORCH_CHECK(x.is_cuda(), "reduce: x must be a CUDA tensor");
  TORCH_CHECK(x.dim() == 2, "reduce: x must be 2-D [rows, cols]");
  if (x.size(1) > 1 && x.stride(1) != 1) x = x.contiguous();
  const int64_t rows = x.size(0), cols = x.size(1);
  auto out = torch::empty({rows}, x.options());
  if (cols == 0) return out.zero_();
  const int64_t n_seg = reduce_segments(rows, cols);
  torch::Tensor partial;
  if (n_seg > 1) partial = torch::empty({rows, n_seg}, x.options().dtype(torch::kFloat32));
  cudaError_t err = reduce_launch(x.data_ptr(), out.data_ptr(), n_seg > 1 ? partial.data_ptr<float>() : nullptr,
                                  rows, cols, x.stride(0), n_seg, (int)dtype, reinterpret_cast<cudaStream_t>(stream));
  TORCH_CHECK(err == cudaSuccess, "reduce kernel launch failed: ", cudaGetErrorString(err));
  return out;
}
"""

FUNCTIONS = ["reduce_fwd"]
DEFINES = {"BLOCK_SIZE": BLOCK_SIZE, "VEC_BYTES": VEC_BYTES, "SHORT_COLS": SHORT_COLS,
           "WARPS_PER_BLOCK": WARPS_PER_BLOCK, "MIN_BLOCKS": MIN_BLOCKS}


def valid_config(cfg):
    return cfg["BLOCK_SIZE"] % 32 == 0 and cfg["WARPS_PER_BLOCK"] * 32 <= 1024


def kernel_fn(x):
    mod = load_extension("reduce", CUDA_SRC, CPP_SRC, FUNCTIONS, defines=DEFINES)
    return mod.reduce_fwd(x, dtype_code(x.dtype), torch.cuda.current_stream(x.device).cuda_stream)
