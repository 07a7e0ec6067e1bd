"""Kernels that pass under the interpreter must also compile for the H200: every starter and every
generated KernelBench start is run under the interpreter with its launches recorded, and each
recorded launch is lowered to Triton IR for sm_90 (autokernel/bench/gpu_compile.py). CPU only:
on a GPU the GPU tests compile them for real."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from autokernel.kernels import KERNEL_TYPES, get_spec

pytestmark = [
    pytest.mark.skipif(torch.cuda.is_available(), reason="the GPU tests compile these for real"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]


# The interpreter lets `t` change shape inside the loop; Triton's code generator does not.
@triton.jit
def rebinding(x_ptr, n, B: tl.constexpr):
    r = tl.arange(0, B)
    t = r // 2
    acc = tl.zeros([B], tl.float32)
    for i in range(0, n, 4):
        t = (i + tl.arange(0, 32)) // 3
        acc += tl.load(x_ptr + r).to(tl.float32) + tl.sum(t, 0)
    tl.store(x_ptr + r, acc)


@triton.jit
def _twice(v):
    return v * 2.0


@triton.jit
def fine(x_ptr, B: tl.constexpr):
    r = tl.arange(0, B)
    tl.store(x_ptr + r, _twice(tl.load(x_ptr + r)))


def test_a_kernel_the_interpreter_accepts_but_the_compiler_rejects_is_caught():
    from autokernel.bench.gpu_compile import GpuCompileError, compile_for_gpu, record_launches

    x = torch.ones(64)
    with record_launches() as launches:
        fine[(1,)](x, B=64)
    assert torch.equal(x, torch.full((64,), 2.0))  # the recorded launch still ran
    assert compile_for_gpu(launches) == 1  # and it compiles, helper included

    with record_launches() as launches:
        rebinding[(1,)](x, 8, B=64)
    assert len(launches) == 1 and launches[0].signature == {"x_ptr": "*fp32", "n": "i32", "B": "constexpr"}
    assert launches[0].attrs == {(0,): "D"}  # the pointer marked 16-byte aligned, as the launcher does
    with pytest.raises(GpuCompileError, match="rebinding does not compile for sm_90.*Loop-carried"):
        compile_for_gpu(launches)


# A float scale into an fp32 accumulator: Triton's launcher types `s` fp32, Inductor fp64.
@triton.jit
def scaled_dot(a_ptr, b_ptr, c_ptr, s, CAST: tl.constexpr, B: tl.constexpr):
    if CAST:
        s = tl.cast(s, tl.float32)
    r = tl.arange(0, B)
    a = tl.load(a_ptr + r[:, None] * B + r[None, :])
    b = tl.load(b_ptr + r[:, None] * B + r[None, :])
    acc = tl.zeros([B, B], tl.float32) * s
    acc = tl.dot(a, b, acc)
    tl.store(c_ptr + r[:, None] * B + r[None, :], acc)


@triton.jit
def scaled_rows(x_ptr, s, CAST: tl.constexpr, B: tl.constexpr):
    if CAST:
        s = tl.cast(s, tl.float32)
    r = tl.arange(0, B)
    x = tl.load(x_ptr + r).to(tl.float32)
    tl.store(x_ptr + r, tl.sqrt(x * x + s))


def test_a_kernel_that_breaks_or_goes_fp64_as_torch_compile_launches_it_is_caught():
    from autokernel.bench.gpu_compile import (GpuCompileError, compile_for_gpu, fp64_ops, inductor_signature,
                                              record_launches)

    a, c = torch.randn(16, 16, dtype=torch.float16), torch.empty(16, 16)
    with record_launches() as launches:
        scaled_dot[(1,)](a, a, c, 0.5, CAST=False, B=16)
    assert launches[0].signature["s"] == "fp32"  # Triton's launcher
    assert inductor_signature(launches[0].signature)["s"] == "fp64"
    assert compile_for_gpu(launches) == 1  # fine as Triton launches it
    try:  # as torch.compile launches it, Triton 3.6 rejects the fp64 accumulator; 3.9 takes it, in fp64
        compile_for_gpu(launches, as_compiled=True)
        broke = False
    except GpuCompileError as exc:
        assert "scaled_dot does not compile for sm_90 as torch.compile launches it" in str(exc)
        broke = True
    assert broke or fp64_ops(launches)["scaled_dot"] > 0
    with record_launches() as launches:
        scaled_dot[(1,)](a, a, c, 0.5, CAST=True, B=16)
    assert compile_for_gpu(launches, as_compiled=True) == 1

    x = torch.rand(32)
    with record_launches() as launches:
        scaled_rows[(1,)](x, 1e-6, CAST=False, B=32)
        scaled_rows[(1,)](x, 1e-6, CAST=True, B=32)
    assert compile_for_gpu(launches, as_compiled=True) == 2  # it compiles either way ...
    assert fp64_ops(launches[:1])["scaled_rows"] >= 3  # ... but the row's add, mul and sqrt ran in fp64
    assert fp64_ops(launches[1:]) == {"scaled_rows": 0}


@pytest.mark.parametrize("kernel_type", KERNEL_TYPES)
def test_triton_starters_compile_for_the_gpu(kernel_type):
    """Also as torch.compile launches them (their float arguments fp64), with no fp64 math left:
    verify and apply trace them into compiled models."""
    from autokernel.bench.gpu_compile import compile_for_gpu, fp64_ops, record_launches
    from autokernel.kernelfile import import_kernel, read_kernel_file
    from autokernel.kernels import starter_path

    spec = get_spec(kernel_type)
    mod = import_kernel(read_kernel_file(starter_path(kernel_type, "triton")))
    gen = torch.Generator().manual_seed(0)
    with record_launches() as launches:
        for shape in spec.small_shapes[:2]:
            for dtype in (torch.float32, torch.bfloat16):
                mod.kernel_fn(*spec.make_inputs(shape, dtype, "cpu", gen, "normal"))
    assert launches, "the starter launched no Triton kernel"
    compile_for_gpu(launches, as_compiled=True)
    assert not any(fp64_ops(launches).values()), fp64_ops(launches)



# Starter variants the committed defaults do not launch (test_kernels_flash_attention.py also
# compiles the tma variant fully for sm_90a, through ptxas).
VARIANTS = [("flash_attention", {"VARIANT": "tma", "WARP_SPEC": False}),
            ("flash_attention", {"VARIANT": "tma", "WARP_SPEC": True, "NUM_WARPS": 4})]


@pytest.mark.parametrize("kernel_type,config", VARIANTS, ids=[f"{t}-{c}" for t, c in VARIANTS])
def test_triton_starter_variants_compile_for_the_gpu(tmp_path, kernel_type, config):
    from autokernel.bench.gpu_compile import compile_for_gpu, fp64_ops, record_launches
    from autokernel.kernelfile import import_kernel, read_kernel_file, with_config
    from autokernel.kernels import starter_path

    spec = get_spec(kernel_type)
    path = tmp_path / f"{kernel_type}_variant.py"
    path.write_text(with_config(starter_path(kernel_type, "triton").read_text(), config))
    mod = import_kernel(read_kernel_file(path))
    gen = torch.Generator().manual_seed(0)
    with record_launches() as launches:
        for shape in spec.small_shapes[:2]:
            mod.kernel_fn(*spec.make_inputs(shape, torch.float16, "cpu", gen, "normal"))
    assert [rec.name for rec in launches] == ["_attn_fwd_tma"] * 2  # causal and not
    assert compile_for_gpu(launches, as_compiled=True) == 2
    assert fp64_ops(launches) == {"_attn_fwd_tma": 0}

# Smaller inputs where the GPU test's take the interpreter long; the compiled kernels are the same.
SMALLER = {"max-min-prod": "torch.randn(4, 30, 7)", "depthwise": "torch.randn(1, 32, 10, 10)"}


@pytest.mark.parametrize("name", ["rms-channels", "l2-norm", "mse", "huber", "conv-relu-bias", "argmax-ties",
                                  "max-min-prod", "log-softmax", "kl", "triplet", "conv2d", "conv1d-dilated",
                                  "conv3d", "depthwise", "conv-transpose", "maxpool", "avgpool"])
def test_generated_kb_starts_compile_for_the_gpu(home, name):
    from test_kb_ops_gpu import CASES, HEAD, MODEL

    from autokernel.bench.gpu_compile import compile_for_gpu, record_launches
    from autokernel.kb.problems import Problem, load_source
    from autokernel.kb.solutions import KIND_TORCH, initial_solution

    init, args, expr, inputs, _ = CASES[name]
    inputs = SMALLER.get(name, inputs)
    p = Problem("checkout", 1, 1, f"cc_{name.replace('-', '_')}", HEAD + MODEL.format(
        init=init, args=args, expr=expr, inputs=inputs))
    sol = initial_solution(p)
    assert sol.kind != KIND_TORCH, sol.note
    mod = load_source(sol.source, f"kb_cc_{p.code_hash}")
    torch.manual_seed(0)
    new = mod.ModelNew()
    with record_launches() as launches, torch.no_grad():
        new(*mod.get_inputs())
    assert launches
    compile_for_gpu(launches)
