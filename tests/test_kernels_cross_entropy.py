"""cross_entropy: spec facts, the Triton starter against the float64 reference (interpreter on CPU,
real GPU when present), the CUDA starter's compile check and, on the GPU, every default shape and
dtype for both backends.

Run as a script on a GPU (`python tests/test_kernels_cross_entropy.py [--sweep]`) it times both
starters against eager and torch.compile at the default shapes in bf16 (and with --sweep the
Triton tunables), printing one line per measurement with the fraction of the measured copy
bandwidth.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from autokernel.cuda.build import compile_check, nvcc_available
from autokernel.kernelfile import import_kernel, read_kernel_file, with_config
from autokernel.kernels import get_spec, starter_path

KERNEL = "cross_entropy"
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
    ref = SPEC.reference(*[a.double() if torch.is_tensor(a) and a.is_floating_point() else a for a in args])
    assert out.shape == () and out.dtype == torch.float32 and out.device == args[0].device
    assert not torch.isnan(out), "NaN loss"
    atol, rtol = SPEC.tolerance(dtype)
    torch.testing.assert_close(out.double(), ref.double(), atol=atol, rtol=rtol)


@pytest.fixture(scope="module")
def triton_mod():
    return load_starter("triton")


def test_spec_costs_and_shapes():
    s = {"rows": 4096, "vocab": 32000}
    assert SPEC.bytes(s, torch.bfloat16) == 4096 * 32000 * 2 + 4096 * 8 + 4
    assert SPEC.flops(s, torch.float32) == 4 * 4096 * 32000
    labels = {SPEC.shape_label(x) for x in SPEC.default_shapes}
    assert {"2048x32000", "4096x32000"} <= labels
    assert "nll_loss_forward" in SPEC.library_kernel_patterns and "masked" in SPEC.adversarial
    # What eager launches is foreign; the starters' own kernels (and a plausible candidate's) are not.
    from autokernel.bench.launches import is_foreign

    pats = SPEC.library_kernel_patterns
    assert is_foreign("void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, "
                      "long>(float*, float*, float const*, long const*, float const*, bool, long, long, long)", pats)
    for own in ("_ce_row_loss_kernel", "void ce_row_kernel<__nv_bfloat16>(__nv_bfloat16 const*, long const*, "
                "float*, long, long, long, long, bool)", "fused_log_softmax_nll", "accumulate_loss"):
        assert not is_foreign(own, pats), own
    assert SPEC.parse_shape("rows=3,vocab=7") == {"rows": 3, "vocab": 7}


def test_reference_is_transformers_loss():
    """Mean over non-ignored rows of logsumexp - target logit, fp32 result for 16-bit logits."""
    gen = torch.Generator().manual_seed(0)
    logits, targets, ignore = SPEC.make_inputs({"rows": 64, "vocab": 50}, torch.bfloat16, "cpu", gen)
    keep = targets != ignore
    assert ignore == -100 and 0 < int((~keep).sum()) < 64 and keep[0]
    per_row = torch.logsumexp(logits.double(), dim=-1) - logits.double().gather(1, targets.clamp(min=0)[:, None])[:, 0]
    expected = per_row[keep].mean()
    got = SPEC.reference(logits, targets, ignore)
    assert got.dtype == torch.float32 and got.shape == ()
    assert abs(got.item() - expected.item()) < 1e-5
    # A float64 evaluation stays float64 inside (the bench's upcast reference).
    assert abs(SPEC.reference(logits.double(), targets, ignore).item() - expected.item()) < 1e-6


def test_adversarial_inputs_mean_what_they_say():
    gen = torch.Generator().manual_seed(1)
    v = 1000
    logits, t, _ = SPEC.make_inputs({"rows": 16, "vocab": v}, torch.float32, "cpu", gen, "equal")
    assert abs(SPEC.reference(logits, t).item() - math.log(v)) < 1e-5
    logits, t, ign = SPEC.make_inputs({"rows": 16, "vocab": v}, torch.float16, "cpu", gen, "large")
    assert torch.isfinite(logits).all() and logits.float().abs().max() > 500
    logits, t, ign = SPEC.make_inputs({"rows": 16, "vocab": v}, torch.float32, "cpu", gen, "masked")
    rows = torch.arange(16)
    assert torch.isinf(logits[:, : v // 2][rows[:, None], torch.arange(v // 2)]).float().mean() > 0.9
    assert torch.isfinite(logits[rows, t.clamp(min=0)]).all()
    assert torch.isfinite(SPEC.reference(logits, t, ign))


def test_starter_file_format():
    kf = read_kernel_file(starter_path("cross_entropy", "triton"))
    assert kf.kernel_type == "cross_entropy" and kf.backend == "triton" and kf.deterministic
    assert {"BLOCK_V", "NUM_WARPS", "NUM_STAGES"} <= set(kf.search_space)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shape", SPEC.small_shapes + SPEC.edge_shapes, ids=SPEC.shape_label)
def test_triton_matches_reference(triton_mod, shape, dtype):
    gen = torch.Generator(device=DEVICE).manual_seed(7)
    for scale in ("normal",) + SPEC.adversarial:
        args = SPEC.make_inputs(shape, dtype, DEVICE, gen, scale)
        check(triton_mod.kernel_fn(*args), args, dtype)


def test_triton_strided_inputs_and_other_ignore_index(triton_mod):
    gen = torch.Generator(device=DEVICE).manual_seed(8)
    big = torch.randn(20, 2 * 700 + 5, generator=gen, device=DEVICE).to(torch.float16)
    logits = big[:, 5::2]  # column stride 2, storage offset 5
    t_big = torch.randint(0, 700, (40,), generator=gen, device=DEVICE)
    t_big[4] = 3  # ignore_index 3 below: row 2 (t_big[4]) is not counted
    targets = t_big[::2]
    for ignore in (-100, 3):
        check(triton_mod.kernel_fn(logits, targets, ignore), (logits, targets, ignore), torch.float16)
    lt = torch.randn(300, 12, generator=gen, device=DEVICE).t()  # row stride 1, column stride 12
    tt = torch.randint(0, 300, (12,), generator=gen, device=DEVICE)
    check(triton_mod.kernel_fn(lt, tt), (lt, tt, -100), torch.float32)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy's 0/0 under the interpreter
def test_triton_all_ignored_is_nan_like_torch(triton_mod):
    logits = torch.randn(4, 10, device=DEVICE)
    targets = torch.full((4,), -100, device=DEVICE, dtype=torch.int64)
    assert torch.isnan(F.cross_entropy(logits, targets)) and torch.isnan(triton_mod.kernel_fn(logits, targets))


def test_triton_is_deterministic(triton_mod):
    gen = torch.Generator(device=DEVICE).manual_seed(9)
    args = SPEC.make_inputs({"rows": 40, "vocab": 3000}, torch.bfloat16, DEVICE, gen)
    first = triton_mod.kernel_fn(*args)
    assert torch.equal(first, triton_mod.kernel_fn(*args))


def test_triton_other_configs_stay_correct(tmp_path):
    """Small chunks (several per row, whole -inf chunks under "masked") and a multi-step mean."""
    gen = torch.Generator(device=DEVICE).manual_seed(10)
    cases = [({"rows": 24, "vocab": 2500}, "normal"), ({"rows": 24, "vocab": 2500}, "masked")]
    for cfg, extra in (({"BLOCK_V": 1024, "NUM_WARPS": 4, "MEAN_BLOCK": 256}, [({"rows": 260, "vocab": 16}, "normal")]),
                       ({"BLOCK_V": 2048, "NUM_STAGES": 1}, [])):
        mod = load_starter("triton", cfg, tmp_path)
        for shape, scale in cases + extra:
            args = SPEC.make_inputs(shape, torch.float32, DEVICE, gen, scale)
            check(mod.kernel_fn(*args), args, torch.float32)


def test_tolerance_rejects_a_bf16_running_sum():
    """A kernel that keeps its running sum of exponentials in bf16 (fp32 chunk sums, bf16 total)
    is off by ~8e-3 here: the 16-bit tolerance must reject it although 1e-2 would not."""
    gen = torch.Generator().manual_seed(11)
    logits, t, ign = SPEC.make_inputs({"rows": 64, "vocab": 32000}, torch.bfloat16, "cpu", gen)
    x = logits.float()
    m = x.max(dim=-1, keepdim=True).values
    chunk_sums = torch.exp(x - m).view(64, -1, 256).sum(dim=-1)
    total = torch.zeros(64, dtype=torch.bfloat16)
    for i in range(chunk_sums.shape[1]):
        total = (total.float() + chunk_sums[:, i]).to(torch.bfloat16)
    keep = t != ign
    per_row = m[:, 0] + torch.log(total.float()) - x.gather(1, t.clamp(min=0)[:, None])[:, 0]
    sloppy = per_row[keep].mean().item()
    ref = SPEC.reference(logits.double(), t, ign).item()
    atol, rtol = SPEC.tolerance(torch.bfloat16)
    assert abs(sloppy - ref) > 2 * (atol + rtol * abs(ref)), (sloppy, ref)


# ---------------------------------------------------------------- CUDA starter


@pytest.mark.skipif(not nvcc_available(), reason="nvcc not found")
def test_cuda_starter_compiles():
    """Both halves at the default config; the device code again at the other end of the space."""
    mod = load_starter("cuda")
    assert mod.KERNEL_TYPE == KERNEL and mod.BACKEND == "cuda"
    compile_check(mod.CUDA_SRC, mod.CPP_SRC, defines=mod.DEFINES, functions=mod.FUNCTIONS)
    other = {"BLOCK_SIZE": 128, "VEC_BYTES": 4, "MEAN_THREADS": 256}
    assert mod.valid_config(other)
    compile_check(mod.CUDA_SRC, defines=other)


# ---------------------------------------------------------------- GPU: every default shape and dtype


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["triton", "cuda"])
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shape", SPEC.default_shapes + SPEC.edge_shapes, ids=SPEC.shape_label)
def test_gpu_default_shapes(backend, shape, dtype):
    mod = load_starter(backend)
    gen = torch.Generator(device="cuda").manual_seed(12)
    for scale in ("normal",) + SPEC.adversarial:
        args = SPEC.make_inputs(shape, dtype, "cuda", gen, scale)
        check(mod.kernel_fn(*args), args, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["triton", "cuda"])
def test_gpu_deterministic_and_strided(backend):
    mod = load_starter(backend)
    gen = torch.Generator(device="cuda").manual_seed(13)
    logits, t, ign = SPEC.make_inputs({"rows": 2048, "vocab": 32000}, torch.bfloat16, "cuda", gen)
    assert torch.equal(mod.kernel_fn(logits, t, ign), mod.kernel_fn(logits, t, ign))
    wide = torch.randn(256, 32002, generator=gen, device="cuda").to(torch.bfloat16)[:, 1:32001]
    tt = torch.randint(0, 32000, (512,), generator=gen, device="cuda")[::2]
    check(mod.kernel_fn(wide, tt, -100), (wide, tt, -100), torch.bfloat16)


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
    def eager(logits, targets, ignore_index=-100):
        return F.cross_entropy(logits.float(), targets, ignore_index=ignore_index)

    sweep = {"BLOCK_V": [2048, 4096, 8192, 16384], "NUM_WARPS": [4, 8, 16], "NUM_STAGES": [1, 2, 3]}
    timing_report(eager, torch.bfloat16, sweep if "--sweep" in sys.argv else None)
