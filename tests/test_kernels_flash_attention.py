"""flash_attention: spec facts, the Triton starter against the float64 SDPA reference (interpreter on
CPU, real GPU when present), the CUDA starter's compile check and, on the GPU, every default shape
and dtype for both backends.

Run as a script on a GPU (`python tests/test_kernels_flash_attention.py [--sweep] [--sweep-cuda]`)
it times both starters against F.scaled_dot_product_attention at the default shapes (bf16, fp16),
and with --sweep / --sweep-cuda the Triton / CUDA starter's 16-bit tunables, one line per
measurement (also appended to $OUT/flash_attention_speed.txt when $OUT is set).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from autokernel.kernelfile import import_kernel
from autokernel.kernels import starter_path
from support.kernel_cases import ALL_DTYPES, CPU_DTYPES, DEVICE, HAS_CUDA, Kernel
from support.sm90_compile import compile_sm90, job

K = Kernel("flash_attention", out_shape=lambda args: args[0].shape)  # q's shape
SPEC = K.spec
check, load = K.check, K.load
triton_mod, cuda_mod = K.fixtures(own_home=True)  # shared checks: tests/support/kernel_cases.py


def shape(b, h, hkv, s, d, causal):
    return {"batch": b, "heads": h, "kv_heads": hkv, "seq": s, "head_dim": d, "causal": causal}


# Small tiles so the interpreter's short sequences still cross several key blocks: the causal
# split (unmasked blocks left of the diagonal, masked band) and the ragged non-causal tail both run.
SMALL_TILES = {"BLOCK_M": 32, "BLOCK_N": 16, "FP32_BLOCK_M": 32, "FP32_BLOCK_N": 16}


@pytest.fixture(scope="module")
def triton_small_tiles(tmp_path_factory):
    return load("triton", SMALL_TILES, tmp_path_factory.mktemp("fa"))


# ---------------------------------------------------------------- spec


def test_spec_costs_and_shapes():
    s = shape(4, 32, 32, 4096, 128, 1)
    K.assert_costs(s, flops={torch.bfloat16: 4 * 4 * 32 * 4096 * 4096 * 128 / 2},
                   labels={"1x32x32x2048x128x1", "4x32x32x4096x128x1", "1x32x8x4096x128x1"})
    assert SPEC.flops(dict(s, causal=0), torch.bfloat16) == 4 * 4 * 32 * 4096 * 4096 * 128
    g = shape(1, 32, 8, 4096, 128, 1)
    assert SPEC.bytes(g, torch.bfloat16) == 2 * (2 * 32 * 4096 * 128 + 2 * 8 * 4096 * 128)
    assert SPEC.bytes(g, torch.float32) == 2 * SPEC.bytes(g, torch.float16)
    assert {x["head_dim"] for x in SPEC.default_shapes} == {64, 128}
    assert {x["causal"] for x in SPEC.default_shapes} == {0, 1}
    assert any(x["seq"] == 1 for x in SPEC.edge_shapes)
    assert SPEC.compute_bound and "cudnn" in SPEC.library_kernel_patterns
    assert SPEC.parse_shape("1x32x8x2048x128x1") == shape(1, 32, 8, 2048, 128, 1)


def test_library_patterns_do_not_match_the_starters_own_kernels():
    """The anti-cheat (the bench's own matcher) rejects SDPA's kernels but not the starters'."""
    K.assert_kernel_names(
        foreign=("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128_4x1x1",
                 "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>(Flash_fwd_params)",
                 "fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float>::Params)",
                 "void (anonymous namespace)::softmax_warp_forward<float, float, float, 11, false, false>",
                 "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float>",
                 "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1"),
        own=("_attn_fwd", "void fa2_fwd_mma_kernel<__half, 128, 4, 64>(FaParams)",
             "void fa_fwd_fp32_kernel<float, 32>(FaParams)"))


def test_reference_is_sdpa_with_gqa_and_causal_mask():
    gen = torch.Generator().manual_seed(0)
    q, k, v, causal, scale = SPEC.make_inputs(shape(2, 4, 2, 9, 8, 1), torch.float64, "cpu", gen)
    assert causal is True and scale is None and k.shape == (2, 2, 9, 8)
    # Written out by hand: kv head h // 2 serves q head h; key j is visible to query i iff j <= i.
    kk, vv = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
    logits = q @ kk.transpose(-1, -2) / math.sqrt(8)
    logits = logits.masked_fill(torch.ones(9, 9, dtype=torch.bool).triu(1), float("-inf"))
    torch.testing.assert_close(SPEC.reference(q, k, v, causal, scale), logits.softmax(-1) @ vv)
    torch.testing.assert_close(SPEC.reference(q, k, v, False, 0.3),
                               (q @ kk.transpose(-1, -2) * 0.3).softmax(-1) @ vv)


def test_reference_chunks_large_float64_batches(monkeypatch):
    import autokernel.kernels.flash_attention as fa

    gen = torch.Generator().manual_seed(1)
    args = SPEC.make_inputs(shape(3, 2, 1, 16, 8, 1), torch.float64, "cpu", gen)
    whole = SPEC.reference(*args)
    monkeypatch.setattr(fa, "_CHUNK_ELEMENTS", 1)
    torch.testing.assert_close(SPEC.reference(*args), whole, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_adversarial_inputs(dtype):
    gen = torch.Generator().manual_seed(2)
    s = shape(1, 2, 1, 12, 16, 1)
    q, k, v, causal, scale = SPEC.make_inputs(s, dtype, "cpu", gen, "large")
    assert scale == 1.0 and q.dtype == dtype
    logits = q.double() @ k.double().repeat_interleave(2, 1).transpose(-1, -2)
    assert logits.abs().max() > 100  # exp of these overflows without the running-max subtraction
    q, k, v, causal, scale = SPEC.make_inputs(s, dtype, "cpu", gen, "equal")
    ref = SPEC.reference(q.double(), k.double(), v.double(), causal, scale)
    # Uniform weights over the causal prefix: row i is the mean of v[:i+1].
    prefix_mean = v.double().cumsum(2) / torch.arange(1, 13, dtype=torch.float64)[:, None]
    torch.testing.assert_close(ref, prefix_mean.repeat_interleave(2, 1))


# ---------------------------------------------------------------- Triton under the interpreter


def test_starter_file_format():
    K.assert_starter_file("triton", {"BLOCK_M", "BLOCK_N", "NUM_WARPS", "NUM_STAGES"})


def test_valid_config(triton_mod):
    kf = K.kernel_file("triton")
    assert triton_mod.valid_config(dict(kf.config)) and triton_mod.valid_config(dict(kf.config, **SMALL_TILES))
    assert not triton_mod.valid_config(dict(kf.config, BLOCK_M=64, BLOCK_N=128))  # diagonal off-block
    assert not triton_mod.valid_config(dict(kf.config, BLOCK_M=256, BLOCK_N=128, NUM_STAGES=5))  # smem
    assert not triton_mod.valid_config(dict(kf.config, BLOCK_M=256, NUM_WARPS=4))  # registers
    assert not triton_mod.valid_config(dict(kf.config, BLOCK_M=128, BLOCK_N=64, NUM_WARPS=4))  # spills


test_triton_matches_reference = K.correctness_test(backend="triton", shapes=SPEC.small_shapes + SPEC.edge_shapes,
                                                   dtypes=CPU_DTYPES, scales=("normal",) + SPEC.adversarial,
                                                   seed=lambda s: sum(s.values()))


@pytest.mark.parametrize("dtype", CPU_DTYPES)
@pytest.mark.parametrize("s", [shape(1, 4, 1, 67, 16, 1), shape(1, 4, 2, 67, 64, 0), shape(2, 2, 2, 48, 32, 1),
                               shape(1, 2, 1, 100, 40, 1), shape(1, 2, 2, 33, 8, 0)], ids=SPEC.shape_label)
def test_triton_multi_block(triton_small_tiles, s, dtype):
    """Several key blocks: unmasked blocks left of the diagonal, the masked band, ragged tails,
    GQA groups of 2 and 4, head dims that are not a power of two or below tl.dot's 16."""
    gen = torch.Generator(device=DEVICE).manual_seed(sum(s.values()))
    for scale in ("normal", "large"):
        args = SPEC.make_inputs(s, dtype, DEVICE, gen, scale)
        check(triton_small_tiles.kernel_fn(*args), args, dtype)


@pytest.mark.parametrize("dtype", CPU_DTYPES)
def test_triton_model_layouts_and_explicit_scale(triton_small_tiles, dtype):
    """transformers passes q/k/v as transposed views of [B,S,H,D]; also a head-dim stride of 2."""
    gen = torch.Generator(device=DEVICE).manual_seed(3)
    b, s, h, hkv, d = 2, 45, 4, 2, 32
    q = torch.randn(b, s, h, d, generator=gen, device=DEVICE).to(dtype).transpose(1, 2)
    k = torch.randn(b, s, hkv, d, generator=gen, device=DEVICE).to(dtype).transpose(1, 2)
    v_big = torch.randn(b, hkv, s, 2 * d, generator=gen, device=DEVICE).to(dtype)
    v = v_big[..., ::2]
    assert not q.is_contiguous() and v.stride(-1) == 2
    for causal, scale in ((True, None), (False, 0.05), (True, 0.3)):
        args = (q, k, v, causal, scale)
        check(triton_small_tiles.kernel_fn(*args), args, dtype)


def test_triton_repeated_calls_reuse_one_prepared_plan(triton_small_tiles):
    """The pointer kernel's host work is done once per (shapes, strides, dtype, device, causal,
    scale): repeated calls on new values stay right; another scale gets its own plan, and the
    decode path (a mask, a longer KV) none."""
    mod = triton_small_tiles
    mod._PLANS.clear()
    gen = torch.Generator(device=DEVICE).manual_seed(8)
    q, k, v, causal, scale = SPEC.make_inputs(shape(1, 2, 1, 24, 16, 1), torch.float16, DEVICE, gen)
    causal = bool(causal)
    for _ in range(3):
        for t in (q, k, v):
            t.normal_(generator=gen)
        check(mod.kernel_fn(q, k, v, causal, scale), (q, k, v, causal, scale), torch.float16)
    assert len(mod._PLANS) == 1
    check(mod.kernel_fn(q, k, v, causal, 0.2), (q, k, v, causal, 0.2), torch.float16)
    assert len(mod._PLANS) == 2
    keep = torch.ones(1, 1, 24, 24, dtype=torch.bool, device=DEVICE).tril()
    out = mod.kernel_fn(q[:, :, -4:], k, v, False, None, keep[:, :, -4:])
    torch.testing.assert_close(out, SPEC.reference(q[:, :, -4:], k, v, False, None, keep[:, :, -4:]),
                               atol=2e-3, rtol=2e-3)
    assert len(mod._PLANS) == 2


def test_triton_is_deterministic(triton_small_tiles):
    gen = torch.Generator(device=DEVICE).manual_seed(4)
    args = SPEC.make_inputs(shape(1, 2, 1, 40, 16, 1), torch.float16, DEVICE, gen)
    assert torch.equal(triton_small_tiles.kernel_fn(*args), triton_small_tiles.kernel_fn(*args))


# Compiles the starter's kernel ahead of time for sm_90 (no GPU needed), specialised the way a real
# launch is: 16-byte aligned pointers, unit head-dim strides, 16-divisible row strides. It runs in
# a fresh process because this one has Triton in interpreter mode.
_HOPPER_COMPILE = r"""
import importlib.util, json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

spec = importlib.util.spec_from_file_location("fa_starter_aot", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
sys.modules["fa_starter_aot"] = mod
spec.loader.exec_module(mod)
fn = mod._attn_fwd
results = []
for dtype, causal, d, bm, bn, warps, stages, precision in json.loads(sys.argv[2]):
    block_d = max(16, triton.next_power_of_2(d))
    constants = {"HEAD_DIM": d, "BLOCK_D": block_d, "BLOCK_M": bm, "BLOCK_N": bn, "MASK_D": block_d != d,
                 "CAUSAL": causal, "PRECISION": precision,
                 "stride_qd": 1, "stride_kd": 1, "stride_vd": 1, "stride_od": 1}
    signature = {}
    for name in fn.arg_names:
        if name in constants:
            signature[name] = "constexpr"
        elif name in ("Q", "K", "V", "O"):
            signature[name] = "*" + dtype
        else:
            signature[name] = "fp32" if name == "qk_scale" else "i32"
    aligned = [n for n in fn.arg_names
               if n in ("Q", "K", "V", "O", "seq") or (n.startswith("stride") and n not in constants)]
    attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n in aligned}
    k = triton.compile(ASTSource(fn, signature, constants, attrs), target=GPUTarget("cuda", 90, 32),
                       options={"num_warps": warps, "num_stages": stages})
    results.append({"wgmma": "wgmma.mma_async" in k.asm["ptx"],
                    "async_loads": "async_copy_global_to_local" in k.asm["ttgir"],
                    "shared": k.metadata.shared})
print(json.dumps(results))
"""


def test_triton_compiles_for_hopper(triton_mod):
    """The interpreter never compiles: prove the starter lowers for sm_90 with its default configs,
    with wgmma tensor-core products and software-pipelined (async) K/V loads for 16-bit inputs."""
    import json
    import os
    import subprocess
    import sys

    pytest.importorskip("triton.backends.nvidia")
    c = K.kernel_file("triton").config
    half = (c["BLOCK_M"], c["BLOCK_N"], c["NUM_WARPS"], c["NUM_STAGES"], None)
    single = (c["FP32_BLOCK_M"], c["FP32_BLOCK_N"], c["FP32_NUM_WARPS"], c["FP32_NUM_STAGES"], c["FP32_PRECISION"])
    cases = [("bf16", True, 128, *half), ("fp16", False, 64, *half), ("fp32", True, 128, *single),
             ("bf16", True, 40, *half)]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", _HOPPER_COMPILE, str(starter_path("flash_attention", "triton")),
                           json.dumps(cases)], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    for case, r in zip(cases, res):
        assert r["shared"] <= triton_mod.SMEM_LIMIT, (case, r)
        if case[0] != "fp32":
            assert r["wgmma"] and r["async_loads"], (case, r)  # tensor cores, K/V loads pipelined


# ---------------------------------------------------------------- the Hopper variant (VARIANT "tma")

TMA_TILES = dict(SMALL_TILES, VARIANT="tma")


@pytest.fixture(scope="module", params=[("device", False), ("host", False), ("device", True)],
                ids=["device", "host", "warp_spec"])
def triton_tma(request, tmp_path_factory):
    """The tma variant with its descriptors built per program ("device") or on the host, and with
    WARP_SPEC's single fully masked key loop (the interpreter runs it at small tiles; valid_config's
    4-warp, 128-row rule is about the sm_90 compile, tested below)."""
    desc, ws = request.param
    return load("triton", dict(TMA_TILES, TMA_DESC=desc, WARP_SPEC=ws), tmp_path_factory.mktemp("fa_tma"))


def _kernels_run(mod, args, launches_out=None):
    """The output of mod.kernel_fn(*args) and the names of the Triton kernels it launched (the
    launches themselves appended to `launches_out`)."""
    from autokernel.bench.gpu_compile import record_launches

    with record_launches() as launches:
        out = mod.kernel_fn(*args)
    if launches_out is not None:
        launches_out.extend(launches)
    return out, [rec.name for rec in launches]


def _host_desc_used(mod, rec):
    return rec.constexprs[(mod._attn_fwd_tma.arg_names.index("HOST_DESC"),)]


@pytest.mark.parametrize("s", [shape(1, 4, 2, 67, 64, 1), shape(1, 4, 1, 67, 64, 0), shape(1, 2, 2, 45, 128, 1),
                               shape(2, 2, 1, 33, 128, 0), shape(1, 2, 1, 50, 40, 1), shape(1, 2, 2, 1, 64, 1),
                               shape(1, 2, 2, 64, 16, 0)], ids=SPEC.shape_label)
def test_tma_variant_matches_reference(triton_tma, s):
    """fp16 through the descriptors (bf16 dots are wrong under the interpreter): causal and not,
    GQA 2:1 and 4:1, ragged sequences (67, 45, 33, 50: not multiples of 32 or 16, so the TMA zero
    fill and the store clipping are exercised), head dims 64, 128, 16 and 40 (padded to 64 by the
    descriptor's zero fill), a single query; normal and adversarial scales."""
    gen = K.gen(sum(s.values()))
    for scale in ("normal",) + SPEC.adversarial:
        args = SPEC.make_inputs(s, torch.float16, DEVICE, gen, scale)
        assert all(triton_tma.tma_ok(t) for t in args[:3])
        out, ran = _kernels_run(triton_tma, args)
        assert ran == ["_attn_fwd_tma"]
        check(out, args, torch.float16, scale)


def test_tma_variant_model_layout_and_fp32(triton_tma):
    """transformers' transposed [B,S,H,D] views qualify (unit head-dim stride, 64-byte head stride)
    and run through TMA (with per-program descriptors even under TMA_DESC "host": their head stride
    is below their sequence stride); fp32 inputs always run the pointer kernel (exact products)."""
    gen = K.gen(7)
    b, s, h, hkv, d = 2, 45, 4, 2, 32
    q = torch.randn(b, s, h, d, generator=gen).half().transpose(1, 2)
    k = torch.randn(b, s, hkv, d, generator=gen).half().transpose(1, 2)
    v = torch.randn(b, s, hkv, d, generator=gen).half().transpose(1, 2)
    for causal, scale in ((True, None), (False, 0.05)):
        launches = []
        out, ran = _kernels_run(triton_tma, (q, k, v, causal, scale), launches)
        assert ran == ["_attn_fwd_tma"] and not _host_desc_used(triton_tma, launches[0])
        check(out, (q, k, v, causal, scale), torch.float16)
    contiguous = tuple(t.contiguous() for t in (q, k, v))
    launches = []
    out, ran = _kernels_run(triton_tma, (*contiguous, True, None), launches)
    assert _host_desc_used(triton_tma, launches[0]) == (triton_tma.TMA_DESC == "host")
    check(out, (*contiguous, True, None), torch.float16)
    args = SPEC.make_inputs(shape(1, 4, 2, 37, 64, 1), torch.float32, DEVICE, gen)
    out, ran = _kernels_run(triton_tma, args)
    assert ran == ["_attn_fwd"]
    check(out, args, torch.float32)


def test_tma_variant_falls_back_where_tma_cannot_describe(triton_tma):
    """Operands TMA cannot describe run the pointer kernel, correctly: a head-dim stride of 2, rows
    of 36 fp16 elements (72 bytes: not 16-byte aligned), a base 2 bytes off alignment."""
    gen = K.gen(8)
    q, k, v, causal, scale = SPEC.make_inputs(shape(1, 4, 2, 40, 32, 1), torch.float16, DEVICE, gen)
    v_strided = torch.randn(1, 2, 40, 64, generator=gen).half()[..., ::2]
    q36, k36, v36, _, _ = SPEC.make_inputs(shape(1, 2, 1, 40, 36, 1), torch.float16, DEVICE, gen)
    q_off = torch.randn(1 + 4 * 40 * 32, generator=gen).half()[1:].view(1, 4, 40, 32)
    cases = [(q, k, v_strided, causal, scale), (q36, k36, v36, True, None), (q_off, k, v, False, None)]
    for args in cases:
        assert not all(triton_tma.tma_ok(t) for t in args[:3])
        out, ran = _kernels_run(triton_tma, args)
        assert ran == ["_attn_fwd"]
        check(out, args, torch.float16)


def test_tma_variant_config_rules(triton_mod):
    kf = K.kernel_file("triton")
    ok = triton_mod.valid_config
    tma = dict(kf.config, VARIANT="tma", BLOCK_M=128, BLOCK_N=64, NUM_WARPS=8)
    assert ok(tma) and ok(dict(tma, BLOCK_N=128, NUM_STAGES=3))
    ws = dict(tma, NUM_WARPS=4, WARP_SPEC=True)  # a producer and two 64-row consumer warpgroups
    assert ok(ws) and ok(dict(ws, BLOCK_N=128, NUM_STAGES=2)) and ok(dict(ws, NUM_STAGES=4))
    assert not ok(dict(ws, NUM_WARPS=8))  # Triton 3.6 ignores the request at 8 warps
    assert not ok(dict(ws, BLOCK_M=64)) and not ok(dict(ws, TMA_DESC="host"))
    assert not ok(dict(ws, BLOCK_N=128, NUM_STAGES=3))  # its separate O buffer: past 227 KB
    assert ok(dict(tma, BLOCK_M=64, NUM_WARPS=4)) and not ok(dict(tma, BLOCK_N=128, NUM_STAGES=4))  # smem
    assert {"VARIANT", "WARP_SPEC", "TMA_DESC"} <= set(kf.structural)
    assert kf.config["VARIANT"] == "pointer"  # the default until the H200 says otherwise
    half = triton_mod.effective_config(dict(kf.config), "float16")
    assert not {"WARP_SPEC", "TMA_DESC", "FP32_BLOCK_M"} & set(half) and half["VARIANT"] == "pointer"
    assert {"WARP_SPEC", "TMA_DESC"} <= set(triton_mod.effective_config(tma, "bfloat16"))
    assert set(triton_mod.effective_config(tma, "float32")) == {k for k in tma if k.startswith(("FP32_", "DECODE_"))}
    # the kernel's shapes, where the search knows them: a prefill-only model takes no decode path,
    # so its DECODE_* values are not searched (declared.effective_names reads the file, no import)
    from autokernel.declared import effective_names

    src = K.kernel_file("triton").source
    prefill = [{"batch": 1, "heads": 32, "kv_heads": 32, "seq": 2048, "head_dim": 128, "causal": True}]
    cache = prefill + [dict(prefill[0], seq=1, kv_seq=2048)]
    assert not any(n.startswith("DECODE_") for n in effective_names(src, kf.config, "bfloat16", prefill))
    assert "DECODE_BLOCK_N" in effective_names(src, kf.config, "bfloat16", cache)
    assert "DECODE_BLOCK_N" in effective_names(src, kf.config, "bfloat16")  # shapes unknown: all
    assert "BLOCK_M" in effective_names(src, kf.config, "bfloat16", prefill)


_STANDALONE = r"""
import sys
sys.modules["autokernel"] = None  # the copied-out file must not need the package
sys.path.insert(0, sys.argv[1])
import torch, torch.nn.functional as F
import fa_tma
assert fa_tma.launch.__module__ == "fa_tma"
gen = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(1, h, 50, 64, generator=gen).half() for h in (4, 2, 2))
for desc in ("device", "host"):
    fa_tma.TMA_DESC = desc
    out = fa_tma.kernel_fn(q, k, v, True)
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True, enable_gqa=True)
    print(desc, (out.float() - ref).abs().max().item())
mask = torch.rand(1, 1, 1, 50, generator=gen) > 0.5  # the decode path: one query, split keys, a mask
out = fa_tma.kernel_fn(q[:, :, -1:], k, v, False, None, mask)
ref = F.scaled_dot_product_attention(q[:, :, -1:].float(), k.float(), v.float(), attn_mask=mask, enable_gqa=True)
print("decode", (out.float() - ref).abs().max().item())
"""


def test_tma_variant_runs_standalone(tmp_path):
    """The starter is copied out as a self-contained file: with VARIANT "tma" it runs without the
    autokernel package (its own launch path), both descriptor modes, under the interpreter; and
    so does its decode path."""
    import os
    import subprocess
    import sys

    from autokernel.kernelfile import with_config

    source = starter_path("flash_attention", "triton").read_text()
    (tmp_path / "fa_tma.py").write_text(with_config(source, dict(TMA_TILES)))
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH="")
    proc = subprocess.run([sys.executable, "-c", _STANDALONE, str(tmp_path)], env=env, capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    errors = dict(line.split() for line in proc.stdout.strip().splitlines())
    assert set(errors) == {"device", "host", "decode"} and all(float(e) < 1e-2 for e in errors.values()), errors


@pytest.mark.slow
@pytest.mark.skipif(HAS_CUDA, reason="on a GPU the GPU tests compile it for real")
def test_tma_variant_compiles_for_hopper(tmp_path):
    """The tma variant, launched under the interpreter at the committed 16-bit tiles with its
    launches recorded, then compiled by Triton for sm_90a and assembled by ptxas: causal and not,
    head dims 128, 64 and 40, warp specialization off and on, descriptors built per program and on
    the host (4-D, one [1, 1, rows, D] box a tile). Each must fit in shared memory without
    spills, multiply on wgmma and move Q/K/V through TMA loads and O through TMA stores; the
    warp-specialized one must really be (a producer warpgroup: 12 warps, setmaxnreg)."""
    from autokernel.bench.gpu_compile import record_launches

    pytest.importorskip("triton.backends.nvidia")
    jobs = []
    for ws, desc in ((False, "device"), (True, "device"), (False, "host")):
        cfg = {"VARIANT": "tma", "WARP_SPEC": ws, "TMA_DESC": desc, "NUM_WARPS": 4 if ws else 8}
        mod = load("triton", cfg, tmp_path)
        assert mod.valid_config(dict(K.kernel_file("triton").config, **cfg))
        for d, causal in ((128, 1), (64, 0), (40, 1)):
            args = SPEC.make_inputs(shape(1, 2, 1, 256, d, causal), torch.float16, "cpu", K.gen(9))
            with record_launches() as launches:
                mod.kernel_fn(*args)
            assert [rec.name for rec in launches] == ["_attn_fwd_tma"]
            assert _host_desc_used(mod, launches[0]) == (desc == "host")
            jobs.append(job(f"ws={ws} {desc} d={d} causal={causal}", launches[0]))
    for r in compile_sm90(jobs, tmp_path):
        assert "error" not in r and r["ok"], r
        assert r["smem"] <= 227 * 1024 and r["spill"] == 0, r
        assert r["wgmma"] > 0 and r["tma_load"] > 0 and r["tma_store"] > 0, r
        if "ws=True" in r["label"]:
            assert r["warps"] == 12 and r["setmaxnreg"] > 0, r
        else:
            assert r["warps"] == 8 and r["setmaxnreg"] == 0, r


def test_attention_benchmark_candidates_are_valid_configs():
    """benchmarks/attention_hopper.py: every starter candidate is a point of the search space that
    valid_config accepts, both variants are there, and without a GPU it exits 2."""
    from support.benchmarks import load_benchmark

    bench = load_benchmark("attention_hopper")
    kf = K.kernel_file("triton")
    ok = import_kernel(kf).valid_config
    every = bench.candidates("all")
    assert set(every) == set(bench.candidates("pointer")) | set(bench.candidates("tma"))
    assert {(o or {}).get("VARIANT", "pointer") for o in every.values()} == {"pointer", "tma"}
    for label, overrides in every.items():
        if overrides:
            # the warp-specialized rows are timed outside the search space (wrong on the H200 under
            # Triton 3.6): the benchmark shows the day a release gets them right
            tracked = {k: v for k, v in overrides.items() if not (k == "WARP_SPEC" and v)}
            assert all(v in kf.search_space[k] for k, v in tracked.items()), label
            assert ok(dict(kf.config, **overrides)), label
    if not HAS_CUDA:
        assert bench.main(["--variant", "tma"]) == 2


# ---------------------------------------------------------------- GPU: every default shape and dtype


def gpu_check(mod, s, dtype, scale="normal", seed=5):
    args = K.make(s, dtype, K.gen(seed, "cuda"), scale, "cuda")
    check(mod.kernel_fn(*args), args, dtype, scale)


def gpu_adversarial_and_model_layout(mod, dtype):
    """Every adversarial scale at a causal GQA and a non-causal MHA shape; LLaMA's q/k/v as the
    attention layer hands them over (transposed [B,S,H,D] views), causal."""
    for scale in SPEC.adversarial:
        gpu_check(mod, shape(2, 8, 2, 1000, 128, 1), dtype, scale)
        gpu_check(mod, shape(2, 8, 8, 777, 64, 0), dtype, scale)
    gen = K.gen(6, "cuda")
    q = torch.randn(1, 2048, 32, 128, generator=gen, device="cuda").to(dtype).transpose(1, 2)
    k = torch.randn(1, 2048, 8, 128, generator=gen, device="cuda").to(dtype).transpose(1, 2)
    v = torch.randn(1, 2048, 8, 128, generator=gen, device="cuda").to(dtype).transpose(1, 2)
    check(mod.kernel_fn(q, k, v, True, None), (q, k, v, True, None), dtype)
    return q, k, v


test_triton_gpu_default_shapes = K.correctness_test(backend="triton", shapes=SPEC.default_shapes + SPEC.edge_shapes,
                                                    seed=5, gpu=True)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_triton_gpu_adversarial_and_layouts(triton_mod, dtype):
    gpu_adversarial_and_model_layout(triton_mod, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", [{"VARIANT": "tma"},
                                 pytest.param({"VARIANT": "tma", "WARP_SPEC": True, "NUM_WARPS": 4}, marks=pytest.mark.xfail(
                                     reason="wrong on the H200 under Triton 3.6 (2026-12-05: NaN, errors of 1.25); "
                                            "out of the search space until a release gets it right", strict=False)),
                                 {"VARIANT": "tma", "TMA_DESC": "host"},
                                 {"VARIANT": "tma", "TMA_DESC": "host", "BLOCK_N": 128, "NUM_STAGES": 2}],
                         ids=["device", "device-warp_spec", "host", "host-128x128"])
def test_tma_variant_on_the_gpu(tmp_path, cfg):
    """The tma variant on the card: every default and edge shape in bf16 and fp16, the adversarial
    scales, LLaMA's transposed layout; the benchmark's B4 S4096 d128 inputs qualify for TMA."""
    mod = load("triton", cfg, tmp_path)
    for dtype in (torch.bfloat16, torch.float16):
        for s in SPEC.default_shapes + SPEC.edge_shapes:
            gpu_check(mod, s, dtype)
        gpu_adversarial_and_model_layout(mod, dtype)
    q, k, v, causal, _ = K.make(shape(4, 32, 32, 4096, 128, 1), torch.bfloat16, K.gen(7, "cuda"), device="cuda")
    assert all(mod.tma_ok(t) for t in (q, k, v))


@pytest.mark.gpu
def test_triton_gpu_search_space_corners(tmp_path):
    """Configs the search proposer will try compile and stay correct on the GPU."""
    for cfg in ({"BLOCK_M": 64, "BLOCK_N": 64, "NUM_WARPS": 4, "NUM_STAGES": 2},
                {"BLOCK_M": 128, "BLOCK_N": 128, "NUM_WARPS": 8, "NUM_STAGES": 2,
                 "FP32_PRECISION": "tf32x3"},
                {"BLOCK_M": 64, "BLOCK_N": 32, "NUM_WARPS": 4, "NUM_STAGES": 4}):
        mod = load("triton", cfg, tmp_path)
        for dtype in ALL_DTYPES:
            gpu_check(mod, shape(2, 8, 2, 1000, 128, 1), dtype)
            gpu_check(mod, shape(2, 4, 4, 333, 64, 0), dtype)


# ---------------------------------------------------------------- CUDA starter


def test_cuda_starter_file_format():
    kf = K.assert_starter_file("cuda")
    mod = load("cuda")
    assert mod.DEFINES == {k: kf.config[k] for k in ("NUM_WARPS", "BLOCK_N", "FP32_ROWS", "FP32_KEYS")}
    # Dynamic shared memory past the 48 KB static limit, opted in: what the earlier starter lacked.
    assert "cudaFuncAttributeMaxDynamicSharedMemorySize" in mod.CUDA_SRC and "extern __shared__" in mod.CUDA_SRC


# nvcc builds every instantiation for sm_90 (tensor-core path at D 16/32/64/128 in fp16 and bf16, the
# scalar path in all dtypes) and the host wrapper passes the compiler against torch.
test_cuda_source_compiles = K.cuda_compile_test()
test_cuda_gpu_default_shapes = K.correctness_test(backend="cuda", shapes=SPEC.default_shapes + SPEC.edge_shapes,
                                                  seed=5, gpu=True)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_cuda_gpu_adversarial_layouts_and_odd_head_dims(cuda_mod, dtype):
    for s in (shape(1, 4, 2, 99, 40, 1), shape(1, 2, 1, 70, 8, 0), shape(1, 2, 2, 65, 256, 1)):
        gpu_check(cuda_mod, s, dtype)  # head dims served by the scalar path
    q, k, v = gpu_adversarial_and_model_layout(cuda_mod, dtype)
    check(cuda_mod.kernel_fn(q, k, v, False, 0.2), (q, k, v, False, 0.2), dtype)


@pytest.mark.gpu
def test_cuda_gpu_search_space_corners(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOKERNEL_HOME", str(tmp_path / "akhome"))
    for cfg in ({"NUM_WARPS": 8, "BLOCK_N": 64, "FP32_ROWS": 32, "FP32_KEYS": 16},
                {"NUM_WARPS": 2, "BLOCK_N": 128, "FP32_ROWS": 128, "FP32_KEYS": 64},
                {"NUM_WARPS": 4, "BLOCK_N": 32}):
        mod = load("cuda", cfg, tmp_path)
        for dtype in ALL_DTYPES:
            gpu_check(mod, shape(2, 8, 2, 1000, 128, 1), dtype)
            gpu_check(mod, shape(2, 4, 4, 333, 64, 0), dtype)


# ---------------------------------------------------------------- speed report (script, not a test)


def _tflops(fn, s, dtype):
    import triton.testing

    gen = torch.Generator(device="cuda").manual_seed(0)
    args = SPEC.make_inputs(s, dtype, "cuda", gen)
    ms = triton.testing.do_bench(lambda: fn(*args), warmup=50, rep=300)
    return SPEC.flops(s, dtype) / (ms * 1e-3) / 1e12


def _sdpa(q, k, v, causal, scale):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, enable_gqa=True)


def main(argv: list[str]) -> None:
    import os
    import tempfile
    from pathlib import Path

    report = Path(os.environ["OUT"], "flash_attention_speed.txt") if os.environ.get("OUT") else None

    def emit(line):
        print(line, flush=True)
        if report is not None:  # line by line: a run cut short still leaves its numbers
            with report.open("a") as f:
                f.write(line + "\n")

    def timed(name, fn, s, dtype, ref):
        try:
            t = _tflops(fn, s, dtype)
            return f" | {name} {t:6.1f} TF/s ({100 * t / ref:5.1f}%)"
        except Exception as exc:
            return f" | {name} failed: {type(exc).__name__}: {str(exc)[-200:]}"

    mods = {"triton": load("triton")}
    try:
        mods["cuda"] = load("cuda")
        mods["cuda"].kernel_fn(*SPEC.make_inputs(SPEC.small_shapes[0], torch.float16, "cuda"))  # builds it
    except Exception as exc:  # report, keep timing the rest
        mods.pop("cuda", None)
        emit(f"cuda starter unavailable: {type(exc).__name__}: {str(exc)[-600:]}")
    emit(f"device {torch.cuda.get_device_name()} torch {torch.__version__}")
    for dtype in (torch.bfloat16, torch.float16):
        for s in SPEC.default_shapes:
            ref = _tflops(_sdpa, s, dtype)
            row = f"{SPEC.shape_label(s):>20} {str(dtype):>15} sdpa {ref:6.1f} TF/s"
            for name, mod in mods.items():
                row += timed(name, mod.kernel_fn, s, dtype, ref)
            emit(row)
    if "--sweep" not in argv and "--sweep-cuda" not in argv:
        return
    tmp = Path(tempfile.mkdtemp())
    sweep_shapes = (shape(4, 32, 32, 4096, 128, 1), shape(4, 32, 32, 2048, 128, 0), shape(8, 12, 12, 1024, 64, 1))
    refs = {SPEC.shape_label(s): _tflops(_sdpa, s, torch.bfloat16) for s in sweep_shapes}
    kf = K.kernel_file("triton")
    for bm in ((64, 128) if "--sweep" in argv else ()):
        for bn in (32, 64, 128):
            for warps in (4, 8):
                for stages in (2, 3, 4):
                    cfg = dict(kf.config, BLOCK_M=bm, BLOCK_N=bn, NUM_WARPS=warps, NUM_STAGES=stages)
                    if not mods["triton"].valid_config(cfg):
                        continue
                    mod = load("triton", cfg, tmp)
                    row = f"sweep triton BM{bm} BN{bn} W{warps} S{stages}"
                    for s in sweep_shapes:
                        row += timed(SPEC.shape_label(s), mod.kernel_fn, s, torch.bfloat16, refs[SPEC.shape_label(s)])
                    emit(row)
    if "cuda" in mods and "--sweep-cuda" in argv:
        for warps in (2, 4, 8):
            for bn in (32, 64, 128):
                mod = load("cuda", {"NUM_WARPS": warps, "BLOCK_N": bn}, tmp)
                row = f"sweep cuda W{warps} BN{bn}"
                for s in sweep_shapes:
                    row += timed(SPEC.shape_label(s), mod.kernel_fn, s, torch.bfloat16, refs[SPEC.shape_label(s)])
                emit(row)


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
