"""matmul: C[M,N] = A[M,K] @ B[K,N], the op behind every nn.Linear (x @ W.t()).

Inputs are generated the way models produce them: A is activations, B is the transposed view
of a [N,K] weight (nn.Linear stores W as [out, in] and computes x @ W.t()), so the kernel sees a
B whose K stride is 1. The edge stage adds other layouts (noncontiguous_args covers both).

Weights are drawn N(0, 1/K) like a real init, so outputs are O(1) and the per-dtype absolute
tolerances mean the same thing at every K.

Numerics, decided explicitly:
- fp32: the reference is compared in float64 (reference_upcast), so fp32 inputs must be
  multiplied in true fp32 (Triton `input_precision="ieee"`, CUDA FMA). TF32 (10-bit mantissa,
  ~1e-3 relative) would fail the 1e-4 tolerance by design: a candidate that silently downcasts
  fp32 work is not a correct fp32 matmul. When the reference itself runs in fp32 it must run
  with TF32 off (`reference` forces that).
- fp16/bf16: fp32 accumulation, one rounding of the output; 1e-2 / 2e-2 is a few output ulps.

Adversarial scales keep the output O(1) so an elementwise tolerance stays meaningful:
- "large": A near the top of its dtype's useful range (1e3 fp16, 1e4 bf16/fp32) and the weight
  scaled down by the same factor: products are exact in fp32, but a kernel that stages or
  accumulates in 16 bits overflows or loses the result.
- "tiny": A around 1e-6 (fp16 subnormals) and the weight scaled up to compensate (1e6, or 1e4
  for fp16 whose range ends at 65504): subnormal inputs must not be flushed to zero.
- "equal": every element of A is 0.5: all rows of C equal (catches row-mixing index bugs).
"""

from __future__ import annotations

import math

import torch

from autokernel.kernels.spec import KernelSpec, Shape, dims_shape_of, element_size, gen_device, randn, shape_maker

SHAPE_KEYS = ("M", "N", "K")
_s = shape_maker(SHAPE_KEYS)


# Name pieces of the GEMM kernels cuBLAS / cuBLASLt / CUTLASS launch on Hopper and earlier.
# A candidate that launches only these just called torch.matmul.
LIBRARY_PATTERNS = ("gemm", "cutlass", "cublas", "sm90_xmma", "xmma", "nvjet", "splitKreduce")


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.dtype == torch.float32 and a.is_cuda:
        prev = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            return torch.matmul(a, b)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = prev
    return torch.matmul(a, b)


_LARGE = {torch.float16: 1e3, torch.bfloat16: 1e4, torch.float32: 1e4}
_TINY_COMPENSATION = {torch.float16: 1e4, torch.bfloat16: 1e6, torch.float32: 1e6}


def make_inputs(shape: Shape, dtype: torch.dtype, device, gen: torch.Generator | None = None,
                scale: str = "normal") -> tuple[torch.Tensor, torch.Tensor]:
    m, n, k = shape["M"], shape["N"], shape["K"]
    a = randn((m, k), dtype, device, gen, scale)
    w = torch.randn(n, k, generator=gen, device=gen_device(gen, device), dtype=torch.float32) / math.sqrt(max(k, 1))
    if scale == "large":
        w = w / _LARGE[dtype]  # keeps C = O(1) while A is huge
    elif scale == "tiny":
        w = w * _TINY_COMPENSATION[dtype]
    return a, w.to(device=device, dtype=dtype).t()


def flops(shape: Shape, dtype: torch.dtype) -> float:
    return 2.0 * shape["M"] * shape["N"] * shape["K"]


def bytes_moved(shape: Shape, dtype: torch.dtype) -> float:
    m, n, k = shape["M"], shape["N"], shape["K"]
    return float((m * k + k * n + m * n) * element_size(dtype))


SPEC = KernelSpec(
    name="matmul",
    description="C = A @ B (nn.Linear's x @ W.t()), fp32 accumulation",
    shape_keys=SHAPE_KEYS, shape_of=dims_shape_of(M=(0, 0), N=(1, 1), K=(0, 1)),
    make_inputs=make_inputs, reference=reference, flops=flops, bytes=bytes_moved,
    # LLaMA-7B at 2048 tokens: q/k/v/o, gate/up, down, lm_head; and the usual 4096^3 yardstick.
    default_shapes=[_s(2048, 4096, 4096), _s(2048, 11008, 4096), _s(2048, 4096, 11008),
                    _s(2048, 32000, 4096), _s(4096, 4096, 4096)],
    small_shapes=[_s(32, 48, 64), _s(17, 33, 40), _s(64, 64, 128)],
    edge_shapes=[_s(1, 37, 19), _s(1, 64, 64), _s(7, 1, 13), _s(3, 5, 1), _s(129, 257, 70)],
    adversarial=("large", "tiny", "equal"),
    compute_bound=True,
    uses_dot=True,
    library_kernel_patterns=LIBRARY_PATTERNS,
    noncontiguous_args=(0, 1),
)
