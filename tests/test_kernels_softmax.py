"""softmax: spec facts, the Triton starter against the float64 reference (interpreter on the CPU,
the real GPU when present) at small, edge and adversarial inputs and strided views, the CUDA
starter's compile check and, on the GPU, both backends at every default shape and dtype."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from autokernel.bench.launches import is_foreign
from autokernel.cuda.build import compile_check, nvcc_available, toolchain_missing
from autokernel.kernelfile import import_kernel, parse_source, read_kernel_file, with_config
from autokernel.kernels import get_spec, starter_path

SPEC = get_spec("softmax")
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
    return import_kernel(read_kernel_file(starter_path("softmax", "triton")))


def test_spec_facts():
    s = {"rows": 4096, "cols": 32000}
    assert SPEC.bytes(s, torch.bfloat16) == 2 * 4096 * 32000 * 2
    assert SPEC.flops(s, torch.float32) == 5 * 4096 * 32000
    labels = {SPEC.shape_label(x) for x in SPEC.default_shapes}
    assert {"4096x32000", "65536x2048"} <= labels
    assert "-inf" in SPEC.adversarial and SPEC.tolerance("fp32") == (1e-4, 1e-4)
    # The bench's matcher takes our kernels (Triton and CUDA names) as our own.
    for name in ("_softmax_fused", "_softmax_looped", "void softmax_kernel<__nv_bfloat16>(__nv_bfloat16 const*)"):
        assert not is_foreign(name, SPEC.library_kernel_patterns)
    x = inputs({"rows": 3, "cols": 7}, torch.float32, device="cpu")[0]
    assert torch.equal(SPEC.reference(x), F.softmax(x, dim=-1))


def test_adversarial_inputs():
    x = inputs({"rows": 16, "cols": 64}, torch.float32, "-inf", device="cpu")[0]
    finite = torch.isfinite(x)
    assert finite.any(dim=1).all(), "every row keeps a finite logit"
    assert not finite[:, :32].all(dim=1).any() and (~finite).float().mean() > 0.5
    big = inputs({"rows": 4, "cols": 64}, torch.float16, "large", device="cpu")[0]
    assert torch.isfinite(big).all() and big.abs().max() > 500
    eq = inputs({"rows": 4, "cols": 64}, torch.bfloat16, "equal", device="cpu")[0]
    assert (eq == 0.5).all()


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


def test_triton_long_rows_masked(triton_mod):
    """The looping path with a leading chunk that is -inf everywhere."""
    args = inputs({"rows": 2, "cols": 40000}, torch.float32, "-inf")
    assert torch.isinf(args[0][:, :4096]).all()
    check(triton_mod.kernel_fn(*args), args, torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_triton_strided_views(triton_mod, dtype):
    base = inputs({"rows": 6, "cols": 300}, dtype)[0]
    for view in (base[:, 20:220], base[:, ::3], base.t()[::7].t()[:5], base[::2]):
        check(triton_mod.kernel_fn(view), (view,), dtype)


@pytest.mark.parametrize("config", [
    {"MAX_FUSED_COLS": 8192, "LOOP_BLOCK": 1024},  # 9000 columns loop with a ragged tail
    {"TILE_ELEMS": 1024, "ELEMS_PER_THREAD": 4, "MAX_WARPS": 8},
    {"TILE_ELEMS": 16384},
])
def test_triton_configs(home, config):
    kf = read_kernel_file(starter_path("softmax", "triton"))
    mod = import_kernel(parse_source(with_config(kf.source, config)))
    for shape in ({"rows": 3, "cols": 9000}, {"rows": 33, "cols": 100}):
        args = inputs(shape, torch.float32, seed=3)
        check(mod.kernel_fn(*args), args, torch.float32)


@pytest.mark.skipif(not nvcc_available(), reason="nvcc is not installed")
def test_cuda_source_compiles():
    import autokernel.cuda.starters.softmax as m

    assert read_kernel_file(starter_path("softmax", "cuda")).backend == "cuda"
    compile_check(m.CUDA_SRC, m.CPP_SRC, defines=m.DEFINES, functions=m.FUNCTIONS)
    # The other end of the search space compiles too (scalar loads in every dtype).
    compile_check(m.CUDA_SRC, None, defines={"BLOCK_SIZE": 128, "VEC_BYTES": 4})


@pytest.fixture(scope="module")
def cuda_mod(tmp_path_factory):
    """The CUDA starter, built on first call into a temporary home's cache."""
    mp = pytest.MonkeyPatch()
    mp.setenv("AUTOKERNEL_HOME", str(tmp_path_factory.mktemp("akhome")))
    yield import_kernel(read_kernel_file(starter_path("softmax", "cuda")))
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
            args = inputs({"rows": 64, "cols": 32000}, dtype, scale)
            check(mod.kernel_fn(*args), args, dtype)
        base = inputs({"rows": 64, "cols": 5000}, dtype)[0]
        for view in (base[:, 8:4008], base[:, ::2], base[::3]):
            check(mod.kernel_fn(view), (view,), dtype)
