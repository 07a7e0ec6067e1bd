"""CUDA rotary-embedding starter: out = x*cos + rotate_half(x)*sin, half-rotation form.

A thread owns VEC consecutive columns j..j+VEC of the first half at one position s, loads the
matching cos/sin of both halves once (16-byte vector loads) and walks HEADS_PER_THREAD (batch,
head) slices with them; for each it loads x[j] and x[j + D/2] and writes both outputs of the
rotation pairs:  out[j] = x1*cos[j] - x2*sin[j],  out[j+D/2] = x2*cos[j+D/2] + x1*sin[j+D/2].
fp32 math, one rounding per output. x may have any strides (the model's q is a transposed view);
the last dim must be contiguous for the vector path, otherwise a scalar path runs. The output
is contiguous [B, H, S, D].
"""

import torch

from autokernel.cuda.build import dtype_code, load_extension

KERNEL_TYPE = "rotary_embedding"
BACKEND = "cuda"

BLOCK_SIZE = 256  # threads per block
VEC_BYTES = 16  # bytes per vector load (16 = 8 bf16 / 4 fp32)
HEADS_PER_THREAD = 4  # (batch, head) slices sharing one load of cos/sin

SEARCH_SPACE = {
    "BLOCK_SIZE": [64, 128, 256, 512],
    "VEC_BYTES": [4, 8, 16],
    "HEADS_PER_THREAD": [1, 2, 4, 8, 16],
}

DETERMINISTIC = True  # pure elementwise

CUDA_SRC = r"""
#ifndef BLOCK_SIZE
#define BLOCK_SIZE 256
#endif
#ifndef VEC_BYTES
#define VEC_BYTES 16
#endif
#ifndef HEADS_PER_THREAD
#define HEADS_PER_THREAD 4
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

struct Strides { int64_t xb, xh, xs, cs, ss; };

// grid.x covers (s, column group) pairs, grid.y groups of HEADS_PER_THREAD flattened (b, h).
template <typename T, int VEC>
__global__ void __launch_bounds__(BLOCK_SIZE)
rope_kernel(const T* __restrict__ x, const T* __restrict__ cos, const T* __restrict__ sin, T* __restrict__ out,
            int64_t bh_total, int64_t heads, int64_t seq, int64_t half, Strides st) {
  using P = Pack<T, VEC>;
  const int64_t groups = half / VEC;
  const int64_t idx = (int64_t)blockIdx.x * BLOCK_SIZE + threadIdx.x;
  if (idx >= seq * groups) return;
  const int64_t s = idx / groups;
  const int64_t j = (idx - s * groups) * VEC;
  const P c1 = *reinterpret_cast<const P*>(cos + s * st.cs + j);
  const P c2 = *reinterpret_cast<const P*>(cos + s * st.cs + j + half);
  const P s1 = *reinterpret_cast<const P*>(sin + s * st.ss + j);
  const P s2 = *reinterpret_cast<const P*>(sin + s * st.ss + j + half);
  const int64_t d = 2 * half;
  const int64_t bh0 = (int64_t)blockIdx.y * HEADS_PER_THREAD;
#pragma unroll
  for (int i = 0; i < HEADS_PER_THREAD; ++i) {
    const int64_t bh = bh0 + i;
    if (bh >= bh_total) break;
    const int64_t b = bh / heads, h = bh - b * heads;
    const T* xp = x + b * st.xb + h * st.xh + s * st.xs + j;
    T* op = out + (bh * seq + s) * d + j;
    const P x1 = *reinterpret_cast<const P*>(xp);
    const P x2 = *reinterpret_cast<const P*>(xp + half);
    P o1, o2;
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const float a = to_f(x1.v[k]), bb = to_f(x2.v[k]);
      o1.v[k] = from_f<T>(a * to_f(c1.v[k]) - bb * to_f(s1.v[k]));
      o2.v[k] = from_f<T>(bb * to_f(c2.v[k]) + a * to_f(s2.v[k]));
    }
    *reinterpret_cast<P*>(op) = o1;
    *reinterpret_cast<P*>(op + half) = o2;
  }
}

template <typename T>
static cudaError_t launch(const void* x, const void* cos, const void* sin, void* out, int64_t batch, int64_t heads,
                          int64_t seq, int64_t half, Strides st, cudaStream_t stream) {
  constexpr int VEC = VEC_BYTES / sizeof(T) > 0 ? VEC_BYTES / sizeof(T) : 1;
  const uintptr_t mis = (reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(cos) |
                         reinterpret_cast<uintptr_t>(sin) | reinterpret_cast<uintptr_t>(out)) % (VEC * sizeof(T));
  const bool vec = VEC > 1 && mis == 0 && half % VEC == 0 && st.xb % VEC == 0 && st.xh % VEC == 0 &&
                   st.xs % VEC == 0 && st.cs % VEC == 0 && st.ss % VEC == 0;
  const int v = vec ? VEC : 1;
  const int64_t bh = batch * heads;
  const int64_t threads = seq * (half / v);
  const int64_t gx = (threads + BLOCK_SIZE - 1) / BLOCK_SIZE;
  const int64_t gy = (bh + HEADS_PER_THREAD - 1) / HEADS_PER_THREAD;
  if (gx > 2147483647LL || gy > 65535) return cudaErrorInvalidConfiguration;
  dim3 grid((unsigned)gx, (unsigned)gy);
  if (vec)
    rope_kernel<T, VEC><<<grid, BLOCK_SIZE, 0, stream>>>((const T*)x, (const T*)cos, (const T*)sin, (T*)out, bh,
                                                         heads, seq, half, st);
  else
    rope_kernel<T, 1><<<grid, BLOCK_SIZE, 0, stream>>>((const T*)x, (const T*)cos, (const T*)sin, (T*)out, bh,
                                                       heads, seq, half, st);
  return cudaGetLastError();
}

cudaError_t rope_launch(const void* x, const void* cos, const void* sin, void* out, int64_t batch, int64_t heads,
                        int64_t seq, int64_t half, int64_t xb, int64_t xh, int64_t xs, int64_t cs, int64_t ss,
                        int dtype, cudaStream_t stream) {
  if (batch * heads * seq * half == 0) return cudaSuccess;
  Strides st{xb, xh, xs, cs, ss};
  switch (dtype) {
    case 0: return launch<float>(x, cos, sin, out, batch, heads, seq, half, st, stream);
    case 1: return launch<__half>(x, cos, sin, out, batch, heads, seq, half, st, stream);
    case 2: return launch<__nv_bfloat16>(x, cos, sin, out, batch, heads, seq, half, st, stream);
    default: return cudaErrorInvalidValue;
  }
}
"""

CPP_SRC = r"""
cudaError_t rope_launch(const void* x, const void* cos, const void* sin, void* out, int64_t batch, int64_t heads,
                        int64_t seq, int64_t half, int64_t xb, int64_t xh, int64_t xs, int64_t cs, int64_t ss,
                        int dtype, cudaStream_t stream);

torch::Tensor rope_fwd(torch::Tensor x, torch::Tensor cos, torch::Tensor sin, int64_t dtype, int64_t stream) {
  TORCH_CHECK(x.is_cuda() && cos.is_cuda() && sin.is_cuda(), "rotary: CUDA tensors expected");
  TORCH_CHECK(x.dim() == 4 && x.size(3) % 2 == 0, "rotary: x is [B, H, S, D] with D even");
  TORCH_CHECK(cos.dim() == 2 && cos.size(0) == x.size(2) && cos.size(1) == x.size(3) && sin.sizes() == cos.sizes(),
              "rotary: cos and sin are [S, D]");
  TORCH_CHECK(cos.scalar_type() == x.scalar_type() && sin.scalar_type() == x.scalar_type(),
              "rotary: cos/sin must have x's dtype");
  if (x.stride(3) != 1) x = x.contiguous();
  if (cos.stride(1) != 1) cos = cos.contiguous();
  if (sin.stride(1) != 1) sin = sin.contiguous();
  auto out = torch::empty(x.sizes(), x.options());  // contiguous
  cudaError_t err = rope_launch(x.data_ptr(), cos.data_ptr(), sin.data_ptr(), out.data_ptr(), x.size(0), x.size(1),
                                x.size(2), x.size(3) / 2, x.stride(0), x.stride(1), x.stride(2), cos.stride(0),
                                sin.stride(0), (int)dtype, reinterpret_cast<cudaStream_t>(stream));
  TORCH_CHECK(err == cudaSuccess, "rotary kernel launch failed: ", cudaGetErrorString(err));
  return out;
}
"""

FUNCTIONS = ["rope_fwd"]
DEFINES = {"BLOCK_SIZE": BLOCK_SIZE, "VEC_BYTES": VEC_BYTES, "HEADS_PER_THREAD": HEADS_PER_THREAD}


def valid_config(cfg):
    return cfg["BLOCK_SIZE"] % 32 == 0


def kernel_fn(x, cos, sin):
    mod = load_extension("rotary_embedding", CUDA_SRC, CPP_SRC, FUNCTIONS, defines=DEFINES)
    return mod.rope_fwd(x, cos, sin, dtype_code(x.dtype), torch.cuda.current_stream(x.device).cuda_stream)
