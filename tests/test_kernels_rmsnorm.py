"""rmsnorm: spec facts (the reference is transformers' LlamaRMSNorm bit for bit), the Triton
starter against the float64 reference (interpreter on the CPU, the real GPU when present) at
small, edge and adversarial inputs and strided views, the CUDA starter's compile check and, on
the GPU, both backends at every default shape and dtype."""

from __future__ import annotations

import pytest
import torch

from autokernel.bench.launches import is_foreign
from autokernel.cuda.build import compile_check, nvcc_available, toolchain_missing
from autokernel.kernelfile import import_kernel, parse_source, read_kernel_file, with_config
from autokernel.kernels import get_spec, starter_path

SPEC = get_spec("rmsnorm")
HAS_CUDA = torch.cuda.is_available()
DEVICE = "cuda" if HAS_CUDA else "cpu"


def check(out: torch.Tensor, args: tuple, dtype: torch.dtype) -> None:
    ref = SPEC.reference(*[a.double() if torch.is_tensor(a) else a for a in args])
    assert out.shape == ref.shape and out.dtype == dtype and out.device == args[0].device
    assert not torch.isnan(out).any()
    atol, rtol = SPEC.tolerance(dtype)
    torch.testing.assert_close(out.double(), ref, atol=atol, rtol=rtol)


def inputs(shape, dtype, scale="normal", seed=0, device=DEVICE):
    gen = torch.Generator(device=device).manual_seed(seed)
    return SPEC.make_inputs(shape, dtype, device, gen, scale)


@pytest.fixture(scope="module")
def triton_mod():
    return import_kernel(read_kernel_file(starter_path("rmsnorm", "triton")))


def test_spec_facts():
    s = {"rows": 8192, "cols": 4096}
    assert SPEC.bytes(s, torch.bfloat16) == (2 * 8192 * 4096 + 4096) * 2
    assert SPEC.flops(s, torch.float32) == 4 * 8192 * 4096
    labels = {SPEC.shape_label(x) for x in SPEC.default_shapes}
    assert {"2048x4096", "8192x4096"} <= labels
    # The bench's matcher takes our kernels (Triton and CUDA names) as our own.
    for name in ("_rmsnorm_fused", "_rmsnorm_looped", "void rmsnorm_kernel<__nv_bfloat16>(__nv_bfloat16 const*)"):
        assert not is_foreign(name, SPEC.library_kernel_patterns)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_reference_is_llama_rmsnorm(dtype):
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    x, w, eps = inputs({"rows": 9, "cols": 48}, dtype, device="cpu")
    assert eps == 1e-6
    norm = LlamaRMSNorm(48, eps=eps).to(dtype)
    with torch.no_grad():
        norm.weight.copy_(w)
        assert torch.equal(SPEC.reference(x, w, eps), norm(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", SPEC.small_shapes + SPEC.edge_shapes, ids=SPEC.shape_label)
def test_triton_shapes(triton_mod, shape, dtype):
    if shape["cols"] > 32768 and dtype == torch.bfloat16:
        pytest.skip("the long-row path is covered in fp32/fp16; keeps the interpreter run short")
    args = inputs(shape, dtype)
    check(triton_mod.kernel_fn(*args), args, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("scale", SPEC.adversarial)
def test_triton_adversarial(triton_mod, scale, dtype):
    for shape in ({"rows": 7, "cols": 1000}, {"rows": 37, "cols": 129}):
        args = inputs(shape, dtype, scale)
        check(triton_mod.kernel_fn(*args), args, dtype)


def test_triton_rounds_like_transformers(triton_mod):
    """The normalised value is rounded to x's dtype before the weight multiply; doing the multiply
    in fp32 instead changes a quarter of the outputs by one ulp. Checked in fp16: the interpreter
    casts fp32 to bf16 by truncation (the GPU rounds to nearest), so bf16 is checked on the GPU."""
    x, w, eps = inputs({"rows": 16, "cols": 1000}, torch.float16)
    out, ref = triton_mod.kernel_fn(x, w, eps), SPEC.reference(x, w, eps)
    fused = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps) * w.float()).half()
    same = (out == ref).float().mean().item()
    assert same > 0.99 and (fused == ref).float().mean().item() < 0.9


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_triton_strided_views(triton_mod, dtype):
    x, w, eps = inputs({"rows": 6, "cols": 300}, dtype)
    for view in (x[:, 20:220], x[:, ::3], x.t()[::7].t()[:5], x[::2]):
        cols = view.shape[1]
        args = (view, w[:cols], eps)
        check(triton_mod.kernel_fn(*args), args, dtype)
    wide = inputs({"rows": 2, "cols": 600}, dtype)[1]  # a strided weight
    args = (x, wide[::2], eps)
    check(triton_mod.kernel_fn(*args), args, dtype)


@pytest.mark.parametrize("config", [
    {"MAX_FUSED_COLS": 4096, "LOOP_BLOCK": 1024},  # 9000 columns loop with a ragged tail
    {"TILE_ELEMS": 1024, "ELEMS_PER_THREAD": 4, "MAX_WARPS": 8},
    {"TILE_ELEMS": 16384},
])
def test_triton_configs(home, config):
    kf = read_kernel_file(starter_path("rmsnorm", "triton"))
    mod = import_kernel(parse_source(with_config(kf.source, config)))
    for shape in ({"rows": 3, "cols": 9000}, {"rows": 33, "cols": 100}):
        args = inputs(shape, torch.float32, seed=3)
        check(mod.kernel_fn(*args), args, torch.float32)


@pytest.mark.skipif(not nvcc_available(), reason="nvcc is not installed")
def test_cuda_source_compiles():
    import autokernel.cuda.starters.rmsnorm as m

    assert read_kernel_file(starter_path("rmsnorm", "cuda")).backend == "cuda"
    compile_check(m.CUDA_SRC, m.CPP_SRC, defines=m.DEFINES, functions=m.FUNCTIONS)
    compile_check(m.CUDA_SRC, None, defines={"BLOCK_SIZE": 1024, "VEC_BYTES": 4, "SMEM_BYTES": 0})


@pytest.fixture(scope="module")
def cuda_mod(tmp_path_factory):
    """The CUDA starter, built on first call into a temporary home's cache."""
    mp = pytest.MonkeyPatch()
    mp.setenv("AUTOKERNEL_HOME", str(tmp_path_factory.mktemp("akhome")))
    yield import_kernel(read_kernel_file(starter_path("rmsnorm", "cuda")))
    mp.undo()


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["triton", "cuda"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", SPEC.default_shapes, ids=SPEC.shape_label)
def test_gpu_default_shapes(triton_mod, cuda_mod, backend, shape, dtype):
    if backend == "cuda" and toolchain_missing():
        pytest.skip(f"cannot build CUDA extensions: {toolchain_missing()}")
    mod = triton_mod if backend == "triton" else cuda_mod
    args = inputs(shape, dtype)
    check(mod.kernel_fn(*args), args, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["triton", "cuda"])
def test_gpu_edges_and_scales(triton_mod, cuda_mod, backend):
    if backend == "cuda" and toolchain_missing():
        pytest.skip(f"cannot build CUDA extensions: {toolchain_missing()}")
    mod = triton_mod if backend == "triton" else cuda_mod
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for shape in SPEC.edge_shapes + SPEC.small_shapes:
            args = inputs(shape, dtype)
            check(mod.kernel_fn(*args), args, dtype)
        for scale in SPEC.adversarial:
            args = inputs({"rows": 64, "cols": 4096}, dtype, scale)
            check(mod.kernel_fn(*args), args, dtype)
        x, w, eps = inputs({"rows": 64, "cols": 5000}, dtype)
        for view in (x[:, 8:4008], x[:, ::2], x[::3]):
            args = (view, w[:view.shape[1]], eps)
            check(mod.kernel_fn(*args), args, dtype)
        if dtype == torch.bfloat16:  # transformers' rounding order, on the device
            x, w, eps = inputs({"rows": 256, "cols": 4096}, dtype)
            assert (mod.kernel_fn(x, w, eps) == SPEC.reference(x, w, eps)).float().mean() > 0.97
