"""cross_entropy: the language-model loss, mean over non-ignored rows, as models compute it.

The reference is what transformers' ForCausalLMLoss does: upcast the logits to fp32, then
F.cross_entropy(logits, targets, ignore_index=-100) with reduction "mean", i.e. the sum of
per-row losses (logsumexp(row) - row[target]) divided by the number of rows whose target is not
ignore_index. The result is a 0-dim fp32 tensor whatever the logits' dtype. When the bench
evaluates the reference on float64 inputs, the math stays in float64 (never downcast to fp32)
and the result is rounded to fp32 once.

Tolerances: 1e-4 for every dtype. All math is fp32 whatever the logits' dtype and 16-bit logits
are exact in fp32, so the only legitimate differences from the float64 reference are fp32
summation order and approximate exp2/log2 (ex2.approx, __expf: a few fp32 ulps), ~1e-6 relative
for a 32000-wide logsumexp and a 4096-row mean. The generic 16-bit 1e-2 would let through a
kernel that keeps its running sum of exponentials in bf16 (off by ~8e-3 on a loss of ~11); 1e-4
rejects it (the tests check that).

Inputs: logits N(0, 1) (a trained model's logits are O(1..10)); about one target in eight is
ignore_index, never row 0, so the mean is defined at every size (size-1 included).
Adversarial scales:
- "large": logits around 1e4 (1e3 in fp16): exp overflows unless the max is subtracted first;
  loss values in the thousands.
- "tiny": logits around 1e-6: loss ~ log(V), checks nothing is flushed or divided by ~0.
- "equal": every logit 0.5: loss is exactly log(V) on every row.
- "masked": a quarter of the logits are -inf (vocabulary masking), never at the target; also
  some whole leading chunks: an online max that starts at -inf must not produce NaN.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from autokernel.kernels.spec import (FP32_MATH_TOLERANCES, KernelSpec, Shape, dims_shape_of, element_size, gen_device,
                                     randn, shape_maker)

SHAPE_KEYS = ("rows", "vocab")
_s = shape_maker(SHAPE_KEYS)


IGNORE_INDEX = -100


def reference(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = IGNORE_INDEX) -> torch.Tensor:
    # .float() as transformers does; a float64 input (the bench's upcast reference) stays float64.
    work = logits if logits.dtype == torch.float64 else logits.float()
    return F.cross_entropy(work, targets, ignore_index=ignore_index).to(torch.float32)


def make_inputs(shape: Shape, dtype: torch.dtype, device, gen: torch.Generator | None = None,
                scale: str = "normal") -> tuple:
    n, v = shape["rows"], shape["vocab"]
    gdev = gen_device(gen, device)
    logits = randn((n, v), dtype, gdev, gen, "normal" if scale == "masked" else scale)
    targets = torch.randint(0, v, (n,), generator=gen, device=gdev, dtype=torch.int64)
    ignored = torch.rand(n, generator=gen, device=gdev) < 0.125
    ignored[0] = False  # at least one counted row: the mean is always defined
    targets = torch.where(ignored, torch.full_like(targets, IGNORE_INDEX), targets)
    if scale == "masked":
        drop = torch.rand(n, v, generator=gen, device=gdev) < 0.25
        # A fully masked prefix: a kernel whose running max starts at -inf must survive a
        # first chunk that is -inf everywhere.
        drop[:, : v // 2] = True
        rows = torch.arange(n, device=gdev)
        safe_t = targets.clamp(min=0)
        drop[rows, safe_t] = False
        logits = logits.masked_fill(drop, float("-inf"))
    return logits.to(device=device, dtype=dtype), targets.to(device), IGNORE_INDEX


def flops(shape: Shape, dtype: torch.dtype) -> float:
    # Per logit: max, subtract, exp, add.
    return 4.0 * shape["rows"] * shape["vocab"]


def bytes_moved(shape: Shape, dtype: torch.dtype) -> float:
    n, v = shape["rows"], shape["vocab"]
    return float(n * v * element_size(dtype) + n * 8 + 4)  # logits, int64 targets, the fp32 scalar


SPEC = KernelSpec(
    name="cross_entropy",
    description="mean cross-entropy loss over non-ignored rows, fp32 math (F.cross_entropy(logits.float(), t))",
    shape_keys=SHAPE_KEYS, shape_of=dims_shape_of(rows=(0, 0), vocab=(0, 1)),
    make_inputs=make_inputs, reference=reference, flops=flops, bytes=bytes_moved,
    # LLaMA-7B's lm_head output at 2048 and 4096 tokens (vocab 32000).
    default_shapes=[_s(2048, 32000), _s(4096, 32000)],
    small_shapes=[_s(8, 300), _s(5, 5000), _s(16, 1024)],
    edge_shapes=[_s(1, 1), _s(1, 7), _s(3, 4097), _s(7, 33), _s(13, 1000)],
    tolerances=dict(FP32_MATH_TOLERANCES),
    adversarial=("large", "tiny", "equal", "masked"),
    # Eager F.cross_entropy: the fp32 cast (an elementwise copy), log_softmax
    # (cunn_SoftMaxForward with the LogSoftMaxForwardEpilogue) and
    # nll_loss_forward_reduce_cuda_kernel_2d, all under at::native::. Names are matched as
    # substrings, so none is a word a candidate's own kernel could carry ("log_softmax", "mul").
    library_kernel_patterns=("nll_loss_forward", "cunn_SoftMaxForward", "LogSoftMaxForwardEpilogue",
                             "elementwise_kernel", "at::native::"),
    noncontiguous_args=(0, 1),
)
