"""flash_attention's decode path (split-KV attention: few queries against a long KV cache, with an
optional mask): the Triton starter against the float64 SDPA reference under the interpreter, the
reference's bottom-right causal mask, the op's schema and opcheck with a mask, transformers' tiny
LLaMA generating with a StaticCache through AutoKernel, the sm_90 compile of both decode kernels,
and (GPU only) the path against SDPA at LLaMA-7B's decode shapes."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from autokernel.kernels import starter_path
from support.kernel_cases import DEVICE, HAS_CUDA, Kernel
from support.sm90_compile import compile_sm90, job

K = Kernel("flash_attention", out_shape=lambda args: args[0].shape)
SPEC = K.spec
check, load = K.check, K.load


def shape(b, h, hkv, sq, sk, d, causal):
    s = {"batch": b, "heads": h, "kv_heads": hkv, "seq": sq, "head_dim": d, "causal": causal}
    return dict(s, kv_seq=sk) if sk != sq else s


# 16-key blocks, so the interpreter's short caches cross several blocks; the split counts: automatic
# (3 SMs under the interpreter), one (the split kernel writes O itself), and more splits than key
# blocks (empty splits merge as nothing)
@pytest.fixture(scope="module", params=[0, 1, 12], ids=["auto", "one", "more_than_blocks"])
def decode_mod(request, tmp_path_factory):
    return load("triton", {"DECODE_BLOCK_N": 16, "DECODE_SPLITS": request.param}, tmp_path_factory.mktemp("dec"))


def _kernels_run(mod, args):
    from autokernel.bench.gpu_compile import record_launches

    with record_launches() as launches:
        out = mod.kernel_fn(*args)
    return out, launches


CASES = [shape(1, 4, 2, 1, 100, 64, 1), shape(2, 4, 1, 4, 77, 32, 1), shape(1, 2, 2, 3, 5, 40, 1),
         shape(2, 8, 2, 1, 50, 128, 0), shape(1, 4, 4, 4, 33, 16, 0)]


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=["fp16", "fp32"])
@pytest.mark.parametrize("s", CASES, ids=SPEC.shape_label)
def test_decode_matches_reference(decode_mod, s, dtype):
    """1, 3 and 4 queries against caches that are not a multiple of the 16-key block (100, 77, 5,
    50, 33), GQA 2:1 and 4:1, head dims 64, 32, 40 (padded), 128 and 16, causal (bottom-right) and
    not, normal and adversarial scales; split and merged (or written directly with one split)."""
    gen = K.gen(sum(s.values()))
    for scale in ("normal",) + SPEC.adversarial:
        args = K.make(s, dtype, gen, scale)
        out, launches = _kernels_run(decode_mod, args)
        splits = launches[0].constexprs.get((decode_mod._decode_split.arg_names.index("DIRECT"),))
        assert [rec.name for rec in launches] == ["_decode_split"] + ([] if splits else ["_decode_merge"])
        check(out, args, dtype, scale)


def _masks(b, h, sq, sk, gen):
    """A bool mask (True = attend) with padding on the left of batch 0 and one fully masked row,
    and an additive float mask: random biases, -inf holes, a fully -inf row in batch 1."""
    allowed = torch.rand(b, 1, sq, sk, generator=gen) > 0.3
    allowed[0, :, :, :7] = False
    allowed[0, :, -1, :] = False  # a row that sees no key
    bias = torch.randn(b, h, sq, sk, generator=gen)
    bias = bias.masked_fill(torch.rand(b, h, sq, sk, generator=gen) > 0.7, float("-inf"))
    bias[-1, 0, 0, :] = float("-inf")
    return allowed, bias


@pytest.mark.parametrize("causal", [0, 1])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=["fp16", "fp32"])
def test_decode_masks_and_fully_masked_rows(decode_mod, dtype, causal):
    """Bool masks broadcast over heads and additive masks per head, with causal or not; a row
    that sees no key is zeros, as SDPA returns it; an additive mask in another float dtype."""
    gen = K.gen(11 + causal)
    b, h, hkv, sq, sk, d = 2, 4, 2, 4, 45, 64
    q, k, v, _, _ = K.make(shape(b, h, hkv, sq, sk, d, causal), dtype, gen)
    allowed, bias = _masks(b, h, sq, sk, gen)
    for mask in (allowed, bias.to(dtype), bias.half(), allowed[0, 0]):  # the last: a 2-D [Sq, Sk] mask
        args = (q, k, v, bool(causal), None, mask)
        out = decode_mod.kernel_fn(*args)
        check(out, args, dtype)
    out = decode_mod.kernel_fn(q, k, v, bool(causal), None, allowed)
    assert torch.equal(out[0, :, -1], torch.zeros_like(out[0, :, -1]))
    sdpa = F.scaled_dot_product_attention(q.float(), k.float().repeat_interleave(2, 1),
                                          v.float().repeat_interleave(2, 1), attn_mask=allowed)
    assert torch.equal(sdpa[0, :, -1], torch.zeros_like(sdpa[0, :, -1]))  # what SDPA does too


def test_decode_model_layout_and_equal_lengths_with_a_mask(decode_mod):
    """transformers' transposed [B,S,H,D] views (a StaticCache's k/v are contiguous [B,Hkv,Sk,D]);
    a mask with as many keys as queries also takes the decode path."""
    gen = K.gen(12)
    q = torch.randn(2, 1, 8, 32, generator=gen).half().transpose(1, 2)
    k = torch.randn(2, 2, 70, 32, generator=gen).half()
    v = torch.randn(2, 70, 2, 32, generator=gen).half().transpose(1, 2)
    args = (q, k, v, False, 0.2, torch.ones(2, 1, 1, 70, dtype=torch.bool))
    out, launches = _kernels_run(decode_mod, args)
    assert launches[0].name == "_decode_split"
    check(out, args, torch.float16)
    q, k, v, causal, _ = K.make(shape(1, 2, 1, 6, 6, 32, 1), torch.float16, gen)
    args = (q, k, v, False, None, torch.ones(6, 6, dtype=torch.bool).tril())
    out, launches = _kernels_run(decode_mod, args)
    assert launches[0].name == "_decode_split"
    check(out, args, torch.float16)


def test_decode_contract_errors(decode_mod):
    gen = K.gen(13)
    q, k, v, _, _ = K.make(shape(1, 2, 1, 17, 40, 16, 1), torch.float16, gen)
    with pytest.raises(ValueError, match="up to 16 queries"):
        decode_mod.kernel_fn(q, k, v, True)
    with pytest.raises(ValueError, match="at least as many keys"):
        decode_mod.kernel_fn(q[:, :, :4], k[:, :, :3], v[:, :, :3], True)


def test_decode_split_count_follows_the_sms(triton_decode_default):
    mod = triton_decode_default
    t = torch.empty(1)
    assert mod.DECODE_SPLITS == 0 and mod.DECODE_WAVES == 2
    assert mod.decode_splits(t, 1, 100) == 6  # 2 waves of 3 interpreter SMs, one (batch, kv head)
    assert mod.decode_splits(t, 4, 100) == 2 and mod.decode_splits(t, 64, 100) == 1
    assert mod.decode_splits(t, 1, 4) == 4  # never more splits than key blocks
    assert mod.decode_splits(t, 1, 20) == 5  # 6 wanted: 4 blocks each, so 5 (none empty)


@pytest.fixture(scope="module")
def triton_decode_default():
    return load("triton")


def test_decode_config_rules(triton_decode_default):
    kf = K.kernel_file("triton")
    ok = triton_decode_default.valid_config
    assert ok(dict(kf.config)) and ok(dict(kf.config, DECODE_BLOCK_N=128, DECODE_NUM_STAGES=1))
    assert ok(dict(kf.config, DECODE_BLOCK_N=64, DECODE_NUM_STAGES=3))
    assert not ok(dict(kf.config, DECODE_BLOCK_N=128, DECODE_NUM_STAGES=3))  # fp32 K/V blocks past 227 KB
    eff = triton_decode_default.effective_config
    assert "DECODE_WAVES" in eff(dict(kf.config), "bfloat16")
    assert "DECODE_WAVES" not in eff(dict(kf.config, DECODE_SPLITS=4), "float32")
    assert all(k in kf.search_space for k in ("DECODE_BLOCK_N", "DECODE_SPLITS", "DECODE_NUM_WARPS"))


def test_decode_benchmark_cases_and_candidates():
    """benchmarks/attention_hopper.py --decode: B1 and B32, kv heads 32 and 8, caches of 2048 and
    8192, each unmasked and masked; every decode candidate is a valid point of the search space;
    a bad --shape is a usage error, and without a GPU it exits 2."""
    from support.benchmarks import load_benchmark

    bench = load_benchmark("attention_hopper")
    cases = bench.decode_cases(bench.DECODE_SHAPES)
    assert len(cases) == 16 and {m for _, m in cases} == {False, True}
    assert {(s["batch"], s["kv_heads"], s["kv_seq"]) for s, _ in cases} == \
        {(b, hkv, sk) for b in (1, 32) for hkv in (32, 8) for sk in (2048, 8192)}
    assert all(s["seq"] == 1 and s["heads"] == 32 and s["head_dim"] == 128 for s, _ in cases)
    kf = K.kernel_file("triton")
    ok = load("triton").valid_config
    for label, overrides in bench.DECODE.items():
        assert all(v in kf.search_space[k] for k, v in (overrides or {}).items()), label
        assert ok(dict(kf.config, **(overrides or {}))), label
    with pytest.raises(SystemExit) as exc:
        bench.main(["--decode", "--shape", "1x32x32x1x128"])
    assert exc.value.code == 2
    if not HAS_CUDA:
        assert bench.main(["--decode", "--shape", "1x32x8x1x128x1x2048"]) == 2


# ---------------------------------------------------------------- spec and reference


def test_decode_shapes_labels_and_costs():
    s = shape(1, 32, 32, 1, 2048, 128, 1)
    assert SPEC.shape_label(s) == "1x32x32x1x128x1x2048"
    assert SPEC.parse_shape("1x32x32x1x128x1x2048") == s
    assert SPEC.parse_shape("1x32x32x2048x128x1") == shape(1, 32, 32, 2048, 2048, 128, 1)
    # kv_seq equal to seq is the shape without it: the label and dict from before the key existed
    assert SPEC.shape_label(dict(shape(1, 32, 32, 2048, 2048, 128, 1), kv_seq=2048)) == "1x32x32x2048x128x1"
    assert SPEC.parse_shape("1x32x32x64x128x1x64") == shape(1, 32, 32, 64, 64, 128, 1)
    with pytest.raises(ValueError, match="no kv_len"):
        SPEC.parse_shape("batch=1,heads=2,kv_heads=1,seq=1,head_dim=64,causal=0,kv_len=9")
    labels = {SPEC.shape_label(x) for x in SPEC.default_shapes}
    assert {"1x32x32x1x128x1x2048", "32x32x32x1x128x1x2048", "8x32x8x1x128x1x8192"} <= labels
    assert SPEC.bytes(s, torch.bfloat16) == 2 * (2 * 32 * 128 + 2 * 32 * 2048 * 128)
    assert SPEC.flops(s, torch.bfloat16) == 4 * 32 * 2048 * 128  # one query sees every key
    # four queries, bottom-right causal: 2045 + 2046 + 2047 + 2048 visible keys
    assert SPEC.flops(shape(1, 1, 1, 4, 2048, 1, 1), torch.float32) == 4 * (2045 + 2046 + 2047 + 2048)
    assert SPEC.shape_of(*K.inputs(SPEC.small_shapes[3], torch.float32)) == SPEC.small_shapes[3]


def test_reference_is_bottom_right_causal_with_masks():
    """Written out by hand: query i of Sq sees keys j <= i + Sk - Sq, and the mask on top (bool:
    both allow; additive: added to the logits); SDPA's own is_causal would be top-left."""
    gen = K.gen(14)
    q, k, v, causal, scale = K.make(shape(2, 4, 2, 3, 9, 8, 1), torch.float64, gen)
    kk, vv = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
    logits = q @ kk.transpose(-1, -2) / math.sqrt(8)
    hidden = torch.ones(3, 9, dtype=torch.bool).triu(9 - 3 + 1)
    assert hidden.sum() == 3  # query 0 misses keys 7, 8; query 1 misses key 8
    torch.testing.assert_close(SPEC.reference(q, k, v, True), logits.masked_fill(hidden, -math.inf).softmax(-1) @ vv)
    allowed = torch.rand(2, 1, 3, 9, generator=gen) > 0.4
    allowed[..., 0] = True
    want = logits.masked_fill(hidden | ~allowed, -math.inf).softmax(-1) @ vv
    torch.testing.assert_close(SPEC.reference(q, k, v, True, None, allowed), want)
    bias = torch.randn(2, 4, 3, 9, generator=gen, dtype=torch.float64)
    want = (logits + bias).masked_fill(hidden, -math.inf).softmax(-1) @ vv
    torch.testing.assert_close(SPEC.reference(q, k, v, True, None, bias), want)
    top_left = F.scaled_dot_product_attention(q, kk, vv, is_causal=True)
    assert not torch.allclose(top_left, SPEC.reference(q, k, v, True))


def test_decode_op_schema_and_opcheck():
    """The op takes the optional mask (callers without one stay valid) and passes opcheck with a
    bool and an additive mask and with none."""
    from autokernel.ops import op_signature, register_source

    assert list(op_signature("flash_attention").parameters) == ["q", "k", "v", "causal", "scale", "mask"]
    op = register_source(starter_path("flash_attention").read_text())
    assert "Tensor? mask=None" in str(op.op._schema)
    gen = K.gen(15)
    q, k, v, causal, scale = K.make(shape(1, 4, 2, 2, 20, 16, 1), torch.float32, gen)
    allowed, bias = _masks(1, 4, 2, 20, gen)
    for args in ((q, k, v, causal, scale), (q, k, v, causal, scale, allowed), (q, k, v, False, 0.3, bias)):
        result = torch.library.opcheck(op.op, args)
        assert set(result.values()) == {"SUCCESS"}, result
        torch.testing.assert_close(op(*args), SPEC.reference(*args), atol=1e-4, rtol=1e-4)


def test_profile_shapes_carry_the_kv_length():
    """Profile's shapes of an attention call: kv_seq where the keys outnumber the queries, the
    shape from before kv_seq otherwise (so stored profile rows keep their labels)."""
    from autokernel.kernels.flash_attention.hooks import HOOKS, attention_shapes

    op = HOOKS.op_shape("aten::scaled_dot_product_attention", [[2, 32, 1, 128], [2, 8, 2048, 128], [2, 8, 2048, 128]])
    assert SPEC.shape_label(op) == "2x32x8x1x128x0x2048"
    assert HOOKS.op_shape("aten::_scaled_dot_product_flash_attention",
                          [[1, 4, 16, 64], [1, 4, 16, 64], [1, 4, 16, 64]]) == shape(1, 4, 4, 16, 16, 64, 0)
    q, k = torch.empty(1, 4, 4, 16), torch.empty(1, 2, 40, 16)
    assert attention_shapes(None, q, k, {"is_causal": True}) == [shape(1, 4, 2, 4, 40, 16, 1)]


def test_plug_contract_is_decided_from_shapes():
    """Which calls the plug sends to the kernel (the rest go to SDPA): q and kv of one length
    without a mask; with a 4-D mask (or keys longer than queries) up to 16 queries; never dropout,
    a position bias or fewer keys than queries."""
    from autokernel.kernels.flash_attention.hooks import covers

    def c(sq, sk, mask_shape=None, dropout=0.0, **kw):
        mask = None if mask_shape is None else torch.ones(mask_shape, dtype=torch.bool)
        return covers(torch.empty(1, 4, sq, 8), torch.empty(1, 2, sk, 8), mask, False, dropout, kw)

    assert c(300, 300) and c(1, 2048) and c(16, 40) and c(1, 2048, (1, 1, 1, 2048)) and c(8, 8, (2, 4, 8, 8))
    assert not c(17, 40) and not c(300, 300, (1, 1, 300, 300)) and not c(4, 3)
    assert not c(1, 2048, (1, 1, 1, 4096)) and not c(4, 40, (40,)) and not c(8, 8, dropout=0.1)
    assert not c(8, 8, position_bias=torch.zeros(1)) and c(8, 8, position_bias=None)


# ---------------------------------------------------------------- a model decoding through it


def test_tiny_llama_generates_with_a_static_cache_through_the_decode_path(tmp_path):
    """transformers' tiny LLaMA (GQA 4/2) generates with a StaticCache, with AutoKernel's
    flash_attention applied and without: the same tokens and logits. Every decode step runs the
    decode path (the static cache's mask over its unfilled slots), keyed by the cache length. The
    prefill of an unpadded batch runs the prefill kernel (transformers drops the unfilled slots
    there); a left-padded batch's prefill has a mask: the decode path, 8 queries against the cache."""
    import autokernel
    from autokernel.models import load_model

    b = load_model("llama-tiny", seq=8)
    model = b.model.eval()
    ids = torch.randint(1, 1000, (2, 8), generator=torch.Generator().manual_seed(0))
    padded = torch.ones_like(ids)
    padded[1, :3] = 0  # left padding: masked keys besides the unfilled cache

    def generate(pad):
        with torch.inference_mode():
            return model.generate(ids, attention_mask=pad, max_new_tokens=5, do_sample=False, pad_token_id=0,
                                  cache_implementation="static", output_logits=True, return_dict_in_generate=True)

    layers, cache = 2, 8 + 5 - 1  # the static cache: prompt + new tokens - 1
    decode_key = (f"2x4x2x1x16x0x{cache}", "float32")  # one query, not causal (the mask is), 12 keys
    for pad, prefill_key in ((torch.ones_like(ids), ("2x4x2x8x16x1", "float32")),
                             (padded, (f"2x4x2x8x16x0x{cache}", "float32"))):
        ref = generate(pad)
        handle = autokernel.apply(model, kernels=["flash_attention"], home=tmp_path, use_unmeasured=True)
        try:
            out = generate(pad)
            rep = handle.report
        finally:
            handle.remove()
        assert torch.equal(out.sequences, ref.sequences) and out.sequences.shape[1] == cache + 1
        for a, r in zip(out.logits, ref.logits):
            torch.testing.assert_close(a, r, atol=1e-4, rtol=1e-4)
        assert rep.shapes["flash_attention"] == {prefill_key: layers, decode_key: 4 * layers}
        assert rep.calls["flash_attention"] == 5 * layers and not rep.fallbacks


# ---------------------------------------------------------------- sm_90 compile and the GPU


@pytest.mark.slow
@pytest.mark.skipif(HAS_CUDA, reason="on a GPU the GPU tests compile it for real")
def test_decode_kernels_compile_for_hopper(tmp_path):
    """Both decode kernels at the committed tunables, launched under the interpreter with their
    launches recorded (a 2048-key cache), then compiled by Triton for sm_90a and assembled by
    ptxas: one query (a 16-row padded tile) split three ways and merged, GQA 4:1 with 4 queries and
    a bool mask, and eight kv heads in one split each (the split kernel writes O); head dims 128
    and 64. Each fits in shared memory without spills and the split kernel multiplies on tensor
    cores (mma.sync: wgmma wants 64 rows a warpgroup)."""
    from autokernel.bench.gpu_compile import record_launches

    pytest.importorskip("triton.backends.nvidia")
    mod = load("triton")
    jobs = []
    for s, masked, merged in ((shape(1, 2, 2, 1, 2048, 128, 1), False, True), (shape(1, 8, 2, 4, 2048, 64, 1), True, True),
                              (shape(1, 8, 8, 1, 2048, 128, 1), False, False)):
        q, k, v, causal, scale = K.make(s, torch.float16, K.gen(16), device="cpu")
        mask = torch.ones(1, 1, s["seq"], 2048, dtype=torch.bool) if masked else None
        with record_launches() as launches:
            mod.kernel_fn(q, k, v, causal, scale, mask)
        assert [rec.name for rec in launches] == ["_decode_split"] + ["_decode_merge"] * merged
        jobs += [job(f"{rec.name} {SPEC.shape_label(s)} mask={masked}", rec) for rec in launches]
    for r in compile_sm90(jobs, tmp_path):
        assert "error" not in r and r["ok"], r
        assert r["smem"] <= 227 * 1024 and r["spill"] == 0, r
        if r["kernel"] == "_decode_split":
            assert r["wgmma"] + r["mma"] > 0, r  # tiles under 64 rows: mma.sync, not wgmma


DECODE_GPU = [shape(1, 32, 32, 1, 2048, 128, 1), shape(32, 32, 32, 1, 2048, 128, 1),
              shape(8, 32, 8, 1, 8192, 128, 1), shape(4, 32, 8, 4, 2048, 128, 1)]


@pytest.mark.gpu
@pytest.mark.parametrize("s", DECODE_GPU, ids=SPEC.shape_label)
def test_decode_on_the_gpu_against_sdpa(s):
    """bf16 at LLaMA-7B's decode shapes (B1 and B32 with a 2048-token cache, GQA with 8192, four
    queries): the float64 reference's tolerance, SDPA's bf16 output as close, and a static cache's
    bool mask (the unfilled tail masked) as transformers passes it."""
    mod = load("triton")
    args = K.make(s, torch.bfloat16, K.gen(17, "cuda"), device="cuda")
    out = mod.kernel_fn(*args)
    check(out, args, torch.bfloat16)
    q, k, v, causal, _ = args
    filled = s["kv_seq"] - 300
    mask = torch.zeros(s["batch"], 1, s["seq"], s["kv_seq"], dtype=torch.bool, device="cuda")
    mask[..., :filled] = True
    out = mod.kernel_fn(q, k, v, False, None, mask)
    sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    torch.testing.assert_close(out.float(), sdpa.float(), atol=2e-2, rtol=2e-2)
    check(out, (q, k, v, False, None, mask), torch.bfloat16)


@pytest.mark.gpu
def test_cuda_starter_decode_shapes_and_masks():
    """The CUDA starter takes the same calls (one block per head over the whole cache: correct,
    not split): keys longer than queries with bottom-right causal, bool and additive masks, rows
    that see no key, on both its tensor-core (bf16, d 128) and scalar (fp32, d 40) paths."""
    mod = load("cuda")
    gen = K.gen(18, "cuda")
    for dtype, d in ((torch.bfloat16, 128), (torch.float16, 64), (torch.float32, 40)):
        for s in (shape(2, 8, 2, 1, 1000, d, 1), shape(2, 8, 2, 4, 333, d, 1), shape(1, 4, 4, 16, 16, d, 0)):
            q, k, v, causal, scale = K.make(s, dtype, gen, device="cuda")
            check(mod.kernel_fn(q, k, v, causal, scale), (q, k, v, causal, scale), dtype)
            masks = _masks(s["batch"], s["heads"], s["seq"], k.shape[2], torch.Generator().manual_seed(3))
            for mask in (masks[0].cuda(), masks[1].to("cuda", dtype)):
                args = (q, k, v, causal, scale, mask)
                check(mod.kernel_fn(*args), args, dtype)
