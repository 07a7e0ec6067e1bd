"""rotary_embedding: spec facts (the reference and cos/sin tables equal transformers' LLaMA ones),
the Triton starter against the float64 reference (interpreter on CPU, real GPU when present), the
CUDA starter's compile check and, on the GPU, every default shape and dtype for both backends.

Run as a script on a GPU (`python tests/test_kernels_rotary_embedding.py [--sweep]`) it times both
starters against eager and torch.compile at the default shapes in bf16 (and with --sweep the
Triton tunables), printing one line per measurement with the fraction of the measured copy
bandwidth.
"""

from __future__ import annotations

import sys

import pytest
import torch

from autokernel.kernels.rotary_embedding import rope_tables
from support.kernel_cases import ALL_DTYPES, BACKENDS, DEVICE, Kernel

KERNEL = "rotary_embedding"
K = Kernel(KERNEL, out_shape=lambda args: args[0].shape)
SPEC = K.spec
check, load_starter = K.check, K.load
triton_mod, cuda_mod = K.fixtures()  # shared checks: tests/support/kernel_cases.py


def test_spec_costs_and_shapes():
    s = {"batch": 4, "heads": 32, "seq": 4096, "head_dim": 128}
    K.assert_costs(s, bytes={torch.bfloat16: 2 * (2 * 4 * 32 * 4096 * 128 + 2 * 4096 * 128)},
                   flops={torch.float32: 3 * 4 * 32 * 4096 * 128}, labels={"1x32x2048x128", "4x32x4096x128"})
    assert "CatArrayBatchedCopy" in SPEC.library_kernel_patterns and SPEC.noncontiguous_args == (0, 1, 2)
    K.assert_kernel_names(
        foreign=["void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<"
                 "at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, "
                 "at::native::binary_internal::MulFunctor<float> > >"],
        own=("_rope_kernel", "void rope_kernel<__nv_bfloat16, 8>(__nv_bfloat16 const*, __nv_bfloat16 const*, "
             "__nv_bfloat16 const*, __nv_bfloat16*, long, long, long, long, Strides)", "rope_concat_mul_neg"))
    assert all(sh["head_dim"] % 2 == 0 for sh in SPEC.small_shapes + SPEC.edge_shapes + SPEC.default_shapes)


def test_reference_and_tables_match_transformers_llama():
    """cos/sin as LlamaRotaryEmbedding builds them and the reference as apply_rotary_pos_emb
    computes q's embedding, in bf16, bit for bit."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    cfg = LlamaConfig(hidden_size=256, num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=512)
    rope = LlamaRotaryEmbedding(cfg)
    b, h, s, d = 2, 4, 37, 64
    gen = torch.Generator().manual_seed(0)
    x, cos, sin = SPEC.make_inputs({"batch": b, "heads": h, "seq": s, "head_dim": d}, torch.bfloat16, "cpu", gen)
    hf_cos, hf_sin = rope(x, torch.arange(s)[None, :].expand(b, s))
    assert torch.equal(cos, hf_cos[0]) and torch.equal(sin, hf_sin[0])
    q_embed, _ = apply_rotary_pos_emb(x, x, hf_cos, hf_sin)
    assert torch.equal(SPEC.reference(x, cos, sin), q_embed)


def test_inputs():
    gen = torch.Generator().manual_seed(1)
    x, cos, sin = SPEC.make_inputs({"batch": 1, "heads": 2, "seq": 9, "head_dim": 16}, torch.float16, "cpu", gen,
                                   "large")
    assert x.is_contiguous() and torch.isfinite(x).all() and x.float().abs().max() > 500
    assert cos.shape == sin.shape == (9, 16) and cos.dtype == torch.float16
    assert torch.equal(cos[0], torch.ones(16, dtype=torch.float16))  # position 0: no rotation
    x, cos, sin = SPEC.make_inputs({"batch": 2, "heads": 3, "seq": 4, "head_dim": 8}, torch.float32, "cpu", gen,
                                   "equal")
    ref = SPEC.reference(x, cos, sin)
    assert torch.equal(ref, ref[:1, :1].expand_as(ref))
    with pytest.raises(ValueError):
        SPEC.make_inputs({"batch": 1, "heads": 1, "seq": 2, "head_dim": 5}, torch.float32, "cpu", gen)


def test_starter_file_format():
    K.assert_starter_file("triton", {"BLOCK_S", "HEADS_PER_PROG", "NUM_WARPS"})


test_triton_matches_reference = K.correctness_test(backend="triton", shapes=SPEC.small_shapes + SPEC.edge_shapes,
                                                   scales=("normal",) + SPEC.adversarial, seed=2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_triton_model_layout_and_strided_tables(triton_mod, dtype):
    """q as the model hands it over (the [B,S,H,D] projection transposed), cos/sin read from a
    wider table and with unequal halves (the kernel may not assume cat(freqs, freqs))."""
    gen = torch.Generator(device=DEVICE).manual_seed(3)
    b, h, s, d = 2, 3, 11, 32
    q = torch.randn(b, s, h, d, generator=gen, device=DEVICE).to(dtype).transpose(1, 2)
    _, sin_big = rope_tables(s, 2 * d, dtype, DEVICE)
    sin = sin_big[:, :d]  # row stride 2d; halves unequal
    cos = torch.rand(s, 2 * d, generator=gen, device=DEVICE).to(dtype)[:, 1::2]  # column stride 2
    assert not torch.equal(sin[:, : d // 2], sin[:, d // 2:])
    check(triton_mod.kernel_fn(q, cos, sin), (q, cos, sin), dtype)
    x = torch.randn(1, 2, 5, 2 * d, generator=gen, device=DEVICE).to(dtype)[..., ::2]  # last-dim stride 2
    c, sn = rope_tables(5, d, dtype, DEVICE)
    check(triton_mod.kernel_fn(x, c, sn), (x, c, sn), dtype)


def test_triton_repeated_calls_reuse_one_prepared_plan(tmp_path):
    """A call's host work is done once per (shapes, strides, dtypes, device): repeated calls on new
    values stay right, and q as a transposed view (other strides) gets a plan of its own."""
    mod = load_starter("triton", None, tmp_path)
    gen = torch.Generator(device=DEVICE).manual_seed(6)
    dtype = torch.float16
    x = torch.randn(2, 3, 7, 16, generator=gen, device=DEVICE).to(dtype)
    cos, sin = rope_tables(7, 16, dtype, DEVICE)
    for _ in range(3):
        x.normal_(generator=gen)
        check(mod.kernel_fn(x, cos, sin), (x, cos, sin), dtype)
    assert len(mod._PLANS) == 1
    xt = x.transpose(1, 2).contiguous().transpose(1, 2)  # the model's layout: same values
    check(mod.kernel_fn(xt, cos, sin), (xt, cos, sin), dtype)
    assert len(mod._PLANS) == 2
    assert mod.kernel_fn(x[:0], cos, sin).shape == (0, 3, 7, 16)


test_triton_other_configs_stay_correct = K.other_configs_test(
    [(cfg, [({"batch": 3, "heads": 3, "seq": 13, "head_dim": 48}, torch.float16, "normal")])
     for cfg in ({"BLOCK_S": 4, "HEADS_PER_PROG": 2, "NUM_WARPS": 1}, {"BLOCK_S": 64, "HEADS_PER_PROG": 16})],
    seed=4, doc="Tiles smaller than the shape in both grid dims, and a tile bigger than it.")

# ---------------------------------------------------------------- CUDA starter

# Both halves at the default config; the device code again at the other end of the space.
test_cuda_starter_compiles = K.cuda_compile_test(other={"BLOCK_SIZE": 64, "VEC_BYTES": 4, "HEADS_PER_THREAD": 16})

# ---------------------------------------------------------------- GPU: every default shape and dtype

test_gpu_default_shapes = K.correctness_test(backend=BACKENDS, shapes=SPEC.default_shapes + SPEC.edge_shapes,
                                             scales=("normal",) + SPEC.adversarial, seed=5, gpu=True)


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["triton", "cuda"])
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_gpu_model_layout(backend, dtype):
    """LLaMA-7B's q as the attention layer hands it over: the transposed projection view."""
    mod = load_starter(backend)
    gen = torch.Generator(device="cuda").manual_seed(6)
    q = torch.randn(1, 2048, 32, 128, generator=gen, device="cuda").to(dtype).transpose(1, 2)
    cos, sin = rope_tables(2048, 128, dtype, "cuda")
    out = mod.kernel_fn(q, cos, sin)
    check(out, (q, cos, sin), dtype)
    assert torch.equal(out, mod.kernel_fn(q.contiguous(), cos, sin))


# ---------------------------------------------------------------- GPU timing script


if __name__ == "__main__":
    from autokernel.kernels.rotary_embedding import reference as eager

    sweep = {"BLOCK_S": [8, 16, 32], "HEADS_PER_PROG": [2, 4, 8], "NUM_WARPS": [2, 4, 8]}
    K.bandwidth_report(eager, torch.bfloat16, sweep if "--sweep" in sys.argv else None)
