"""matmul: spec facts, the Triton starter against the float64 reference (interpreter on CPU, real
GPU when present), the CUDA starter's compile check and, on the GPU, every default shape and dtype."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from autokernel.kernelfile import import_kernel, parse_source, read_kernel_file, with_config
from autokernel.kernels import get_spec, starter_path

SPEC = get_spec("matmul")
HAS_CUDA = torch.cuda.is_available()
DEVICE = "cuda" if HAS_CUDA else "cpu"
# tl.dot on bf16 operands returns garbage under the interpreter: bf16 is checked on the GPU only.
CPU_DTYPES = (torch.float32, torch.float16)


def check(out: torch.Tensor, args: tuple, dtype: torch.dtype) -> None:
    ref = SPEC.reference(*[a.double() for a in args])
    assert out.shape == ref.shape and out.dtype == dtype and out.device == args[0].device
    assert not torch.isnan(out).any()
    atol, rtol = SPEC.tolerance(dtype)
    torch.testing.assert_close(out.double(), ref, atol=atol, rtol=rtol)


@pytest.fixture(scope="module")
def triton_mod():
    return import_kernel(read_kernel_file(starter_path("matmul", "triton")))


def test_spec_costs_and_shapes():
    s = {"M": 2048, "N": 11008, "K": 4096}
    assert SPEC.flops(s, torch.bfloat16) == 2 * 2048 * 11008 * 4096
    assert SPEC.bytes(s, torch.bfloat16) == 2 * (2048 * 4096 + 4096 * 11008 + 2048 * 11008)
    assert SPEC.bytes(s, torch.float32) == 2 * SPEC.bytes(s, torch.float16)
    labels = {SPEC.shape_label(x) for x in SPEC.default_shapes}
    assert {"2048x4096x4096", "2048x11008x4096", "2048x4096x11008", "2048x32000x4096",
            "4096x4096x4096"} <= labels
    assert SPEC.compute_bound and "nvjet" in SPEC.library_kernel_patterns
    assert SPEC.parse_shape("17x33x40") == {"M": 17, "N": 33, "K": 40}


@pytest.mark.parametrize("scale", ["normal", "large", "tiny"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_inputs_are_linear_layer_like_with_unit_outputs(dtype, scale):
    gen = torch.Generator().manual_seed(1)
    a, b = SPEC.make_inputs({"M": 64, "N": 96, "K": 512}, dtype, "cpu", gen, scale)
    assert a.shape == (64, 512) and b.shape == (512, 96) and a.dtype == b.dtype == dtype
    assert b.stride() == (1, 512)  # the .t() view of an nn.Linear weight
    out_std = SPEC.reference(a.double(), b.double()).std().item()
    # Outputs O(1) at every scale so tolerances stay meaningful; fp16 "tiny" can only compensate
    # 1e-6 inputs by 1e4 (its range ends at 65504), so its outputs are ~1e-2.
    expected = 1e-2 if (dtype, scale) == (torch.float16, "tiny") else 1.0
    assert 0.3 * expected < out_std < 3.0 * expected, out_std
    if scale == "large":
        assert a.float().abs().max() > 1e3
    if scale == "tiny":
        assert a.float().abs().max() < 1e-4


def test_equal_scale_gives_equal_rows():
    gen = torch.Generator().manual_seed(2)
    a, b = SPEC.make_inputs({"M": 5, "N": 7, "K": 9}, torch.float32, "cpu", gen, "equal")
    ref = SPEC.reference(a, b)
    torch.testing.assert_close(ref, ref[:1].expand_as(ref))  # CPU BLAS blocking may differ in the last bit


def test_starter_file_format():
    kf = read_kernel_file(starter_path("matmul", "triton"))
    assert kf.kernel_type == "matmul" and kf.backend == "triton" and kf.deterministic
    assert {"BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "NUM_WARPS", "NUM_STAGES"} <= set(kf.search_space)
    assert (kf.config["BLOCK_M"], kf.config["BLOCK_N"], kf.config["BLOCK_K"]) == (128, 256, 64)


@pytest.mark.parametrize("dtype", CPU_DTYPES)
@pytest.mark.parametrize("shape", SPEC.small_shapes + SPEC.edge_shapes, ids=SPEC.shape_label)
def test_triton_matches_reference(triton_mod, shape, dtype):
    gen = torch.Generator(device=DEVICE).manual_seed(hash(SPEC.shape_label(shape)) % 1000)
    for scale in ("normal",) + SPEC.adversarial:
        args = SPEC.make_inputs(shape, dtype, DEVICE, gen, scale)
        check(triton_mod.kernel_fn(*args), args, dtype)


@pytest.mark.parametrize("dtype", CPU_DTYPES)
def test_triton_layouts(triton_mod, dtype):
    """Contiguous b, transposed b, row-strided a (a slice), and offset storage all read by stride."""
    gen = torch.Generator(device=DEVICE).manual_seed(3)
    m, n, k = 37, 45, 70
    a_big = torch.randn(m, 2 * k + 3, generator=gen, device=DEVICE).to(dtype)
    a = a_big[:, 3:3 + 2 * k:2]  # column stride 2, storage offset 3
    w = (torch.randn(n, k, generator=gen, device=DEVICE) / math.sqrt(k)).to(dtype)
    for b in (w.t(), w.t().contiguous(), w.t().contiguous()[:, : n - 4]):
        check(triton_mod.kernel_fn(a, b), (a, b), dtype)


def test_triton_other_configs_stay_correct(tmp_path):
    """Points of the search space a proposer will try: smaller tiles, no grouping, odd K tails."""
    src = starter_path("matmul", "triton").read_text()
    gen = torch.Generator(device=DEVICE).manual_seed(4)
    for cfg in ({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 1},
                {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 4,
                 "FP32_BLOCK_M": 32, "FP32_BLOCK_N": 32, "FP32_BLOCK_K": 16}):
        path = tmp_path / f"k{len(cfg)}.py"
        path.write_text(with_config(src, cfg))
        kf = read_kernel_file(path)
        mod = import_kernel(kf)
        assert mod.valid_config(dict(kf.config))
        for dtype in CPU_DTYPES:
            args = SPEC.make_inputs({"M": 70, "N": 130, "K": 100}, dtype, DEVICE, gen, "normal")
            check(mod.kernel_fn(*args), args, dtype)


def test_triton_tma_variant(tmp_path):
    """VARIANT "tma": tensor-descriptor loads where the operands qualify (16-byte aligned rows),
    the pointer kernel where they do not; both correct, with both B layouts and ragged edges."""
    src = with_config(starter_path("matmul", "triton").read_text(),
                      {"VARIANT": "tma", "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32})
    path = tmp_path / "tma.py"
    path.write_text(src)
    mod = import_kernel(read_kernel_file(path))
    gen = torch.Generator(device=DEVICE).manual_seed(21)
    a, b = SPEC.make_inputs({"M": 100, "N": 72, "K": 136}, torch.float16, DEVICE, gen, "normal")
    assert mod._tma_ok(a, 1) and mod._tma_ok(b.t(), 1) and mod._tma_ok(b.contiguous(), 1)
    for bb in (b, b.contiguous()):
        check(mod.kernel_fn(a, bb), (a, bb), torch.float16)
    a, b = SPEC.make_inputs({"M": 17, "N": 33, "K": 40 + 3}, torch.float16, DEVICE, gen, "normal")
    assert not mod._tma_ok(a, 1)  # 86-byte rows: falls back to the pointer kernel
    check(mod.kernel_fn(a, b), (a, b), torch.float16)
    a, b = SPEC.make_inputs({"M": 16, "N": 32, "K": 64}, torch.float32, DEVICE, gen, "normal")
    check(mod.kernel_fn(a, b), (a, b), torch.float32)  # fp32 always takes the ieee pointer kernel


def test_valid_config_rejects_what_hopper_cannot_hold(triton_mod):
    kf = parse_source(starter_path("matmul", "triton").read_text())
    assert triton_mod.valid_config(dict(kf.config))
    assert not triton_mod.valid_config(dict(kf.config, BLOCK_M=256, BLOCK_N=256, BLOCK_K=128, NUM_STAGES=5))
    assert not triton_mod.valid_config(dict(kf.config, BLOCK_M=256, BLOCK_N=256, BLOCK_K=32, NUM_WARPS=4,
                                            NUM_STAGES=2))


# ---------------------------------------------------------------- GPU: every default shape and dtype


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", SPEC.default_shapes + SPEC.edge_shapes, ids=SPEC.shape_label)
def test_triton_gpu_default_shapes(triton_mod, shape, dtype):
    gen = torch.Generator(device="cuda").manual_seed(5)
    args = SPEC.make_inputs(shape, dtype, "cuda", gen, "normal")
    check(triton_mod.kernel_fn(*args), args, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", SPEC.default_shapes + SPEC.edge_shapes + [{"M": 100, "N": 72, "K": 136}],
                         ids=SPEC.shape_label)
def test_triton_tma_gpu_shapes(tmp_path, shape, dtype):
    path = tmp_path / "tma.py"
    path.write_text(with_config(starter_path("matmul", "triton").read_text(), {"VARIANT": "tma"}))
    mod = import_kernel(read_kernel_file(path))
    gen = torch.Generator(device="cuda").manual_seed(22)
    a, b = SPEC.make_inputs(shape, dtype, "cuda", gen, "normal")
    for bb in (b, b.contiguous()):
        check(mod.kernel_fn(a, bb), (a, bb), dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_triton_gpu_adversarial(triton_mod, dtype):
    gen = torch.Generator(device="cuda").manual_seed(6)
    for scale in SPEC.adversarial:
        args = SPEC.make_inputs({"M": 512, "N": 1024, "K": 4096}, dtype, "cuda", gen, scale)
        check(triton_mod.kernel_fn(*args), args, dtype)


# ---------------------------------------------------------------- CUDA C++ starter


@pytest.fixture(scope="module")
def cuda_mod():
    return import_kernel(read_kernel_file(starter_path("matmul", "cuda")))


def test_cuda_starter_file_format(cuda_mod):
    kf = read_kernel_file(starter_path("matmul", "cuda"))
    assert kf.kernel_type == "matmul" and kf.backend == "cuda" and kf.deterministic
    assert cuda_mod.valid_config(dict(kf.config))
    assert not cuda_mod.valid_config(dict(kf.config, BLOCK_M=256, BLOCK_N=256, BLOCK_K=64))  # > 48 KB static smem
    assert cuda_mod.valid_config(dict(kf.config, BLOCK_M=64, WARPS_M=4, BLOCK_N=64, WARPS_N=2, BLOCK_K=16))
    assert not cuda_mod.valid_config(dict(kf.config, BLOCK_N=64, WARPS_N=8))  # 8-column warp tiles: not WMMA
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
    gen = torch.Generator(device="cuda").manual_seed(12)
    args = SPEC.make_inputs(shape, dtype, "cuda", gen, "normal")
    check(cuda_mod.kernel_fn(*args), args, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_cuda_gpu_adversarial_and_layouts(cuda_mod, dtype):
    gen = torch.Generator(device="cuda").manual_seed(13)
    for scale in SPEC.adversarial:
        args = SPEC.make_inputs({"M": 300, "N": 1000, "K": 4096}, dtype, "cuda", gen, scale)
        check(cuda_mod.kernel_fn(*args), args, dtype)
    a, b = SPEC.make_inputs({"M": 129, "N": 257, "K": 200}, dtype, "cuda", gen, "normal")
    for bb in (b, b.contiguous(), b.contiguous()[:, 3:], b[5:, :]):
        aa = a[:, : bb.shape[0]]
        check(cuda_mod.kernel_fn(aa, bb), (aa, bb), dtype)
    a_t = a.t().contiguous().t()  # column-major A: scalar-load path
    check(cuda_mod.kernel_fn(a_t, b), (a_t, b), dtype)


# ---------------------------------------------------------------- speed report (script, not a test)
# python3 tests/test_kernels_matmul.py [--sweep]   (on the GPU; writes $OUT/matmul_speed.txt)


def _tflops(fn, args, shape, dtype):
    import triton.testing

    ms = triton.testing.do_bench(lambda: fn(*args), warmup=50, rep=300)
    return SPEC.flops(shape, dtype) / (ms * 1e-3) / 1e12


def _load(backend, cfg=None, tmp=None):
    path = starter_path("matmul", backend)
    if cfg:
        path = tmp / f"matmul_{backend}_{abs(hash(tuple(sorted(cfg.items()))))}.py"
        path.write_text(with_config(starter_path("matmul", backend).read_text(), cfg))
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
            row = f"{SPEC.shape_label(s):>18} {str(dtype):>15} torch {ref:6.1f} TF/s"
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
        kf = read_kernel_file(starter_path("matmul", "triton"))
        shapes = [SPEC.default_shapes[0], SPEC.default_shapes[2], SPEC.default_shapes[4]]
        inputs = [SPEC.make_inputs(s, torch.bfloat16, "cuda", gen) for s in shapes]
        tiles = ((128, 256, 64), (256, 128, 64), (128, 128, 64), (128, 256, 32), (128, 128, 128))
        for variant, (bm, bn, bk), warps, stages in itertools.product(("pointer", "tma"), tiles, (4, 8), (3, 4)):
            cfg = dict(kf.config, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, NUM_WARPS=warps, NUM_STAGES=stages,
                       VARIANT=variant)
            if not base.valid_config(cfg):
                continue
            row = f"sweep bf16 {variant} {bm}x{bn}x{bk} W{warps} S{stages}"
            try:
                mod = _load("triton", cfg, tmp)
                for s, args in zip(shapes, inputs):
                    row += f" | {SPEC.shape_label(s)} {_tflops(mod.kernel_fn, args, s, torch.bfloat16):6.1f}"
            except Exception as exc:
                row += f" | failed {type(exc).__name__}: {str(exc)[:120]}"
            emit(row)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "matmul_speed.txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
