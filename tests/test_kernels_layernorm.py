"""layernorm: spec facts, the Triton starter against the float64 reference (interpreter on the
CPU, the real GPU when present) at small, edge and adversarial inputs and strided views, the CUDA
starter's compile check and, on the GPU, both backends at every default shape and dtype."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from support.kernel_cases import Kernel, row_kernel_configs, skip_cuda_without_toolchain, skip_long_bf16_rows

K = Kernel("layernorm")
SPEC = K.spec
triton_mod, cuda_mod = K.fixtures(own_home=True)  # shared checks: tests/support/kernel_cases.py


def test_spec_facts():
    s = {"rows": 8192, "cols": 4096}
    K.assert_costs(s, bytes={torch.bfloat16: (2 * 8192 * 4096 + 2 * 4096) * 2},
                   flops={torch.float32: 7 * 8192 * 4096}, labels={"2048x4096", "8192x4096"})
    # The bench's matcher takes our kernels (Triton and CUDA names) as our own.
    K.assert_kernel_names(own=("_layernorm_fused", "_layernorm_looped",
                               "void layernorm_kernel<__nv_bfloat16>(__nv_bfloat16 const*)"))
    x, w, b, eps = K.inputs({"rows": 3, "cols": 10}, torch.float32, device="cpu")
    assert eps == 1e-5 and w.shape == b.shape == (10,) and not torch.equal(w, torch.ones(10))
    assert torch.equal(SPEC.reference(x, w, b, eps), F.layer_norm(x, (10,), w, b, eps))
    ln = torch.nn.LayerNorm(10, eps=eps)
    with torch.no_grad():
        ln.weight.copy_(w)
        ln.bias.copy_(b)
        assert torch.equal(SPEC.reference(x, w, b, eps), ln(x))


def test_adversarial_inputs():
    x = K.inputs({"rows": 4, "cols": 64}, torch.float32, "offset", device="cpu")[0]
    assert 299 < x.mean() < 301 and 0.5 < x.std() < 2
    x = K.inputs({"rows": 4, "cols": 64}, torch.float32, "equal", device="cpu")
    assert (x[0] == 0.5).all() and torch.allclose(SPEC.reference(*x), x[2].expand(4, 64))


test_triton_shapes = K.correctness_test(backend="triton", shapes=SPEC.small_shapes + SPEC.edge_shapes,
                                        skip=skip_long_bf16_rows)
test_triton_adversarial = K.adversarial_test([{"rows": 7, "cols": 1000}, {"rows": 37, "cols": 129}])


def test_triton_repeated_calls_reuse_one_prepared_plan(tmp_path):
    """A call's host work is done once per (shapes, strides, dtypes, device, eps): repeated calls on
    new values stay right; other strides and another eps each get a plan, empty rows none to run."""
    mod = K.load("triton", None, tmp_path)
    x, w, b, eps = K.inputs({"rows": 6, "cols": 96}, torch.float32)
    for _ in range(3):
        x.normal_()
        K.check(mod.kernel_fn(x, w, b, eps), (x, w, b, eps), torch.float32)
    assert len(mod._PLANS) == 1
    xt = x.t().contiguous().t()  # same values, column-major
    K.check(mod.kernel_fn(xt, w, b, 1e-3), (xt, w, b, 1e-3), torch.float32)
    assert len(mod._PLANS) == 2
    assert mod.kernel_fn(x[:0], w, b, eps).shape == (0, 96)


def test_triton_constant_rows_give_bias(triton_mod):
    """Variance exactly 0: y is the bias, bit for bit (two-pass statistics)."""
    x, w, b, eps = K.inputs({"rows": 5, "cols": 300}, torch.float32, "equal")
    assert torch.equal(triton_mod.kernel_fn(x, w, b, eps), b.expand(5, 300))


@pytest.mark.parametrize("max_fused", [16384, 1024])  # the fused path, then the long-row loop (1000 > 512)
def test_triton_shifted_stats(tmp_path, max_fused):
    """STATS "shifted" (one reduction of sum d, sum d^2 with d = x - x[row, 0]): every adversarial
    scale (a large offset is where E[x^2] - E[x]^2 would cancel) in fp32 and bf16, and constant rows
    still give the bias bit for bit."""
    mod = K.load("triton", {"STATS": "shifted", "MAX_FUSED_COLS": max_fused, "LOOP_BLOCK": 512}, tmp_path)
    for dtype in (torch.float32, torch.bfloat16):
        K.check_cases(mod, [({"rows": 7, "cols": 1000}, s) for s in SPEC.adversarial], dtype, K.gen(5))
    x, w, b, eps = K.inputs({"rows": 5, "cols": 1000}, torch.float32, "equal")
    assert torch.equal(mod.kernel_fn(x, w, b, eps), b.expand(5, 1000))


@pytest.mark.parametrize("rows", [3, 7])
def test_triton_few_long_rows_split_into_segments(tmp_path, monkeypatch, rows):
    """Fewer rows than SPLIT_PROGRAMS and long: each row cut into segments whose statistics are
    merged (KernelBench L1 40: 16 rows of 4M). Every adversarial scale, fp32 and bf16, a strided
    view, constant rows, and both kernels launched with one segment grid per row."""
    cfg = {"MAX_FUSED_COLS": 1024, "LOOP_BLOCK": 256, "SPLIT_PROGRAMS": 528}
    mod = K.load("triton", cfg, tmp_path)
    grids = []
    real = mod._layernorm_segment_norm

    class Spy:
        def __getitem__(self, grid):
            grids.append(tuple(grid))
            return real[grid]

    monkeypatch.setattr(mod, "_layernorm_segment_norm", Spy())
    for dtype in (torch.float32, torch.bfloat16):
        K.check_cases(mod, [({"rows": rows, "cols": 1900}, s) for s in SPEC.adversarial], dtype, K.gen(6))
    assert set(grids) == {(rows, 8)}  # 1900 columns: 7 segments of 256 and one of 108
    x, w, b, eps = K.inputs({"rows": rows, "cols": 1900}, torch.float32, "equal")
    assert torch.equal(mod.kernel_fn(x, w, b, eps), b.expand(rows, 1900))
    x, w, b, eps = K.inputs({"rows": rows, "cols": 3800}, torch.float32, "offset")
    view, w, b = x[:, ::2], w[:1900], b[:1900]
    torch.testing.assert_close(mod.kernel_fn(view, w, b, eps),
                               F.layer_norm(view.double(), (1900,), w.double(), b.double(), eps).float(),
                               atol=1e-4, rtol=1e-4)
    (tmp_path / "off").mkdir()
    off = K.load("triton", {**cfg, "SPLIT_PROGRAMS": 0}, tmp_path / "off")  # one program per row again
    monkeypatch.setattr(off, "_layernorm_segment_norm", None)
    torch.testing.assert_close(off.kernel_fn(view, w, b, eps), mod.kernel_fn(view, w, b, eps), atol=1e-4, rtol=1e-4)


test_triton_strided_views = K.strided_views_test()
test_triton_configs = K.configs_test(row_kernel_configs(max_fused_cols=4096) + [{"STATS": "shifted"}])
test_cuda_source_compiles = K.cuda_compile_test(other={"BLOCK_SIZE": 1024, "VEC_BYTES": 4, "SMEM_BYTES": 0})

# ---------------------------------------------------------------- GPU: both backends, every default shape and dtype

test_gpu_default_shapes = K.correctness_test(backend=("triton", "cuda"), shapes=SPEC.default_shapes, gpu=True,
                                             skip=skip_cuda_without_toolchain)
test_gpu_edges_and_scales = K.gpu_edges_and_scales_test({"rows": 64, "cols": 4096})
