"""fused_mlp (SwiGLU): spec facts, the reference against transformers' LlamaMLP, the Triton starter
against the float64 reference (interpreter on CPU, real GPU when present), the CUDA starter's
compile check and, on the GPU, every default shape and dtype."""

from __future__ import annotations

import pytest
import torch

from autokernel.kernelfile import import_kernel, read_kernel_file, with_config
from autokernel.kernels import get_spec, starter_path

SPEC = get_spec("fused_mlp")
HAS_CUDA = torch.cuda.is_available()
DEVICE = "cuda" if HAS_CUDA else "cpu"
CPU_DTYPES = (torch.float32, torch.float16)  # bf16 tl.dot is broken under the interpreter


def check(out: torch.Tensor, args: tuple, dtype: torch.dtype) -> None:
    ref = SPEC.reference(*[a.double() for a in args])
    assert out.shape == ref.shape and out.dtype == dtype and out.device == args[0].device
    assert not torch.isnan(out).any()
    atol, rtol = SPEC.tolerance(dtype)
    torch.testing.assert_close(out.double(), ref, atol=atol, rtol=rtol)


@pytest.fixture(scope="module")
def triton_mod():
    return import_kernel(read_kernel_file(starter_path("fused_mlp", "triton")))


def test_spec_costs_and_shapes():
    s = {"tokens": 4096, "hidden": 4096, "ffn": 11008}
    assert SPEC.flops(s, torch.bfloat16) == 2 * 4096 * 4096 * 11008 * 3
    assert SPEC.bytes(s, torch.bfloat16) == 2 * (2 * 4096 * 4096 + 3 * 11008 * 4096)
    labels = {SPEC.shape_label(x) for x in SPEC.default_shapes}
    assert {"2048x4096x11008", "4096x4096x11008"} <= labels
    assert SPEC.compute_bound and "gemm" in SPEC.library_kernel_patterns


def test_reference_is_llama_mlp():
    """The reference computes what transformers' LlamaMLP computes, bit for bit, in the input dtype."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaMLP

    cfg = LlamaConfig(hidden_size=48, intermediate_size=80, num_attention_heads=4, num_key_value_heads=4,
                      hidden_act="silu", mlp_bias=False)
    gen = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16):
        x, wg, wu, wd = SPEC.make_inputs({"tokens": 9, "hidden": 48, "ffn": 80}, dtype, "cpu", gen, "normal")
        mlp = LlamaMLP(cfg).to(dtype)
        with torch.no_grad():
            mlp.gate_proj.weight.copy_(wg)
            mlp.up_proj.weight.copy_(wu)
            mlp.down_proj.weight.copy_(wd)
            assert torch.equal(SPEC.reference(x, wg, wu, wd), mlp(x))


@pytest.mark.parametrize("scale", ["normal", "large", "tiny"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_inputs_give_unit_outputs(dtype, scale):
    gen = torch.Generator().manual_seed(1)
    x, wg, wu, wd = SPEC.make_inputs({"tokens": 64, "hidden": 256, "ffn": 512}, dtype, "cpu", gen, scale)
    assert x.shape == (64, 256) and wg.shape == wu.shape == (512, 256) and wd.shape == (256, 512)
    ref = SPEC.reference(x.double(), wg.double(), wu.double(), wd.double())
    assert 0.1 < ref.std().item() < 3.0  # O(1) at every scale: the tolerances stay meaningful
    g = x.double() @ wg.double().t()
    if scale == "large":
        assert g.min() < -150 and g.max() > 150  # silu saturates both ways; exp(-g) overflows fp16
    if scale == "tiny":
        assert g.abs().max() < 0.2  # silu in its linear region


def test_starter_file_format():
    kf = read_kernel_file(starter_path("fused_mlp", "triton"))
    assert kf.kernel_type == "fused_mlp" and kf.backend == "triton" and kf.deterministic
    assert {"GU_BLOCK_M", "GU_BLOCK_N", "DOWN_BLOCK_N", "GROUP_M", "FP32_PRECISION"} <= set(kf.search_space)
    mod = import_kernel(kf)
    assert mod.valid_config(dict(kf.config))
    assert not mod.valid_config(dict(kf.config, GU_BLOCK_M=256, GU_BLOCK_N=256, GU_NUM_WARPS=8))


@pytest.mark.parametrize("dtype", CPU_DTYPES)
@pytest.mark.parametrize("shape", SPEC.small_shapes + SPEC.edge_shapes, ids=SPEC.shape_label)
def test_triton_matches_reference(triton_mod, shape, dtype):
    gen = torch.Generator(device=DEVICE).manual_seed(7)
    for scale in ("normal",) + SPEC.adversarial:
        args = SPEC.make_inputs(shape, dtype, DEVICE, gen, scale)
        check(triton_mod.kernel_fn(*args), args, dtype)


@pytest.mark.parametrize("dtype", CPU_DTYPES)
def test_triton_noncontiguous_x(triton_mod, dtype):
    gen = torch.Generator(device=DEVICE).manual_seed(8)
    x, wg, wu, wd = SPEC.make_inputs({"tokens": 21, "hidden": 40, "ffn": 72}, dtype, DEVICE, gen, "normal")
    wide = torch.zeros(21, 83, device=DEVICE, dtype=dtype)
    wide[:, 3::2] = x
    xs = wide[:, 3::2]  # column stride 2, storage offset 3
    assert not xs.is_contiguous()
    check(triton_mod.kernel_fn(xs, wg, wu, wd), (xs, wg, wu, wd), dtype)


def test_triton_other_configs_stay_correct(tmp_path):
    src = starter_path("fused_mlp", "triton").read_text()
    cfg = {"GU_BLOCK_M": 64, "GU_BLOCK_N": 64, "GU_BLOCK_K": 32, "DOWN_BLOCK_M": 64, "DOWN_BLOCK_N": 64,
           "DOWN_BLOCK_K": 128, "GROUP_M": 1, "FP32_BLOCK_M": 32, "FP32_BLOCK_N": 32, "FP32_BLOCK_K": 16}
    path = tmp_path / "kernel.py"
    path.write_text(with_config(src, cfg))
    mod = import_kernel(read_kernel_file(path))
    gen = torch.Generator(device=DEVICE).manual_seed(9)
    for dtype in CPU_DTYPES:
        args = SPEC.make_inputs({"tokens": 70, "hidden": 100, "ffn": 150}, dtype, DEVICE, gen, "normal")
        check(mod.kernel_fn(*args), args, dtype)


# ---------------------------------------------------------------- GPU: every default shape and dtype


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", SPEC.default_shapes + SPEC.edge_shapes, ids=SPEC.shape_label)
def test_triton_gpu_default_shapes(triton_mod, shape, dtype):
    gen = torch.Generator(device="cuda").manual_seed(10)
    args = SPEC.make_inputs(shape, dtype, "cuda", gen, "normal")
    check(triton_mod.kernel_fn(*args), args, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_triton_gpu_adversarial(triton_mod, dtype):
    gen = torch.Generator(device="cuda").manual_seed(11)
    for scale in SPEC.adversarial:
        args = SPEC.make_inputs({"tokens": 256, "hidden": 4096, "ffn": 11008}, dtype, "cuda", gen, scale)
        check(triton_mod.kernel_fn(*args), args, dtype)


# ---------------------------------------------------------------- CUDA C++ starter


@pytest.fixture(scope="module")
def cuda_mod():
    return import_kernel(read_kernel_file(starter_path("fused_mlp", "cuda")))


def test_cuda_starter_file_format(cuda_mod):
    kf = read_kernel_file(starter_path("fused_mlp", "cuda"))
    assert kf.kernel_type == "fused_mlp" and kf.backend == "cuda" and kf.deterministic
    assert cuda_mod.valid_config(dict(kf.config))
    # Gated tiles hold two accumulators and two weight tiles: 128x128 with BLOCK_K 64 is too big.
    assert not cuda_mod.valid_config(dict(kf.config, GU_BLOCK_N=128, BLOCK_K=64))
    assert not cuda_mod.valid_config(dict(kf.config, DOWN_BLOCK_N=64, WARPS_N=8))  # 8-column warp tiles
    assert cuda_mod._defines() == {k: kf.config[k] for k in cuda_mod._defines()}


@pytest.mark.slow  # nvcc plus a C++ syntax check against torch headers: minutes on 2 cores
def test_cuda_sources_compile(cuda_mod):
    from autokernel.cuda.build import compile_check, nvcc_available

    if not nvcc_available():
        pytest.skip("nvcc not found: cannot compile-check CUDA sources")
    compile_check(cuda_mod.CUDA_SRC, cuda_mod.CPP_SRC, defines=cuda_mod._defines(), functions=cuda_mod.FUNCTIONS)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", SPEC.default_shapes + SPEC.small_shapes + SPEC.edge_shapes, ids=SPEC.shape_label)
def test_cuda_gpu_shapes(cuda_mod, shape, dtype):
    gen = torch.Generator(device="cuda").manual_seed(14)
    args = SPEC.make_inputs(shape, dtype, "cuda", gen, "normal")
    check(cuda_mod.kernel_fn(*args), args, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_cuda_gpu_adversarial_and_layouts(cuda_mod, dtype):
    gen = torch.Generator(device="cuda").manual_seed(15)
    for scale in SPEC.adversarial:
        args = SPEC.make_inputs({"tokens": 256, "hidden": 4096, "ffn": 11008}, dtype, "cuda", gen, scale)
        check(cuda_mod.kernel_fn(*args), args, dtype)
    x, wg, wu, wd = SPEC.make_inputs({"tokens": 70, "hidden": 136, "ffn": 200}, dtype, "cuda", gen, "normal")
    xs = torch.zeros(70, 2 * 136 + 1, device="cuda", dtype=dtype)[:, 1::2]
    xs.copy_(x)  # column stride 2, offset storage: scalar-load path
    check(cuda_mod.kernel_fn(xs, wg, wu, wd), (xs, wg, wu, wd), dtype)
    wg_t = wg.t().contiguous().t()  # column-major weights: the row-major staging path
    wu_t = wu.t().contiguous().t()
    check(cuda_mod.kernel_fn(x, wg_t, wu_t, wd), (x, wg_t, wu_t, wd), dtype)


# ---------------------------------------------------------------- speed report (script, not a test)
# python3 tests/test_kernels_fused_mlp.py [--sweep]   (on the GPU; writes $OUT/fused_mlp_speed.txt)


def _tflops(fn, args, shape, dtype):
    import triton.testing

    ms = triton.testing.do_bench(lambda: fn(*args), warmup=25, rep=200)
    return SPEC.flops(shape, dtype) / (ms * 1e-3) / 1e12


def _load(backend, cfg=None, tmp=None):
    path = starter_path("fused_mlp", backend)
    if cfg:
        path = tmp / f"fused_mlp_{backend}_{abs(hash(tuple(sorted(cfg.items()))))}.py"
        path.write_text(with_config(starter_path("fused_mlp", backend).read_text(), cfg))
    return import_kernel(read_kernel_file(path))


def main(argv: list[str]) -> None:
    import os
    import tempfile
    from pathlib import Path

    lines = []

    def emit(line):
        print(line, flush=True)
        lines.append(line)

    mods = {"triton": _load("triton")}
    try:
        mods["cuda"] = _load("cuda")
        mods["cuda"].kernel_fn(*SPEC.make_inputs(SPEC.small_shapes[0], torch.float16, "cuda", None))
    except Exception as exc:
        mods.pop("cuda", None)
        emit(f"cuda starter unavailable: {type(exc).__name__}: {str(exc)[-400:]}")
    emit(f"device {torch.cuda.get_device_name()} torch {torch.__version__}")
    gen = torch.Generator(device="cuda").manual_seed(0)
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        for s in SPEC.default_shapes:
            args = SPEC.make_inputs(s, dtype, "cuda", gen)
            ref = _tflops(SPEC.reference, args, s, dtype)
            row = f"{SPEC.shape_label(s):>18} {str(dtype):>15} eager {ref:6.1f} TF/s"
            for name, mod in mods.items():
                try:
                    t = _tflops(mod.kernel_fn, args, s, dtype)
                    row += f" | {name} {t:6.1f} TF/s ({100 * t / ref:5.1f}%)"
                except Exception as exc:
                    row += f" | {name} failed: {type(exc).__name__}: {str(exc)[:200]}"
            emit(row)
    if "--sweep" in argv:
        tmp = Path(tempfile.mkdtemp())
        base = mods["triton"]
        kf = read_kernel_file(starter_path("fused_mlp", "triton"))
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
                        row += f" | {SPEC.shape_label(s)} {_tflops(_load('triton', cfg, tmp).kernel_fn, args, s, torch.bfloat16):6.1f}"
                    except Exception as exc:
                        row += f" | failed {type(exc).__name__}: {str(exc)[:120]}"
                    emit(row)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "fused_mlp_speed.txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
