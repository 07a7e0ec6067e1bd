"""fused_mlp (SwiGLU): spec facts, the reference against transformers' LlamaMLP, the Triton starter
against the float64 reference (interpreter on CPU, real GPU when present), the CUDA starter's
compile check and, on the GPU, every default shape and dtype."""

from __future__ import annotations

import pytest
import torch

from support.kernel_cases import ALL_DTYPES, CPU_DTYPES, DEVICE, Kernel

K = Kernel("fused_mlp")
SPEC = K.spec
check = K.check
triton_mod, cuda_mod = K.fixtures()  # shared checks: tests/support/kernel_cases.py


def test_spec_costs_and_shapes():
    s = {"tokens": 4096, "hidden": 4096, "ffn": 11008}
    K.assert_costs(s, flops={torch.bfloat16: 2 * 4096 * 4096 * 11008 * 3},
                   bytes={torch.bfloat16: 2 * (2 * 4096 * 4096 + 3 * 11008 * 4096)},
                   labels={"2048x4096x11008", "4096x4096x11008"})
    assert SPEC.compute_bound and "gemm" in SPEC.library_kernel_patterns


def test_reference_is_llama_mlp():
    """The reference computes what transformers' LlamaMLP computes, bit for bit, in the input dtype."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaMLP

    cfg = LlamaConfig(hidden_size=48, intermediate_size=80, num_attention_heads=4, num_key_value_heads=4,
                      hidden_act="silu", mlp_bias=False)
    gen = K.gen(0, "cpu")
    for dtype in (torch.float32, torch.bfloat16):
        x, wg, wu, wd = K.make({"tokens": 9, "hidden": 48, "ffn": 80}, dtype, gen, device="cpu")
        mlp = LlamaMLP(cfg).to(dtype)
        with torch.no_grad():
            mlp.gate_proj.weight.copy_(wg)
            mlp.up_proj.weight.copy_(wu)
            mlp.down_proj.weight.copy_(wd)
            assert torch.equal(SPEC.reference(x, wg, wu, wd), mlp(x))


@pytest.mark.parametrize("scale", ["normal", "large", "tiny"])
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_inputs_give_unit_outputs(dtype, scale):
    x, wg, wu, wd = K.inputs({"tokens": 64, "hidden": 256, "ffn": 512}, dtype, scale, seed=1, device="cpu")
    assert x.shape == (64, 256) and wg.shape == wu.shape == (512, 256) and wd.shape == (256, 512)
    ref = SPEC.reference(x.double(), wg.double(), wu.double(), wd.double())
    assert 0.1 < ref.std().item() < 3.0  # O(1) at every scale: the tolerances stay meaningful
    g = x.double() @ wg.double().t()
    if scale == "large":
        assert g.min() < -150 and g.max() > 150  # silu saturates both ways; exp(-g) overflows fp16
    if scale == "tiny":
        assert g.abs().max() < 0.2  # silu in its linear region


def test_starter_file_format():
    kf = K.assert_starter_file("triton", {"GU_BLOCK_M", "GU_BLOCK_N", "DOWN_BLOCK_N", "GROUP_M", "FP32_PRECISION"})
    mod = K.load("triton")
    assert mod.valid_config(dict(kf.config))
    assert not mod.valid_config(dict(kf.config, GU_BLOCK_M=256, GU_BLOCK_N=256, GU_NUM_WARPS=8))


test_triton_matches_reference = K.correctness_test(backend="triton", shapes=SPEC.small_shapes + SPEC.edge_shapes,
                                                   dtypes=CPU_DTYPES, scales=("normal",) + SPEC.adversarial, seed=7)


@pytest.mark.parametrize("dtype", CPU_DTYPES)
def test_triton_noncontiguous_x(triton_mod, dtype):
    x, wg, wu, wd = K.inputs({"tokens": 21, "hidden": 40, "ffn": 72}, dtype, seed=8)
    wide = torch.zeros(21, 83, device=DEVICE, dtype=dtype)
    wide[:, 3::2] = x
    xs = wide[:, 3::2]  # column stride 2, storage offset 3
    assert not xs.is_contiguous()
    check(triton_mod.kernel_fn(xs, wg, wu, wd), (xs, wg, wu, wd), dtype)


test_triton_other_configs_stay_correct = K.other_configs_test(
    [({"GU_BLOCK_M": 64, "GU_BLOCK_N": 64, "GU_BLOCK_K": 32, "DOWN_BLOCK_M": 64, "DOWN_BLOCK_N": 64,
       "DOWN_BLOCK_K": 128, "GROUP_M": 1, "FP32_BLOCK_M": 32, "FP32_BLOCK_N": 32, "FP32_BLOCK_K": 16},
      [({"tokens": 70, "hidden": 100, "ffn": 150}, dtype, "normal") for dtype in CPU_DTYPES])], seed=9)

# ---------------------------------------------------------------- GPU: every default shape and dtype

test_triton_gpu_default_shapes = K.correctness_test(backend="triton", shapes=SPEC.default_shapes + SPEC.edge_shapes,
                                                    seed=10, gpu=True)
test_triton_gpu_adversarial = K.gpu_scales_test("triton", {"tokens": 256, "hidden": 4096, "ffn": 11008}, seed=11)

# ---------------------------------------------------------------- CUDA C++ starter


def test_cuda_starter_file_format(cuda_mod):
    kf = K.assert_starter_file("cuda")
    assert cuda_mod.valid_config(dict(kf.config))
    # Gated tiles hold two accumulators and two weight tiles: 128x128 with BLOCK_K 64 is too big.
    assert not cuda_mod.valid_config(dict(kf.config, GU_BLOCK_N=128, BLOCK_K=64))
    assert not cuda_mod.valid_config(dict(kf.config, DOWN_BLOCK_N=64, WARPS_N=8))  # 8-column warp tiles
    assert cuda_mod._defines() == {k: kf.config[k] for k in cuda_mod._defines()}


# nvcc plus a C++ syntax check against torch headers: minutes on 2 cores
test_cuda_sources_compile = K.cuda_compile_test(slow=True)
test_cuda_gpu_shapes = K.correctness_test(backend="cuda", shapes=SPEC.default_shapes + SPEC.small_shapes
                                          + SPEC.edge_shapes, seed=14, gpu=True)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_cuda_gpu_adversarial_and_layouts(cuda_mod, dtype):
    gen = K.gen(15, "cuda")
    K.check_cases(cuda_mod, [({"tokens": 256, "hidden": 4096, "ffn": 11008}, s) for s in SPEC.adversarial],
                  dtype, gen)
    x, wg, wu, wd = K.make({"tokens": 70, "hidden": 136, "ffn": 200}, dtype, gen, device="cuda")
    xs = torch.zeros(70, 2 * 136 + 1, device="cuda", dtype=dtype)[:, 1::2]
    xs.copy_(x)  # column stride 2, offset storage: scalar-load path
    check(cuda_mod.kernel_fn(xs, wg, wu, wd), (xs, wg, wu, wd), dtype)
    wg_t = wg.t().contiguous().t()  # column-major weights: the row-major staging path
    wu_t = wu.t().contiguous().t()
    check(cuda_mod.kernel_fn(x, wg_t, wu_t, wd), (x, wg_t, wu_t, wd), dtype)


# ---------------------------------------------------------------- speed report (script, not a test)
# python3 tests/test_kernels_fused_mlp.py [--sweep]   (on the GPU; writes $OUT/fused_mlp_speed.txt)


def sweep(mods, gen, emit) -> None:
    import tempfile
    from pathlib import Path

    tmp = Path(tempfile.mkdtemp())
    base = mods["triton"]
    kf = K.kernel_file("triton")
    s = SPEC.default_shapes[-1]
    args = SPEC.make_inputs(s, torch.bfloat16, "cuda", gen)
    for bm, bn, bk in ((128, 128, 64), (128, 64, 64), (64, 128, 64), (128, 256, 64), (128, 128, 32)):
        for warps in (4, 8):
            for stages in (3, 4):
                cfg = dict(kf.config, GU_BLOCK_M=bm, GU_BLOCK_N=bn, GU_BLOCK_K=bk, GU_NUM_WARPS=warps,
                           GU_NUM_STAGES=stages)
                if not base.valid_config(cfg):
                    continue
                row = f"sweep gate/up bf16 {bm}x{bn}x{bk} W{warps} S{stages}"
                try:
                    t = K.tflops(K.load("triton", cfg, tmp).kernel_fn, args, s, torch.bfloat16, 25, 200)
                    row += f" | {SPEC.shape_label(s)} {t:6.1f}"
                except Exception as exc:
                    row += f" | failed {type(exc).__name__}: {str(exc)[:120]}"
                emit(row)


def main(argv: list[str]) -> None:
    K.tflops_report("eager", sweep if "--sweep" in argv else None, warmup=25, rep=200)

if __name__ == "__main__":
    import sys

    main(sys.argv[1:])


def test_triton_repeated_calls_reuse_one_prepared_plan(tmp_path):
    """The host work of a call is done once per (shapes, strides, dtype, device); a repeated call gives
    the right result on new values, and x as a transposed view (other strides) gets a plan of its own."""
    mod = K.load("triton", None, tmp_path)
    gen = K.gen(41)
    dtype = torch.float16
    x, wg, wu, wd = K.make({"tokens": 17, "hidden": 40, "ffn": 72}, dtype, gen)
    for _ in range(3):
        x.normal_(generator=gen)
        check(mod.kernel_fn(x, wg, wu, wd), (x, wg, wu, wd), dtype)
    assert len(mod._PLANS) == 1
    xt = x.t().contiguous().t()  # same values, column-major
    check(mod.kernel_fn(xt, wg, wu, wd), (xt, wg, wu, wd), dtype)
    assert len(mod._PLANS) == 2
