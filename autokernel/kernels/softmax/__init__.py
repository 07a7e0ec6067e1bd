"""softmax: F.softmax(x, dim=-1) over rows, same dtype out.

torch computes 16-bit softmax in fp32 and rounds each output once; a kernel must do the same.
Outputs lie in [0, 1], so absolute tolerances mean the same at every row length: fp32 1e-4,
fp16/bf16 1e-2 (one 16-bit rounding of a value <= 1 is at most 4e-3 in bf16).
Adversarial scales:
- "large": logits around 1e4 (1e3 in fp16): exp overflows unless the row max is subtracted.
- "tiny": around 1e-6: a near-uniform row, every output ~1/cols.
- "equal": every logit 0.5: exactly uniform rows (catches a wrong divisor or row mixing).
- "-inf": attention-style masking: a random quarter of the entries and a fully masked leading
  chunk are -inf (a running max that starts at -inf must survive it); one entry per row stays
  finite, so no row is entirely masked.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from autokernel.kernels.spec import (Shape, gen_device, row_input,
                                     rows_cols as _s, rowwise_spec, rowwise_bytes, rowwise_flops)


def reference(x: torch.Tensor) -> torch.Tensor:
    return F.softmax(x, dim=-1)


def make_inputs(shape: Shape, dtype: torch.dtype, device, gen: torch.Generator | None = None,
                scale: str = "normal") -> tuple[torch.Tensor]:
    rows, cols = shape["rows"], shape["cols"]
    gdev = gen_device(gen, device)
    x = row_input(shape, dtype, gdev, gen, "normal" if scale == "-inf" else scale)
    if scale == "-inf":
        drop = torch.rand(rows, cols, generator=gen, device=gdev) < 0.25
        drop[:, : cols // 2] = True
        keep = torch.randint(0, cols, (rows,), generator=gen, device=gdev)
        drop[torch.arange(rows, device=gdev), keep] = False
        x = x.masked_fill(drop, float("-inf"))
    return (x.to(device=device, dtype=dtype),)


SPEC = rowwise_spec(
    name="softmax",
    description="softmax over the last dim, fp32 math, same dtype out",
    make_inputs=make_inputs, reference=reference,
    flops=rowwise_flops(5.0),  # per element: max, subtract, exp, add, multiply by the reciprocal
    bytes=rowwise_bytes(2),  # x, y
    # LLaMA-7B: logits over the 32000 vocabulary for 4096 tokens, and attention scores
    # (32 heads x 2048 queries rows of 2048 keys).
    default_shapes=[_s(4096, 32000), _s(65536, 2048)],
    small_shapes=[_s(4, 64), _s(3, 100), _s(8, 1000)],
    # 1x40000 is longer than a row kept in registers: the starters' looping path.
    edge_shapes=[_s(1, 1), _s(5, 1), _s(1, 5000), _s(7, 1000), _s(37, 129), _s(1, 40000)],
    tolerances={"float32": (1e-4, 1e-4), "float16": (1e-2, 1e-2), "bfloat16": (1e-2, 1e-2)},
    adversarial=("large", "tiny", "equal", "-inf"),
    # PyTorch's softmax kernels (persistent warp softmax for short rows, block softmax else).
    library_kernel_patterns=("softmax_warp_forward", "cunn_SoftMaxForward", "cunn_SpatialSoftMaxForward"),
)
