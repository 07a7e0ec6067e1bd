"""rotary_embedding: spec facts (the reference and cos/sin tables equal transformers' LLaMA ones),
the Triton starter against the float64 reference (interpreter on CPU, real GPU when present), the
CUDA starter's compile check and, on the GPU, every default shape and dtype for both backends.

Run as a script on a GPU (`python tests/test_kernels_rotary_embedding.py [--sweep]`) it times both
starters against eager and torch.compile at the default shapes in bf16 (and with --sweep the
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
from autokernel.kernels.rotary_embedding import rope_tables

KERNEL = "rotary_embedding"
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
    ref = SPEC.reference(*[a.double() for a in args])
    assert out.shape == x.shape and out.dtype == dtype and out.device == x.device
    assert not torch.isnan(out).any()
    atol, rtol = SPEC.tolerance(dtype)
    torch.testing.assert_close(out.double(), ref, atol=atol, rtol=rtol)


@pytest.fixture(scope="module")
def triton_mod():
    return load_starter("triton")


def test_spec_costs_and_shapes():
    s = {"batch": 4, "heads": 32, "seq": 4096, "head_dim": 128}
    assert SPEC.bytes(s, torch.bfloat16) == 2 * (2 * 4 * 32 * 4096 * 128 + 2 * 4096 * 128)
    assert SPEC.flops(s, torch.float32) == 3 * 4 * 32 * 4096 * 128
    labels = {SPEC.shape_label(x) for x in SPEC.default_shapes}
    assert {"1x32x2048x128", "4x32x4096x128"} <= labels
    assert "CatArrayBatchedCopy" in SPEC.library_kernel_patterns and SPEC.noncontiguous_args == (0, 1, 2)
    from autokernel.bench.launches import is_foreign

    pats = SPEC.library_kernel_patterns
    assert is_foreign("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<"
                      "at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, "
                      "at::native::binary_internal::MulFunctor<float> > >", pats)
    for own in ("_rope_kernel", "void rope_kernel<__nv_bfloat16, 8>(__nv_bfloat16 const*, __nv_bfloat16 const*, "
                "__nv_bfloat16 const*, __nv_bfloat16*, long, long, long, long, Strides)", "rope_concat_mul_neg"):
        assert not is_foreign(own, pats), own
    assert all(sh["head_dim"] % 2 == 0 for sh in SPEC.small_shapes + SPEC.edge_shapes + SPEC.default_shapes)


def test_reference_and_tables_match_transformers_llama():
    """cos/sin as LlamaRotaryEmbedding builds them and the reference as apply_rotary_pos_emb
    computes q's embedding, in bf16, bit for bit."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    cfg = LlamaConfig(hidden_size=256, num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=512)
    rope = LlamaRotaryEmbedding(cfg)
    b, h, s, d = 2, 4, 37, 64
    gen = torch.Generator().manual_seed(0)
    x, cos, sin = SPEC.make_inputs({"batch": b, "heads": h, "seq": s, "head_dim": d}, torch.bfloat16, "cpu", gen)
    hf_cos, hf_sin = rope(x, torch.arange(s)[None, :].expand(b, s))
    assert torch.equal(cos, hf_cos[0]) and torch.equal(sin, hf_sin[0])
    q_embed, _ = apply_rotary_pos_emb(x, x, hf_cos, hf_sin)
    assert torch.equal(SPEC.reference(x, cos, sin), q_embed)


def test_inputs():
    gen = torch.Generator().manual_seed(1)
    x, cos, sin = SPEC.make_inputs({"batch": 1, "heads": 2, "seq": 9, "head_dim": 16}, torch.float16, "cpu", gen,
                                   "large")
    assert x.is_contiguous() and torch.isfinite(x).all() and x.float().abs().max() > 500
    assert cos.shape == sin.shape == (9, 16) and cos.dtype == torch.float16
    assert torch.equal(cos[0], torch.ones(16, dtype=torch.float16))  # position 0: no rotation
    x, cos, sin = SPEC.make_inputs({"batch": 2, "heads": 3, "seq": 4, "head_dim": 8}, torch.float32, "cpu", gen,
                                   "equal")
    ref = SPEC.reference(x, cos, sin)
    assert torch.equal(ref, ref[:1, :1].expand_as(ref))
    with pytest.raises(ValueError):
        SPEC.make_inputs({"batch": 1, "heads": 1, "seq": 2, "head_dim": 5}, torch.float32, "cpu", gen)


def test_starter_file_format():
    kf = read_kernel_file(starter_path(KERNEL, "triton"))
    assert kf.kernel_type == KERNEL and kf.backend == "triton" and kf.deterministic
    assert {"BLOCK_S", "HEADS_PER_PROG", "NUM_WARPS"} <= set(kf.search_space)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shape", SPEC.small_shapes + SPEC.edge_shapes, ids=SPEC.shape_label)
def test_triton_matches_reference(triton_mod, shape, dtype):
    gen = torch.Generator(device=DEVICE).manual_seed(2)
    for scale in ("normal",) + SPEC.adversarial:
        args = SPEC.make_inputs(shape, dtype, DEVICE, gen, scale)
        check(triton_mod.kernel_fn(*args), args, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_triton_model_layout_and_strided_tables(triton_mod, dtype):
    """q as the model hands it over (the [B,S,H,D] projection transposed), cos/sin read from a
    wider table and with unequal halves (the kernel may not assume cat(freqs, freqs))."""
    gen = torch.Generator(device=DEVICE).manual_seed(3)
    b, h, s, d = 2, 3, 11, 32
    q = torch.randn(b, s, h, d, generator=gen, device=DEVICE).to(dtype).transpose(1, 2)
    _, sin_big = rope_tables(s, 2 * d, dtype, DEVICE)
    sin = sin_big[:, :d]  # row stride 2d; halves unequal
    cos = torch.rand(s, 2 * d, generator=gen, device=DEVICE).to(dtype)[:, 1::2]  # column stride 2
    assert not torch.equal(sin[:, : d // 2], sin[:, d // 2:])
    check(triton_mod.kernel_fn(q, cos, sin), (q, cos, sin), dtype)
    x = torch.randn(1, 2, 5, 2 * d, generator=gen, device=DEVICE).to(dtype)[..., ::2]  # last-dim stride 2
    c, sn = rope_tables(5, d, dtype, DEVICE)
    check(triton_mod.kernel_fn(x, c, sn), (x, c, sn), dtype)


def test_triton_other_configs_stay_correct(tmp_path):
    """Tiles smaller than the shape in both grid dims, and a tile bigger than it."""
    gen = torch.Generator(device=DEVICE).manual_seed(4)
    for cfg in ({"BLOCK_S": 4, "HEADS_PER_PROG": 2, "NUM_WARPS": 1}, {"BLOCK_S": 64, "HEADS_PER_PROG": 16}):
        mod = load_starter("triton", cfg, tmp_path)
        args = SPEC.make_inputs({"batch": 3, "heads": 3, "seq": 13, "head_dim": 48}, torch.float16, DEVICE, gen)
        check(mod.kernel_fn(*args), args, torch.float16)


# ---------------------------------------------------------------- CUDA starter


@pytest.mark.skipif(not nvcc_available(), reason="nvcc not found")
def test_cuda_starter_compiles():
    """Both halves at the default config; the device code again at the other end of the space."""
    mod = load_starter("cuda")
    assert mod.KERNEL_TYPE == KERNEL and mod.BACKEND == "cuda"
    compile_check(mod.CUDA_SRC, mod.CPP_SRC, defines=mod.DEFINES, functions=mod.FUNCTIONS)
    other = {"BLOCK_SIZE": 64, "VEC_BYTES": 4, "HEADS_PER_THREAD": 16}
    assert mod.valid_config(other)
    compile_check(mod.CUDA_SRC, defines=other)


# ---------------------------------------------------------------- GPU: every default shape and dtype


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["triton", "cuda"])
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shape", SPEC.default_shapes + SPEC.edge_shapes, ids=SPEC.shape_label)
def test_gpu_default_shapes(backend, shape, dtype):
    mod = load_starter(backend)
    gen = torch.Generator(device="cuda").manual_seed(5)
    for scale in ("normal",) + SPEC.adversarial:
        args = SPEC.make_inputs(shape, dtype, "cuda", gen, scale)
        check(mod.kernel_fn(*args), args, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["triton", "cuda"])
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_gpu_model_layout(backend, dtype):
    """LLaMA-7B's q as the attention layer hands it over: the transposed projection view."""
    mod = load_starter(backend)
    gen = torch.Generator(device="cuda").manual_seed(6)
    q = torch.randn(1, 2048, 32, 128, generator=gen, device="cuda").to(dtype).transpose(1, 2)
    cos, sin = rope_tables(2048, 128, dtype, "cuda")
    out = mod.kernel_fn(q, cos, sin)
    check(out, (q, cos, sin), dtype)
    assert torch.equal(out, mod.kernel_fn(q.contiguous(), cos, sin))


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
    from autokernel.kernels.rotary_embedding import reference as eager

    sweep = {"BLOCK_S": [8, 16, 32], "HEADS_PER_PROG": [2, 4, 8], "NUM_WARPS": [2, 4, 8]}
    timing_report(eager, torch.bfloat16, sweep if "--sweep" in sys.argv else None)
