"""reduce: spec facts (O(1) row sums at every length, a tolerance that rejects 16-bit
accumulation), the Triton starter against the float64 reference (interpreter on CPU, real GPU
when present) including the split-row path, the CUDA starter's compile check and, on the GPU,
every default shape and dtype for both backends.

Run as a script on a GPU (`python tests/test_kernels_reduce.py [--sweep]`) it times both starters
against eager and torch.compile at the default shapes in bf16 and fp32 (and with --sweep the
Triton tunables), printing one line per measurement with the fraction of the measured copy
bandwidth.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from autokernel.cuda.build import compile_check, nvcc_available
from autokernel.kernelfile import import_kernel, read_kernel_file, with_config
from autokernel.kernels import get_spec, starter_path

KERNEL = "reduce"
SPEC = get_spec(KERNEL)
HAS_CUDA = torch.cuda.is_available()
DEVICE = "cuda" if HAS_CUDA else "cpu"
ALL_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def load_starter(backend: str, config: dict | None = None, tmp_path: Path | None = None):
    path = starter_path(KERNEL, backend)
    if not config:
        return import_kernel(read_kernel_file(path))
    target = tmp_path / f"{KERNEL}_{abs(hash(tuple(sorted(config.items()))))}.py"
    target.write_text(with_config(path.read_text(), config))
    return import_kernel(read_kernel_file(target))


def check(out: torch.Tensor, args: tuple, dtype: torch.dtype) -> None:
    x = args[0]
    ref = SPEC.reference(x.double())
    assert out.shape == (x.shape[0],) and out.dtype == dtype and out.device == x.device
    assert not torch.isnan(out).any()
    atol, rtol = SPEC.tolerance(dtype)
    torch.testing.assert_close(out.double(), ref, atol=atol, rtol=rtol)


@pytest.fixture(scope="module")
def triton_mod():
    return load_starter("triton")


def test_spec_costs_and_shapes():
    s = {"rows": 8192, "cols": 32768}
    assert SPEC.bytes(s, torch.float32) == 4 * (8192 * 32768 + 8192)
    assert SPEC.flops(s, torch.bfloat16) == 8192 * 32768
    labels = {SPEC.shape_label(x) for x in SPEC.default_shapes}
    assert {"8192x32768", "4096x4096"} <= labels
    assert "at::native::reduce_kernel" in SPEC.library_kernel_patterns
    from autokernel.bench.launches import is_foreign

    pats = SPEC.library_kernel_patterns
    assert is_foreign("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t"
                      "<float, at::native::sum_functor<float, float, float>::operator()>, unsigned int, float, 4> >", pats)
    for own in ("_row_sum_kernel", "void block_rows_kernel<__nv_bfloat16, __nv_bfloat16, 8>(__nv_bfloat16 const*, "
                "__nv_bfloat16*, long, long, long)", "row_reduce_sum", "accumulate_rows"):
        assert not is_foreign(own, pats), own


def test_reference_accumulates_in_fp32_and_rounds_once():
    x = torch.full((1, 4096), 1.0, dtype=torch.bfloat16)
    x[0, 0] = 256.0  # bf16 accumulation would stall at 256 (+1 rounds away); fp32 does not
    assert SPEC.reference(x).item() == 4352.0  # 4351 rounded once to bf16 (spacing 32 there)
    assert SPEC.reference(x).dtype == torch.bfloat16
    assert SPEC.reference(x.double()).item() == 4351.0


@pytest.mark.parametrize("cols", [1, 100, 32768])
def test_row_sums_are_order_one_at_every_length(cols):
    gen = torch.Generator().manual_seed(cols)
    (x,) = SPEC.make_inputs({"rows": 256, "cols": cols}, torch.float32, "cpu", gen)
    std = SPEC.reference(x).std().item()
    assert 0.7 < std < 1.3, std


def test_tolerance_rejects_16_bit_accumulation():
    """A running total kept in bf16 along a 32768-long row is off by ~eps16 * sqrt(cols / 2) ~ 0.25:
    the tolerance rejects it on most rows; the fp32-accumulated result passes."""
    dtype = torch.bfloat16
    gen = torch.Generator().manual_seed(7)
    (x,) = SPEC.make_inputs({"rows": 8, "cols": 32768}, dtype, "cpu", gen)
    cols = x.float().t().contiguous()
    total = torch.zeros(8, dtype=dtype)
    for i in range(cols.shape[0]):
        total = (total.float() + cols[i]).to(dtype)
    ref = SPEC.reference(x.double())
    atol, rtol = SPEC.tolerance(dtype)
    over = (total.double() - ref).abs() > atol + rtol * ref.abs()
    assert over.sum().item() >= 4, "16-bit accumulation should fail the tolerance"
    torch.testing.assert_close(SPEC.reference(x).double(), ref, atol=atol, rtol=rtol)


def test_starter_file_format():
    kf = read_kernel_file(starter_path(KERNEL, "triton"))
    assert kf.kernel_type == KERNEL and kf.backend == "triton" and kf.deterministic
    assert {"BLOCK_C", "TILE", "NUM_WARPS", "MIN_PROGRAMS"} <= set(kf.search_space)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shape", SPEC.small_shapes + SPEC.edge_shapes, ids=SPEC.shape_label)
def test_triton_matches_reference(triton_mod, shape, dtype):
    gen = torch.Generator(device=DEVICE).manual_seed(8)
    for scale in ("normal",) + SPEC.adversarial:
        args = SPEC.make_inputs(shape, dtype, DEVICE, gen, scale)
        check(triton_mod.kernel_fn(*args), args, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_triton_strided_and_split_rows_are_deterministic(triton_mod, dtype):
    """A transposed x, a column-strided slice with an offset, and the split path (few long rows)
    gives the same bits as the same values laid out contiguously."""
    gen = torch.Generator(device=DEVICE).manual_seed(9)
    (x,) = SPEC.make_inputs({"rows": 3, "cols": 9000}, dtype, DEVICE, gen)
    out = triton_mod.kernel_fn(x)
    check(out, (x,), dtype)
    assert torch.equal(out, triton_mod.kernel_fn(x.t().contiguous().t()))
    wide = torch.randn(5, 2 * 700 + 1, generator=gen, device=DEVICE).to(dtype)
    sl = wide[:, 1::2]
    check(triton_mod.kernel_fn(sl), (sl,), dtype)


def test_triton_other_configs_stay_correct(tmp_path):
    """Small chunks (multi-chunk loops, packed short rows, many segments) and no split at all."""
    gen = torch.Generator(device=DEVICE).manual_seed(10)
    for cfg in ({"BLOCK_C": 512, "TILE": 2048, "NUM_WARPS": 2, "MIN_PROGRAMS": 264},
                {"BLOCK_C": 8192, "TILE": 16384, "NUM_STAGES": 1, "MIN_PROGRAMS": 264}):
        mod = load_starter("triton", cfg, tmp_path)
        for shape in ({"rows": 2, "cols": 3000}, {"rows": 40, "cols": 1100}):
            args = SPEC.make_inputs(shape, torch.float32, DEVICE, gen)
            check(mod.kernel_fn(*args), args, torch.float32)


# ---------------------------------------------------------------- CUDA starter


@pytest.mark.skipif(not nvcc_available(), reason="nvcc not found")
def test_cuda_starter_compiles():
    """Both halves at the default config; the device code again at the other end of the space."""
    mod = load_starter("cuda")
    assert mod.KERNEL_TYPE == KERNEL and mod.BACKEND == "cuda"
    compile_check(mod.CUDA_SRC, mod.CPP_SRC, defines=mod.DEFINES, functions=mod.FUNCTIONS)
    other = {"BLOCK_SIZE": 1024, "VEC_BYTES": 4, "SHORT_COLS": 256, "WARPS_PER_BLOCK": 16, "MIN_BLOCKS": 264}
    assert mod.valid_config(other)
    compile_check(mod.CUDA_SRC, defines=other)


# ---------------------------------------------------------------- GPU: every default shape and dtype


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["triton", "cuda"])
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shape", SPEC.default_shapes + SPEC.edge_shapes, ids=SPEC.shape_label)
def test_gpu_default_shapes(backend, shape, dtype):
    mod = load_starter(backend)
    gen = torch.Generator(device="cuda").manual_seed(11)
    for scale in ("normal",) + SPEC.adversarial:
        args = SPEC.make_inputs(shape, dtype, "cuda", gen, scale)
        check(mod.kernel_fn(*args), args, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["triton", "cuda"])
@pytest.mark.parametrize("shape", [{"rows": 1, "cols": 10_000_000}, {"rows": 7, "cols": 333_333},
                                   {"rows": 100_000, "cols": 37}], ids=SPEC.shape_label)
def test_gpu_split_and_packed_paths(backend, shape):
    """Few very long rows (split into segments), and many short ones (packed), reproducibly."""
    mod = load_starter(backend)
    gen = torch.Generator(device="cuda").manual_seed(12)
    args = SPEC.make_inputs(shape, torch.bfloat16, "cuda", gen)
    out = mod.kernel_fn(*args)
    check(out, args, torch.bfloat16)
    assert torch.equal(out, mod.kernel_fn(*args))


# ---------------------------------------------------------------- GPU timing script


def timing_report(eager, dtype: torch.dtype, sweep: dict | None) -> None:
    """Starters vs eager and torch.compile at the default shapes, as fractions of the measured copy
    bandwidth (read+write of a 1 GiB copy), one line each; --sweep walks Triton tunables too."""
    import itertools
    import tempfile

    from triton.testing import do_bench

    def emit(line: str) -> None:
        print(line, flush=True)

    src = torch.empty(2**28, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    copy_gbps = 2 * src.numel() * 4 / do_bench(lambda: dst.copy_(src), rep=200) / 1e6
    del src, dst
    emit(f"{torch.cuda.get_device_name()} torch {torch.__version__} copy {copy_gbps:.0f} GB/s")
    fns = {"eager": eager, "compile": torch.compile(eager, mode="max-autotune-no-cudagraphs")}
    for backend in ("triton", "cuda"):
        try:
            fns[backend] = load_starter(backend).kernel_fn
        except Exception as exc:  # report and go on: one backend failing must not hide the other
            emit(f"{backend} starter unavailable: {type(exc).__name__}: {str(exc)[-300:]}")
    tmp = Path(tempfile.mkdtemp())
    if sweep:
        base = read_kernel_file(starter_path(KERNEL, "triton")).config
        for values in itertools.product(*sweep.values()):
            cfg = dict(zip(sweep, values))
            try:
                mod = load_starter("triton", cfg, tmp)
                if mod.valid_config(dict(base, **cfg)):
                    fns["triton " + ",".join(f"{k}={v}" for k, v in cfg.items())] = mod.kernel_fn
            except Exception as exc:
                emit(f"config {cfg} failed to load: {exc}")
    for shape in SPEC.default_shapes:
        gen = torch.Generator(device="cuda").manual_seed(0)
        args = SPEC.make_inputs(shape, dtype, "cuda", gen)
        torch.cuda.synchronize()
        nbytes = SPEC.bytes(shape, dtype)
        for name, fn in fns.items():
            try:
                fn(*args)  # builds / autotunes outside the timed region
                torch.cuda.synchronize()
                ms = do_bench(lambda: fn(*args), rep=200)
            except Exception as exc:
                emit(f"{KERNEL} {SPEC.shape_label(shape)} {name}: failed {type(exc).__name__}: {str(exc)[-200:]}")
                continue
            gbps = nbytes / ms / 1e6
            emit(f"{KERNEL} {SPEC.shape_label(shape)} {str(dtype)[6:]} {name:10s} {ms * 1e3:9.1f} us "
                 f"{gbps:7.0f} GB/s {100 * gbps / copy_gbps:5.1f}% of copy")


if __name__ == "__main__":
    from autokernel.kernels.reduce import reference as eager

    sweep = {"BLOCK_C": [2048, 4096, 8192], "TILE": [4096, 8192, 16384], "NUM_WARPS": [4, 8, 16]}
    for dt in (torch.bfloat16, torch.float32):
        timing_report(eager, dt, sweep if "--sweep" in sys.argv else None)
