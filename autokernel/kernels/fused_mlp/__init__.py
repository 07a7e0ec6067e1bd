"""fused_mlp: the SwiGLU MLP of LLaMA, down(silu(gate(x)) * up(x)).

The reference is transformers' LlamaMLP written out: three F.linear calls and F.silu, all in the
input dtype, exactly as the model runs them (no bias; weights stored [out, in]).

Weights are drawn N(0, 1/fan_in) like a real init: gate/up pre-activations are O(1), the output
is O(1), and the per-dtype absolute tolerances mean the same thing at every size. A kernel that
keeps h = silu(g) * u in fp32 and rounds it once is more exact than the eager chain (which rounds
g, u, silu(g) and the product); compared against the float64 reference both are well inside
1e-2 (fp16) / 2e-2 (bf16). fp32 needs true fp32 products (no TF32), as for matmul.

Adversarial scales (outputs stay O(1) so the elementwise tolerance stays meaningful):
- "large": gate pre-activations around +-100 (silu saturates both ways: exp(-g) overflows fp16
  and, past -88, fp32) and h in the hundreds, with w_down scaled down to compensate. A silu that
  computes exp in 16 bits, or h that overflows, fails.
- "tiny": x around 1e-2, so g and u are ~1e-2, silu is in its linear region and h ~ 5e-5 sits at
  the bottom of fp16's normal range; w_down is scaled up by 1e4 so the output stays O(1).
- "equal": every element of x is 0.5: all output rows equal.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from autokernel.kernels.matmul import LIBRARY_PATTERNS as GEMM_PATTERNS
from autokernel.kernels.spec import KernelSpec, Shape, dims_shape_of, element_size, gen_device, randn, shape_maker

SHAPE_KEYS = ("tokens", "hidden", "ffn")
_s = shape_maker(SHAPE_KEYS)



def reference(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
    def run():
        return F.linear(F.silu(F.linear(x, w_gate)) * F.linear(x, w_up), w_down)

    if x.dtype == torch.float32 and x.is_cuda:
        prev = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            return run()
        finally:
            torch.backends.cuda.matmul.allow_tf32 = prev
    return run()


_LARGE_GATE = 100.0
_TINY_X = 1e-2


def _weight(rows: int, cols: int, gen, device, factor: float = 1.0) -> torch.Tensor:
    w = torch.randn(rows, cols, generator=gen, device=gen_device(gen, device), dtype=torch.float32)
    return w * (factor / math.sqrt(max(cols, 1)))


def make_inputs(shape: Shape, dtype: torch.dtype, device, gen: torch.Generator | None = None,
                scale: str = "normal") -> tuple[torch.Tensor, ...]:
    t, d, f = shape["tokens"], shape["hidden"], shape["ffn"]
    x = randn((t, d), dtype, device, gen, scale if scale == "equal" else "normal")
    if scale == "tiny":
        x = x * _TINY_X
    gate_factor = _LARGE_GATE if scale == "large" else 1.0
    w_gate = _weight(f, d, gen, device, gate_factor)
    w_up = _weight(f, d, gen, device)
    # |h| ~ gate_factor under "large" and ~ _TINY_X**2 under "tiny": scale the down projection
    # back so the output stays O(1).
    down_factor = 1.0 / gate_factor if scale != "tiny" else 1.0 / _TINY_X ** 2
    w_down = _weight(d, f, gen, device, down_factor)
    return (x,) + tuple(w.to(device=device, dtype=dtype) for w in (w_gate, w_up, w_down))


def flops(shape: Shape, dtype: torch.dtype) -> float:
    return 2.0 * shape["tokens"] * shape["hidden"] * shape["ffn"] * 3


def bytes_moved(shape: Shape, dtype: torch.dtype) -> float:
    # x read, three weights read, output written; h never needs to leave the chip in the ideal.
    t, d, f = shape["tokens"], shape["hidden"], shape["ffn"]
    return float((2 * t * d + 3 * f * d) * element_size(dtype))


SPEC = KernelSpec(
    name="fused_mlp",
    description="LLaMA SwiGLU MLP: down(silu(gate(x)) * up(x))",
    shape_keys=SHAPE_KEYS, shape_of=dims_shape_of(tokens=(0, 0), hidden=(0, 1), ffn=(1, 0)),
    make_inputs=make_inputs, reference=reference, flops=flops, bytes=bytes_moved,
    default_shapes=[_s(2048, 4096, 11008), _s(4096, 4096, 11008)],
    small_shapes=[_s(32, 64, 96), _s(17, 40, 72)],
    edge_shapes=[_s(1, 64, 96), _s(5, 33, 47), _s(3, 16, 1), _s(130, 72, 200)],
    adversarial=("large", "tiny", "equal"),
    compute_bound=True,
    uses_dot=True,
    # cuBLAS GEMMs plus torch's elementwise kernels (silu, mul): the eager composite.
    library_kernel_patterns=GEMM_PATTERNS + ("silu", "elementwise_kernel", "mul_kernel"),
)
