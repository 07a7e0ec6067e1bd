"""flash_attention: softmax(q k^T * scale [+ causal mask] [+ mask]) v, as F.scaled_dot_product_attention.

The reference is the call transformers' SDPA attention makes: F.scaled_dot_product_attention(
q, k, v, is_causal=causal, scale=scale, enable_gqa=True), with q[B,Hq,S,D] and k, v[B,Hkv,S,D].
GQA follows SDPA's enable_gqa (repeat_interleave): q head h reads kv head h // (Hq // Hkv).
`scale=None` means 1/sqrt(D).

Decode (a KV cache): k and v may be longer than q (Sk = the shape's "kv_seq" >= Sq = "seq"; a
shape without kv_seq has Sk = Sq, so every shape label from before it keeps its meaning). `causal`
is then BOTTOM-RIGHT aligned, as flash-attn and transformers' caches mean it: query i sees keys
j <= i + Sk - Sq (with Sk = Sq, SDPA's is_causal). SDPA's own is_causal is top-left aligned, so
the reference builds that mask explicitly when Sk != Sq. `mask` (optional, what transformers
passes for a padded batch or a static cache's unfilled slots) broadcasts to [B, Hq, Sq, Sk]: bool
(True = attend) or additive float, as SDPA takes it, combined with `causal`. A row that sees no
key at all comes out as zeros, as SDPA returns it. Kernels cover a mask or Sk != Sq for up to
DECODE_MAX_Q queries (the decode path); the spec's inputs never carry a mask (the bench times the
unmasked call), the tests give it one.

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
OPTIONAL_KEYS = {"kv_seq": "seq"}  # keys and values longer than the queries (a KV cache)
_s = shape_maker(SHAPE_KEYS)

# The most queries a call with a mask, or with keys longer than queries, may have: the decode path
# (speculative decoding's few tokens included); longer masked calls stay with SDPA.
DECODE_MAX_Q = 16


def _decode(b, h, hkv, sq, sk, d, causal):
    return dict(_s(b, h, hkv, sq, d, causal), kv_seq=sk)


def kv_seq(shape: Shape) -> int:
    return shape.get("kv_seq", shape["seq"])


# Kernel names SDPA launches: cuDNN ("cudnn_generated_fort_native_sdpa_sm90_..."), FlashAttention-2
# ("pytorch_flash::flash_fwd_kernel", "flash_fwd_splitkv_kernel"), memory-efficient attention
# ("fmha_cutlassF_...", "efficient_attention_forward"), and the math fallback (bmm GEMMs plus a
# softmax kernel). A candidate that launches only these just called the library.
LIBRARY_PATTERNS = ("cudnn", "sdpa", "pytorch_flash", "flash_fwd", "flash::", "fmha", "cutlassF",
                    "efficient_attention", "attention_kernel", "softmax_warp", "SoftMax",
                    "softmax_kernel") + GEMM_PATTERNS


def _sdpa(q, k, v, causal: bool, scale, mask=None):
    try:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=scale,
                                              enable_gqa=True)
    except TypeError:  # torch < 2.5 has no enable_gqa: expand kv heads as enable_gqa does
        group = q.shape[1] // k.shape[1]
        if group > 1:
            k = k.repeat_interleave(group, dim=1)
            v = v.repeat_interleave(group, dim=1)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=scale)


def explicit_mask(q, k, causal: bool, mask):
    """The one mask SDPA is given for a call with a mask or keys longer than queries: `causal`
    bottom-right aligned (query i sees keys <= i + Sk - Sq) combined with `mask` (bool: both must
    allow; float: -inf where causal forbids)."""
    sq, sk = q.shape[2], k.shape[2]
    if not causal:
        return mask
    allowed = torch.ones(sq, sk, dtype=torch.bool, device=q.device).tril(sk - sq)
    if mask is None:
        return allowed
    if mask.dtype == torch.bool:
        return mask & allowed
    return mask.masked_fill(~allowed, float("-inf"))


# Above this many float64 score elements per call, the reference runs one batch at a time.
_CHUNK_ELEMENTS = 1 << 28


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
              scale: float | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:
    causal = bool(causal)
    if mask is not None or k.shape[2] != q.shape[2]:
        mask, causal = explicit_mask(q, k, causal, mask), False
        if mask is not None and mask.dim() < 4:
            mask = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))

    def run(qq, kk, vv):
        if qq.dtype == torch.float64 and qq.shape[0] > 1 and \
                qq.shape[0] * qq.shape[1] * qq.shape[2] * kk.shape[2] > _CHUNK_ELEMENTS:
            # Same op per batch element; bounds the S x S float64 intermediates.
            return torch.cat([_sdpa(qq[i:i + 1], kk[i:i + 1], vv[i:i + 1], causal, scale,
                                    None if mask is None else mask[i:i + 1] if mask.shape[0] > 1 else mask)
                              for i in range(qq.shape[0])])
        return _sdpa(qq, kk, vv, causal, scale, mask)

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
    sk = kv_seq(shape)
    if hkv < 1 or h % hkv:
        raise ValueError(f"heads ({h}) must be a multiple of kv_heads ({hkv})")
    if sk < s:
        raise ValueError(f"kv_seq ({sk}) must be at least seq ({s})")
    causal = bool(shape["causal"])
    if scale == "equal":
        q = torch.full((b, h, s, d), 0.5, dtype=dtype, device=device)
        k = torch.full((b, hkv, sk, d), 0.5, dtype=dtype, device=device)
        v = randn((b, hkv, sk, d), dtype, device, gen)
        return q, k, v, causal, None
    q = randn((b, h, s, d), dtype, device, gen)
    k = randn((b, hkv, sk, d), dtype, device, gen)
    v = randn((b, hkv, sk, d), dtype, device, gen)
    if scale == "large":
        return (q * _LARGE_Q), k, v, causal, 1.0
    return q, k, v, causal, None


def flops(shape: Shape, dtype: torch.dtype) -> float:
    # Two GEMMs (q k^T and p v) of 2*D per visible (query, key) pair per head; causal with Sq = Sk
    # counts half of S*S, bottom-right causal with Sk > Sq the pairs it sees exactly.
    s, sk = shape["seq"], kv_seq(shape)
    pairs = float(s * sk)
    if shape["causal"]:
        pairs = pairs / 2 if sk == s else s * (sk - s) + s * (s + 1) / 2
    return 4.0 * shape["batch"] * shape["heads"] * pairs * shape["head_dim"]


def bytes_moved(shape: Shape, dtype: torch.dtype) -> float:
    b, h, hkv, s, d = shape["batch"], shape["heads"], shape["kv_heads"], shape["seq"], shape["head_dim"]
    return float((2 * b * h * s * d + 2 * b * hkv * kv_seq(shape) * d) * element_size(dtype))  # q, o; k, v


def attention_shape(q_shape, k_shape, causal) -> Shape:
    """The shape dict of a call from q's and k's sizes ([B, H, S, D]); kv_seq only when it is not S."""
    s = {"batch": q_shape[0], "heads": q_shape[1], "kv_heads": k_shape[1], "seq": q_shape[2],
         "head_dim": q_shape[3], "causal": int(bool(causal))}
    if k_shape[2] != q_shape[2]:
        s["kv_seq"] = k_shape[2]
    return s


def shape_of(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, *rest) -> Shape:
    return attention_shape(q.shape, k.shape, causal)


SPEC = KernelSpec(
    name="flash_attention",
    description="SDPA forward: softmax(q k^T * scale, causal or not) v, GQA, fp32 softmax",
    shape_keys=SHAPE_KEYS, shape_of=shape_of, optional_keys=OPTIONAL_KEYS,
    make_inputs=make_inputs, reference=reference, flops=flops, bytes=bytes_moved,
    default_shapes=[
        _s(1, 32, 32, 2048, 128, 1),  # LLaMA-7B, batch 1 x 2048 tokens
        _s(4, 32, 32, 4096, 128, 1),  # PEERS.md yardstick (cuDNN SDPA ~537 TFLOP/s on the H200)
        _s(4, 32, 32, 2048, 128, 0),  # bidirectional (encoder) attention, head dim 128
        _s(1, 32, 8, 4096, 128, 1),  # GQA 4:1 (LLaMA-3-8B / Mistral layout)
        _s(8, 12, 12, 1024, 64, 1),  # GPT-2 (head dim 64, causal)
        _s(8, 12, 12, 512, 64, 0),  # BERT-base (head dim 64, bidirectional)
        _decode(1, 32, 32, 1, 2048, 128, 1),  # LLaMA-7B decode, batch 1, a 2048-token KV cache
        _decode(32, 32, 32, 1, 2048, 128, 1),  # ... batch 32
        _decode(8, 32, 8, 1, 8192, 128, 1),  # GQA 4:1 decode (LLaMA-3-8B layout), 8192-token cache
        _decode(4, 32, 8, 4, 2048, 128, 1),  # four queries per step (speculative decoding), GQA
    ],
    small_shapes=[_s(1, 2, 1, 32, 16, 1), _s(1, 2, 2, 48, 64, 0), _s(2, 4, 2, 40, 32, 1),
                  _decode(2, 4, 2, 1, 100, 64, 1), _decode(1, 4, 1, 4, 77, 32, 1)],
    edge_shapes=[_s(1, 2, 1, 1, 64, 1), _s(1, 2, 2, 1, 16, 0), _s(1, 3, 1, 37, 64, 1),
                 _s(2, 2, 2, 67, 32, 0), _s(1, 1, 1, 130, 128, 1),
                 _decode(1, 2, 2, 3, 5, 40, 1), _decode(1, 8, 1, 16, 131, 128, 0)],
    adversarial=("large", "equal"),
    scale_tolerances={"large": {"float32": (5e-4, 5e-4)}},
    compute_bound=True,
    uses_dot=True,
    library_kernel_patterns=LIBRARY_PATTERNS,
    noncontiguous_args=(0, 1, 2),
)
