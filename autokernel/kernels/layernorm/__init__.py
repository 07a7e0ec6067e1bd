"""layernorm: F.layer_norm(x, (cols,), weight, bias, eps) over rows.

torch computes 16-bit layer norm in fp32 (mean, biased variance, rstd) and rounds each output
once; weight and bias are in x's dtype, as in a model. Outputs are O(|weight| + |bias|) ~ 1, so
the tolerances are fp32 1e-4, fp16 1e-2, bf16 2e-2 (one bf16 rounding at |y| ~ 3 is 8e-3).
Adversarial scales (weights and bias stay normal):
- "large": x around 1e4 (1e3 in fp16): variance ~1e8, needs fp32 statistics.
- "tiny": around 1e-6: the variance (1e-12) is far below eps, y ~ x/sqrt(eps) * w + b.
- "equal": every element 0.5: variance exactly 0, y = bias (a kernel computing E[x^2]-E[x]^2
  in low precision gets a nonzero or negative variance here).
- "offset": 300 + N(0, 1): a large mean under a unit spread; the one-pass E[x^2] - E[x]^2
  formula loses most of the variance's digits in fp32.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from autokernel.kernels.spec import (Shape, gen_device, randn, row_input,
                                     rows_cols as _s, rowwise_spec, rowwise_bytes, rowwise_flops)

EPS = 1e-5  # torch.nn.LayerNorm's default


def reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def make_inputs(shape: Shape, dtype: torch.dtype, device, gen: torch.Generator | None = None,
                scale: str = "normal") -> tuple:
    cols = shape["cols"]
    gdev = gen_device(gen, device)
    x = row_input(shape, dtype, gdev, gen, "normal" if scale == "offset" else scale)
    if scale == "offset":
        x = x + 300.0
    weight = 1.0 + 0.5 * randn((cols,), torch.float32, gdev, gen)
    bias = 0.5 * randn((cols,), torch.float32, gdev, gen)
    cast = dict(device=device, dtype=dtype)
    return x.to(**cast), weight.to(**cast), bias.to(**cast), EPS


SPEC = rowwise_spec(
    name="layernorm",
    description="F.layer_norm over the last dim with weight and bias, fp32 statistics",
    make_inputs=make_inputs, reference=reference,
    # Per element: mean add, subtract, square-add, scale, weight multiply, bias add (~7).
    flops=rowwise_flops(7.0),
    bytes=rowwise_bytes(2, per_col=2),  # x, y; weight, bias
    # Hidden 4096 at 2048 and 8192 tokens.
    default_shapes=[_s(2048, 4096), _s(8192, 4096)],
    small_shapes=[_s(4, 64), _s(3, 100), _s(8, 1000)],
    edge_shapes=[_s(1, 1), _s(5, 1), _s(1, 5000), _s(7, 1000), _s(37, 129), _s(1, 40000)],
    adversarial=("large", "tiny", "equal", "offset"),
    # at::native's layer norm kernels (vectorized one-pass, and the moments + apply pair).
    library_kernel_patterns=("vectorized_layer_norm_kernel", "RowwiseMomentsCUDAKernel",
                             "LayerNormForwardCUDAKernel", "layer_norm_kernel"),
)
