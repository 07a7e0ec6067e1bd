"""rmsnorm: LLaMA's RMSNorm exactly as transformers' LlamaRMSNorm computes it:

    h = x.float(); h = h * rsqrt(h.pow(2).mean(-1) + eps); return weight * h.to(x.dtype)

So the normalised value is rounded to x's dtype before the weight multiply (which rounds once
more in x's dtype). Outputs are O(|weight|) ~ 1: tolerances fp32 1e-4, fp16 1e-2, bf16 2e-2
(two bf16 roundings at |y| ~ 3 are within 1.6e-2).
Adversarial scales (weights stay normal):
- "large": x around 1e4 (1e3 in fp16): x^2 ~ 1e8, overflows fp16 unless squared in fp32.
- "tiny": around 1e-6: mean(x^2) ~ 1e-12 << eps, y ~ x/sqrt(eps) * w.
- "equal": every element 0.5: y = 0.5/sqrt(0.25 + eps) * w exactly, the same in every row.
"""

from __future__ import annotations

import torch

from autokernel.kernels.spec import (Shape, gen_device, randn, row_input,
                                     rows_cols as _s, rowwise_spec, rowwise_bytes, rowwise_flops)

EPS = 1e-6  # LLaMA's rms_norm_eps


def reference(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    input_dtype = x.dtype
    h = x.to(torch.float32) if input_dtype in (torch.float16, torch.bfloat16) else x
    variance = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(variance + eps)
    return weight * h.to(input_dtype)


def make_inputs(shape: Shape, dtype: torch.dtype, device, gen: torch.Generator | None = None,
                scale: str = "normal") -> tuple:
    gdev = gen_device(gen, device)
    x = row_input(shape, dtype, gdev, gen, scale)
    weight = 1.0 + 0.5 * randn((shape["cols"],), torch.float32, gdev, gen)
    cast = dict(device=device, dtype=dtype)
    return x.to(**cast), weight.to(**cast), EPS


SPEC = rowwise_spec(
    name="rmsnorm",
    description="LLaMA RMSNorm as transformers computes it (fp32 variance, cast, then * weight)",
    make_inputs=make_inputs, reference=reference,
    flops=rowwise_flops(4.0),  # per element: square, add, scale, weight multiply
    bytes=rowwise_bytes(2, per_col=1),  # x, y; weight
    # Hidden 4096 at 2048 and 8192 tokens.
    default_shapes=[_s(2048, 4096), _s(8192, 4096)],
    small_shapes=[_s(4, 64), _s(3, 100), _s(8, 1000)],
    edge_shapes=[_s(1, 1), _s(5, 1), _s(1, 5000), _s(7, 1000), _s(37, 129), _s(1, 40000)],
    adversarial=("large", "tiny", "equal"),
    # Eager RMSNorm is pow/mean/rsqrt/mul: TensorIterator elementwise and reduction kernels;
    # F.rms_norm's fused kernel reuses the layer norm templates.
    library_kernel_patterns=("elementwise_kernel", "reduce_kernel", "vectorized_layer_norm_kernel",
                             "RowwiseMomentsCUDAKernel", "rms_norm"),
)
