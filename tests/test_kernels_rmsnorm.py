"""rmsnorm: spec facts (the reference is transformers' LlamaRMSNorm bit for bit), the Triton
starter against the float64 reference (interpreter on the CPU, the real GPU when present) at
small, edge and adversarial inputs and strided views, the CUDA starter's compile check and, on
the GPU, both backends at every default shape and dtype."""

from __future__ import annotations

import pytest
import torch

from support.kernel_cases import (ALL_DTYPES, DEVICE, Kernel, row_kernel_configs, skip_cuda_without_toolchain,
                                  skip_long_bf16_rows)

K = Kernel("rmsnorm")
SPEC = K.spec
triton_mod, cuda_mod = K.fixtures(own_home=True)  # shared checks: tests/support/kernel_cases.py


def test_spec_facts():
    s = {"rows": 8192, "cols": 4096}
    K.assert_costs(s, bytes={torch.bfloat16: (2 * 8192 * 4096 + 4096) * 2},
                   flops={torch.float32: 4 * 8192 * 4096}, labels={"2048x4096", "8192x4096"})
    # The bench's matcher takes our kernels (Triton and CUDA names) as our own.
    K.assert_kernel_names(own=("_rmsnorm_fused", "_rmsnorm_looped",
                               "void rmsnorm_kernel<__nv_bfloat16>(__nv_bfloat16 const*)"))


def test_the_search_leaves_out_what_the_models_calls_never_read():
    """Given a model's shapes (rows x cols up to MAX_FUSED_COLS), the looped path's and
    rms_norm_dim's tunables are not searched; PROGRAMS_PER_SM only with the persistent schedule."""
    from autokernel.declared import effective_names

    kf = K.kernel_file("triton")
    llama = [{"rows": 2048, "cols": 4096}]
    names = set(effective_names(kf.source, kf.config, "bfloat16", llama))
    assert not names & {"LOOP_BLOCK", "LOOP_WARPS", "COL_INNER", "COL_TILE", "COL_WARPS", "PROGRAMS_PER_SM",
                        "MAX_FUSED_COLS"}  # 4096 columns: fused under the smallest MAX_FUSED_COLS offered
    assert {"SCHEDULE", "MAX_WARPS", "TILE_ELEMS", "ELEMS_PER_THREAD"} <= names
    assert {"LOOP_BLOCK", "LOOP_WARPS", "MAX_FUSED_COLS"} <= set(effective_names(
        kf.source, kf.config, "bfloat16", llama + [{"rows": 1, "cols": 40000}]))
    assert "MAX_FUSED_COLS" in effective_names(kf.source, kf.config, "bfloat16", [{"rows": 8, "cols": 5000}])
    anywhere = set(effective_names(kf.source, kf.config, "bfloat16"))  # shapes unknown (KernelBench)
    assert {"LOOP_BLOCK", "COL_TILE", "MAX_FUSED_COLS"} <= anywhere and "PROGRAMS_PER_SM" not in anywhere
    persistent = dict(kf.config, SCHEDULE="persistent")
    assert "PROGRAMS_PER_SM" in effective_names(kf.source, persistent, "bfloat16", llama)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_reference_is_llama_rmsnorm(dtype):
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    x, w, eps = K.inputs({"rows": 9, "cols": 48}, dtype, device="cpu")
    assert eps == 1e-6
    norm = LlamaRMSNorm(48, eps=eps).to(dtype)
    with torch.no_grad():
        norm.weight.copy_(w)
        assert torch.equal(SPEC.reference(x, w, eps), norm(x))


test_triton_shapes = K.correctness_test(backend="triton", shapes=SPEC.small_shapes + SPEC.edge_shapes,
                                        skip=skip_long_bf16_rows)
test_triton_adversarial = K.adversarial_test([{"rows": 7, "cols": 1000}, {"rows": 37, "cols": 129}])


def test_triton_rounds_like_transformers(triton_mod):
    """The normalised value is rounded to x's dtype before the weight multiply; doing the multiply
    in fp32 instead changes a quarter of the outputs by one ulp. Checked in fp16: the interpreter
    casts fp32 to bf16 by truncation (the GPU rounds to nearest), so bf16 is checked on the GPU."""
    x, w, eps = K.inputs({"rows": 16, "cols": 1000}, torch.float16)
    out, ref = triton_mod.kernel_fn(x, w, eps), SPEC.reference(x, w, eps)
    fused = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps) * w.float()).half()
    same = (out == ref).float().mean().item()
    assert same > 0.99 and (fused == ref).float().mean().item() < 0.9


def test_triton_repeated_calls_reuse_one_prepared_plan(tmp_path):
    """A call's host work is done once per (shapes, strides, dtypes, device, eps): repeated calls on
    new values stay right; other strides, another eps, the looped path and empty rows each get theirs."""
    mod = K.load("triton", None, tmp_path)
    x, w, eps = K.inputs({"rows": 6, "cols": 96}, torch.float16)
    for _ in range(3):
        x.normal_()
        torch.testing.assert_close(mod.kernel_fn(x, w, eps), SPEC.reference(x, w, eps), atol=2e-3, rtol=2e-3)
    assert len(mod._PLANS) == 1
    xt = x.t().contiguous().t()  # same values, column-major
    torch.testing.assert_close(mod.kernel_fn(xt, w, 1e-3), SPEC.reference(xt, w, 1e-3), atol=2e-3, rtol=2e-3)
    assert len(mod._PLANS) == 2
    long = torch.randn(2, mod.MAX_FUSED_COLS + 8, device=DEVICE, dtype=torch.float16)
    wl = torch.randn(long.shape[1], device=DEVICE, dtype=torch.float16)
    torch.testing.assert_close(mod.kernel_fn(long, wl, eps), SPEC.reference(long, wl, eps), atol=2e-2, rtol=2e-2)
    assert mod.kernel_fn(x[:0], w, eps).shape == (0, 96)


# ---------------------------------------------------------------- rms_norm_dim: over any dim, no weight

@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("shape, dim, col_tile", [
    ((3, 16, 5, 7), 1, 8192),  # KernelBench L1 36's form: one [16, 64] tile per program
    ((2, 300, 9), 1, 8192),  # R = 300: one [512, 16] tile
    ((2, 300, 9), 1, 256),  # R walked in chunks of 16: a pass for the sums, one to write
    ((5, 40), 0, 8192),  # the first dim
    ((4, 6, 130), 1, 64),  # inner 130: blocks of 64 and a ragged one
    ((4, 6, 10), -1, 8192),  # the last dim: the row kernels with a weight of ones
    ((0, 4, 3), 1, 8192),
], ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else None)
@pytest.mark.parametrize("mean", [True, False], ids=["rms", "l2"])
def test_rms_norm_dim_matches_the_written_out_reference(triton_mod, monkeypatch, dtype, shape, dim, col_tile, mean):
    """mean: x / sqrt(mean(x^2) + eps); else the L2 form x / sqrt(sum(x^2) + eps), which takes
    the tile kernel on the last dim too."""
    monkeypatch.setattr(triton_mod, "COL_TILE", col_tile)
    x = (torch.randn(shape, generator=K.gen(5), device=DEVICE) * 3).to(dtype)
    sq = x.double() ** 2
    ref = x.double() / torch.sqrt((sq.mean if mean else sq.sum)(dim=dim, keepdim=True) + 1e-5)
    out = triton_mod.rms_norm_dim(x, dim, 1e-5, mean)
    assert out.shape == x.shape and out.dtype == dtype
    atol, rtol = SPEC.tolerance(dtype)
    torch.testing.assert_close(out.double(), ref, atol=atol, rtol=rtol)
    assert torch.equal(out, triton_mod.rms_norm_dim(x, dim, 1e-5, mean))


test_triton_strided_views = K.strided_views_test()
# SCHEDULE persistent: 4 programs (the interpreter's "SMs" x 1) walk 5 tiles of 8 rows at 33x100
test_triton_configs = K.configs_test(row_kernel_configs(max_fused_cols=4096)
                                     + [{"SCHEDULE": "persistent", "PROGRAMS_PER_SM": 1, "TILE_ELEMS": 1024}])
test_cuda_source_compiles = K.cuda_compile_test(other={"BLOCK_SIZE": 1024, "VEC_BYTES": 4, "SMEM_BYTES": 0})

# ---------------------------------------------------------------- GPU: both backends, every default shape and dtype


def rounds_like_transformers_on_device(mod, dtype):
    if dtype == torch.bfloat16:  # transformers' rounding order, on the device
        x, w, eps = K.inputs({"rows": 256, "cols": 4096}, dtype)
        assert (mod.kernel_fn(x, w, eps) == SPEC.reference(x, w, eps)).float().mean() > 0.97


test_gpu_default_shapes = K.correctness_test(backend=("triton", "cuda"), shapes=SPEC.default_shapes, gpu=True,
                                             skip=skip_cuda_without_toolchain)
test_gpu_edges_and_scales = K.gpu_edges_and_scales_test({"rows": 64, "cols": 4096},
                                                        extra=rounds_like_transformers_on_device)
