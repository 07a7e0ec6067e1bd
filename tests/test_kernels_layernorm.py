"""layernorm: spec facts, the Triton starter against the float64 reference (interpreter on the
CPU, the real GPU when present) at small, edge and adversarial inputs and strided views, the CUDA
starter's compile check and, on the GPU, both backends at every default shape and dtype."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from autokernel.bench.launches import is_foreign
from autokernel.cuda.build import compile_check, nvcc_available, toolchain_missing
from autokernel.kernelfile import import_kernel, parse_source, read_kernel_file, with_config
from autokernel.kernels import get_spec, starter_path

SPEC = get_spec("layernorm")
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
    return import_kernel(read_kernel_file(starter_path("layernorm", "triton")))


def test_spec_facts():
    s = {"rows": 8192, "cols": 4096}
    assert SPEC.bytes(s, torch.bfloat16) == (2 * 8192 * 4096 + 2 * 4096) * 2
    assert SPEC.flops(s, torch.float32) == 7 * 8192 * 4096
    labels = {SPEC.shape_label(x) for x in SPEC.default_shapes}
    assert {"2048x4096", "8192x4096"} <= labels
    # The bench's matcher takes our kernels (Triton and CUDA names) as our own.
    for name in ("_layernorm_fused", "_layernorm_looped", "void layernorm_kernel<__nv_bfloat16>(__nv_bfloat16 const*)"):
        assert not is_foreign(name, SPEC.library_kernel_patterns)
    x, w, b, eps = inputs({"rows": 3, "cols": 10}, torch.float32, device="cpu")
    assert eps == 1e-5 and w.shape == b.shape == (10,) and not torch.equal(w, torch.ones(10))
    assert torch.equal(SPEC.reference(x, w, b, eps), F.layer_norm(x, (10,), w, b, eps))
    ln = torch.nn.LayerNorm(10, eps=eps)
    with torch.no_grad():
        ln.weight.copy_(w)
        ln.bias.copy_(b)
        assert torch.equal(SPEC.reference(x, w, b, eps), ln(x))


def test_adversarial_inputs():
    x = inputs({"rows": 4, "cols": 64}, torch.float32, "offset", device="cpu")[0]
    assert 299 < x.mean() < 301 and 0.5 < x.std() < 2
    x = inputs({"rows": 4, "cols": 64}, torch.float32, "equal", device="cpu")
    assert (x[0] == 0.5).all() and torch.allclose(SPEC.reference(*x), x[2].expand(4, 64))


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


def test_triton_constant_rows_give_bias(triton_mod):
    """Variance exactly 0: y is the bias, bit for bit (two-pass statistics)."""
    x, w, b, eps = inputs({"rows": 5, "cols": 300}, torch.float32, "equal")
    assert torch.equal(triton_mod.kernel_fn(x, w, b, eps), b.expand(5, 300))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_triton_strided_views(triton_mod, dtype):
    x, w, b, eps = inputs({"rows": 6, "cols": 300}, dtype)
    for view in (x[:, 20:220], x[:, ::3], x.t()[::7].t()[:5], x[::2]):
        cols = view.shape[1]
        args = (view, w[:cols], b[:cols], eps)
        check(triton_mod.kernel_fn(*args), args, dtype)
    wide = inputs({"rows": 2, "cols": 600}, dtype)  # strided weight and bias
    args = (x, wide[1][::2], wide[2][::2], eps)
    check(triton_mod.kernel_fn(*args), args, dtype)


@pytest.mark.parametrize("config", [
    {"MAX_FUSED_COLS": 4096, "LOOP_BLOCK": 1024},  # 9000 columns loop with a ragged tail
    {"TILE_ELEMS": 1024, "ELEMS_PER_THREAD": 4, "MAX_WARPS": 8},
    {"TILE_ELEMS": 16384},
])
def test_triton_configs(home, config):
    kf = read_kernel_file(starter_path("layernorm", "triton"))
    mod = import_kernel(parse_source(with_config(kf.source, config)))
    for shape in ({"rows": 3, "cols": 9000}, {"rows": 33, "cols": 100}):
        args = inputs(shape, torch.float32, seed=3)
        check(mod.kernel_fn(*args), args, torch.float32)


@pytest.mark.skipif(not nvcc_available(), reason="nvcc is not installed")
def test_cuda_source_compiles():
    import autokernel.cuda.starters.layernorm as m

    assert read_kernel_file(starter_path("layernorm", "cuda")).backend == "cuda"
    compile_check(m.CUDA_SRC, m.CPP_SRC, defines=m.DEFINES, functions=m.FUNCTIONS)
    compile_check(m.CUDA_SRC, None, defines={"BLOCK_SIZE": 1024, "VEC_BYTES": 4, "SMEM_BYTES": 0})


@pytest.fixture(scope="module")
def cuda_mod(tmp_path_factory):
    """The CUDA starter, built on first call into a temporary home's cache."""
    mp = pytest.MonkeyPatch()
    mp.setenv("AUTOKERNEL_HOME", str(tmp_path_factory.mktemp("akhome")))
    yield import_kernel(read_kernel_file(starter_path("layernorm", "cuda")))
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
        x, w, b, eps = inputs({"rows": 64, "cols": 5000}, dtype)
        for view in (x[:, 8:4008], x[:, ::2], x[::3]):
            cols = view.shape[1]
            args = (view, w[:cols], b[:cols], eps)
            check(mod.kernel_fn(*args), args, dtype)
