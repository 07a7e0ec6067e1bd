"""flash_attention: softmax(q k^T * scale [+ causal mask]) v, as F.scaled_dot_product_attention.

The reference is the call transformers' SDPA attention makes: F.scaled_dot_product_attention(
q, k, v, is_causal=causal, scale=scale, enable_gqa=True), with q[B,Hq,S,D] and k, v[B,Hkv,S,D].
GQA follows SDPA's enable_gqa (repeat_interleave): q head h reads kv head h // (Hq // Hkv).
`causal` is SDPA's is_causal (top-left aligned; with equal q and kv lengths also bottom-right).
`scale=None` means 1/sqrt(D).

Inputs are drawn N(0, 1) for q, k and v: logits are O(1) and outputs are O(1)-bounded weighted
averages of v, so the per-dtype absolute tolerances mean the same thing at every length.
make_inputs returns contiguous [B,H,S,D] tensors (what benchmarks use). Models hand the kernel a
transposed view of [B,S,H,D] (transformers' q_proj(x).view(...).transpose(1, 2)); the edge stage
covers such layouts through noncontiguous_args.

Numerics, decided explicitly:
- The bench compares against the reference evaluated on float64 copies of the inputs
  (reference_upcast). SDPA's math backend handles float64 on CPU and GPU; `reference` runs it
  one batch at a time so the S x S float64 score matrix of the largest default shape (B4 H32
  S4096: 17 GB whole) stays a few GB.
- fp32 (1e-4): the kernel must multiply in true fp32 (Triton input_precision "ieee", or 3xTF32
  which is about as exact; CUDA FMA). Plain TF32 (~1e-3 relative on the logits) fails by
  design, as for matmul. When the reference runs on fp32 CUDA tensors, TF32 is switched off
  for it so it is itself an fp32 reference.
- fp16 (1e-2) / bf16 (2e-2): fp32 logits and softmax statistics, P rounded to the input dtype
  for the P @ V product (what every flash kernel does), one rounding of the output. Output
  values reach |v| ~ 4 (early causal rows average few values), where a bf16 ulp is 0.03, so the
  relative part of the tolerance carries those rows.

Adversarial scales:
- "large": q ten times larger and an explicit scale of 1.0 (instead of 1/sqrt(D)): logits of
  order 10 * sqrt(D) (~110 at D128), near-one-hot rows. A kernel without the running-max
  subtraction overflows exp; one that ignores the `scale` argument is wrong. It also exercises
  the explicit-scale path of the entry signature. Its fp32 tolerance is 5e-4, not 1e-4: an fp32
  q.k over D terms of size ~10 carries an absolute logit error of about sqrt(D) * eps32 * |logit|
  (~1e-4 at D128), which moves the dominant probabilities by as much, in any fp32 implementation
  (the H200 run of the ieee starter failed 1e-4 there). Half precision keeps its tolerance: its
  inputs are rounded before the reference sees them, and the kernel's fp32 logits are as exact.
- "equal": q and k constant (0.5), v random: every row is a uniform average of v (over the
  causal prefix), so any row-max or normalizer mistake, or a mis-aligned causal mask, shows.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from autokernel.kernels.matmul import LIBRARY_PATTERNS as GEMM_PATTERNS
from autokernel.kernels.spec import KernelSpec, Shape, element_size, randn, shape_maker

SHAPE_KEYS = ("batch", "heads", "kv_heads", "seq", "head_dim", "causal")
_s = shape_maker(SHAPE_KEYS)


# Kernel names SDPA launches: cuDNN ("cudnn_generated_fort_native_sdpa_sm90_..."), FlashAttention-2
# ("pytorch_flash::flash_fwd_kernel", "flash_fwd_splitkv_kernel"), memory-efficient attention
# ("fmha_cutlassF_...", "efficient_attention_forward"), and the math fallback (bmm GEMMs plus a
# softmax kernel). A candidate that launches only these just called the library.
LIBRARY_PATTERNS = ("cudnn", "sdpa", "pytorch_flash", "flash_fwd", "flash::", "fmha", "cutlassF",
                    "efficient_attention", "attention_kernel", "softmax_warp", "SoftMax",
                    "softmax_kernel") + GEMM_PATTERNS


def _sdpa(q, k, v, causal: bool, scale):
    try:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, enable_gqa=True)
    except TypeError:  # torch < 2.5 has no enable_gqa: expand kv heads as enable_gqa does
        group = q.shape[1] // k.shape[1]
        if group > 1:
            k = k.repeat_interleave(group, dim=1)
            v = v.repeat_interleave(group, dim=1)
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)


# Above this many float64 score elements per call, the reference runs one batch at a time.
_CHUNK_ELEMENTS = 1 << 28


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
              scale: float | None = None) -> torch.Tensor:
    causal = bool(causal)

    def run(qq, kk, vv):
        if qq.dtype == torch.float64 and qq.shape[0] > 1 and \
                qq.shape[0] * qq.shape[1] * qq.shape[2] * kk.shape[2] > _CHUNK_ELEMENTS:
            # Same op per batch element; bounds the S x S float64 intermediates.
            return torch.cat([_sdpa(qq[i:i + 1], kk[i:i + 1], vv[i:i + 1], causal, scale)
                              for i in range(qq.shape[0])])
        return _sdpa(qq, kk, vv, causal, scale)

    if q.dtype == torch.float32 and q.is_cuda:
        prev = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            return run(q, k, v)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = prev
    return run(q, k, v)


_LARGE_Q = 10.0


def make_inputs(shape: Shape, dtype: torch.dtype, device, gen: torch.Generator | None = None,
                scale: str = "normal") -> tuple:
    b, h, hkv, s, d = shape["batch"], shape["heads"], shape["kv_heads"], shape["seq"], shape["head_dim"]
    if hkv < 1 or h % hkv:
        raise ValueError(f"heads ({h}) must be a multiple of kv_heads ({hkv})")
    causal = bool(shape["causal"])
    if scale == "equal":
        q = torch.full((b, h, s, d), 0.5, dtype=dtype, device=device)
        k = torch.full((b, hkv, s, d), 0.5, dtype=dtype, device=device)
        v = randn((b, hkv, s, d), dtype, device, gen)
        return q, k, v, causal, None
    q = randn((b, h, s, d), dtype, device, gen)
    k = randn((b, hkv, s, d), dtype, device, gen)
    v = randn((b, hkv, s, d), dtype, device, gen)
    if scale == "large":
        return (q * _LARGE_Q), k, v, causal, 1.0
    return q, k, v, causal, None


def flops(shape: Shape, dtype: torch.dtype) -> float:
    # Two GEMMs (q k^T and p v) of 2*S*S*D each per head; causal does half of them.
    f = 4.0 * shape["batch"] * shape["heads"] * shape["seq"] * shape["seq"] * shape["head_dim"]
    return f / 2 if shape["causal"] else f


def bytes_moved(shape: Shape, dtype: torch.dtype) -> float:
    b, h, hkv, s, d = shape["batch"], shape["heads"], shape["kv_heads"], shape["seq"], shape["head_dim"]
    return float((2 * b * h * s * d + 2 * b * hkv * s * d) * element_size(dtype))  # q and o; k and v


def shape_of(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, *rest) -> Shape:
    return {"batch": q.shape[0], "heads": q.shape[1], "kv_heads": k.shape[1], "seq": q.shape[2],
            "head_dim": q.shape[3], "causal": int(bool(causal))}


SPEC = KernelSpec(
    name="flash_attention",
    description="SDPA forward: softmax(q k^T * scale, causal or not) v, GQA, fp32 softmax",
    shape_keys=SHAPE_KEYS, shape_of=shape_of,
    make_inputs=make_inputs, reference=reference, flops=flops, bytes=bytes_moved,
    default_shapes=[
        _s(1, 32, 32, 2048, 128, 1),  # LLaMA-7B, batch 1 x 2048 tokens
        _s(4, 32, 32, 4096, 128, 1),  # PEERS.md yardstick (cuDNN SDPA ~537 TFLOP/s on the H200)
        _s(4, 32, 32, 2048, 128, 0),  # bidirectional (encoder) attention, head dim 128
        _s(1, 32, 8, 4096, 128, 1),  # GQA 4:1 (LLaMA-3-8B / Mistral layout)
        _s(8, 12, 12, 1024, 64, 1),  # GPT-2 (head dim 64, causal)
        _s(8, 12, 12, 512, 64, 0),  # BERT-base (head dim 64, bidirectional)
    ],
    small_shapes=[_s(1, 2, 1, 32, 16, 1), _s(1, 2, 2, 48, 64, 0), _s(2, 4, 2, 40, 32, 1)],
    edge_shapes=[_s(1, 2, 1, 1, 64, 1), _s(1, 2, 2, 1, 16, 0), _s(1, 3, 1, 37, 64, 1),
                 _s(2, 2, 2, 67, 32, 0), _s(1, 1, 1, 130, 128, 1)],
    adversarial=("large", "equal"),
    scale_tolerances={"large": {"float32": (5e-4, 5e-4)}},
    compute_bound=True,
    uses_dot=True,
    library_kernel_patterns=LIBRARY_PATTERNS,
    noncontiguous_args=(0, 1, 2),
)
