"""The KB compiler's templates (autokernel/kb/templates/*.py, and the kernel types' helper templates
kernels/<type>/kb_helper.py) as modules, like the starters: each imported and its kernels run
(interpreter on CPU) on small fp32 inputs against torch; the named elementwise table read from the
elementwise template; what the emitter takes of a template's source.
"""

from __future__ import annotations

import importlib
import pkgutil

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F


def tmpl(name):
    return importlib.import_module(f"autokernel.kb.templates.{name}")


def helper(kernel_type, module="kb_helper"):
    return importlib.import_module(f"autokernel.kernels.{kernel_type}.{module}")


def close(a, b, **kw):
    torch.testing.assert_close(a, b, rtol=kw.get("rtol", 1e-4), atol=kw.get("atol", 1e-5))


def test_every_template_splits_into_a_self_contained_body():
    import autokernel.kb.templates as pkg
    from autokernel.kb.op_rules import library_rules
    from autokernel.kb.starter_source import helper_template
    from autokernel.kb.templates import template

    names = sorted(m.name for m in pkgutil.iter_modules(pkg.__path__))
    assert {"elementwise", "scan", "dimred", "conv", "pool", "norm", "rnn", "trimm", "convmean", "gemmsum", "graph",
            "launch", "torch_only"} <= set(names)
    helpers = [(t, "kb_helper") for t in library_rules()] + [("flash_attention", "kb_masked")]
    assert {"matmul", "softmax", "flash_attention"} <= {t for t, _ in helpers}
    for name, t in [(n, template(n)) for n in names] + [(f"{k}.{m}", helper_template(k, m)) for k, m in helpers]:
        tmpl(name) if name in names else helper(*name.split("."))  # importable
        assert "\nimport " not in t.body and "\nfrom autokernel" not in t.body.replace("    from autokernel", "")
        assert "SEARCH_SPACE" not in t.body and "def kernel_fn" not in t.body
        if name in ("scan", "dimred", "conv", "pool", "norm", "rnn", "trimm", "convmean", "gemmsum", "elementwise"):
            assert t.entry.lstrip().startswith("def kernel_fn(") and t.space
            assert all(k in t.body for k in t.space)  # every tunable is a constant of the body
    graph = template("graph")
    assert graph.space == {"KB_CUDA_GRAPH": [0, 1]} and "KB_CUDA_GRAPH = 1 " in graph.body


def test_elementwise_table_names_every_op_with_the_kernels_expression():
    from autokernel.kb.elementwise import EW_OPS
    from autokernel.kb.templates.elementwise import EW

    assert len(EW_OPS) == 32 and EW_OPS[EW.ADD].name == "ADD" and EW_OPS[EW.ADD].expr == "{x} + {y}"
    assert EW_OPS[EW.SUB].swap == EW.RSUB and EW_OPS[EW.RELU].swap is None
    assert EW_OPS[EW.SMOOTH_L1].expr == "_kb_smooth_l1({x} - {y}, {a})"  # the kernel's last branch
    assert EW_OPS[EW.CLAMP].expr == "tl.minimum(tl.maximum({x}, {a}), {b})"
    assert {op.arity for op in EW_OPS.values()} == {1, 2} and EW_OPS[EW.XLOGY].arity == 2


# each op of EW against torch: (op, torch function of x[, y], alpha, beta)
_EW_CASES = [
    ("RELU", torch.relu), ("GELU", F.gelu), ("GELU_TANH", lambda x: F.gelu(x, approximate="tanh")),
    ("SIGMOID", torch.sigmoid), ("TANH", torch.tanh), ("SILU", F.silu), ("EXP", torch.exp), ("NEG", torch.neg),
    ("ABS", torch.abs), ("RSQRT", torch.rsqrt), ("SQUARE", lambda x: x * x),
    ("SQRT", torch.sqrt), ("LOG", torch.log), ("MISH", F.mish),
    ("HARDSWISH", F.hardswish), ("SELU", F.selu), ("HARDSIGMOID", F.hardsigmoid), ("CUBE", lambda x: x ** 3),
]


@pytest.mark.parametrize("name,ref", _EW_CASES, ids=[c[0] for c in _EW_CASES])
def test_elementwise_unary_ops_match_torch(name, ref):
    m = tmpl("elementwise")
    x = torch.randn(3, 70)
    if name in ("RSQRT", "SQRT", "LOG"):
        x = x.abs() + 0.5
    close(m._kb_ew(getattr(m.EW, name), x), ref(x))


def test_elementwise_ops_with_scalars_and_broadcast_operands_match_torch():
    m, EW = tmpl("elementwise"), tmpl("elementwise").EW
    x, y = torch.randn(4, 6, 5), torch.rand(4, 6, 5) + 0.5
    close(m._kb_ew(EW.CLAMP, x, None, -0.5, 0.25), x.clamp(-0.5, 0.25))
    close(m._kb_ew(EW.LEAKY_RELU, x, None, 0.1), F.leaky_relu(x, 0.1))
    close(m._kb_ew(EW.ELU, x, None, 0.7), F.elu(x, 0.7))
    close(m._kb_ew(EW.SOFTPLUS, x, None, 2.0, 10.0), F.softplus(x, 2.0, 10.0))
    close(m._kb_ew(EW.SMOOTH_L1, x, y, 0.5), F.smooth_l1_loss(x, y, reduction="none", beta=0.5))
    close(m._kb_ew(EW.XLOGY, y, x.abs() + 0.1), torch.xlogy(y, x.abs() + 0.1))
    for op, f in ((EW.ADD, torch.add), (EW.SUB, torch.sub), (EW.MUL, torch.mul), (EW.DIV, torch.div),
                  (EW.MAXIMUM, torch.maximum), (EW.MINIMUM, torch.minimum)):
        close(m._kb_ew(op, x, y), f(x, y))  # same shape
        close(m._kb_ew(op, x, y[0, 0]), f(x, y[0, 0]))  # a row (bias)
        close(m._kb_ew(op, x, y[:, :1, :1]), f(x, y[:, :1, :1]))  # a block over a run of dims
        close(m._kb_ew(op, y[:, :1, :1], x), f(y[:, :1, :1], x))  # the broadcast one first: swapped
    close(m._kb_ew(EW.RSUB, x, None, 2.0), 2.0 - x)
    close(m._kb_ew(EW.RDIV, y, None, 3.0), 3.0 / y)
    close(m.kernel_fn(x), torch.relu(x))


def test_scan_dimred_and_trimm_templates_match_torch():
    scan, dimred, trimm = tmpl("scan"), tmpl("dimred"), tmpl("trimm")
    x = torch.rand(5, 37, 3) + 0.5
    close(scan._kb_scan(x, 1), torch.cumsum(x, 1))
    close(scan._kb_scan(x, -1, prod=True), torch.cumprod(x, -1))
    close(scan._kb_scan(x, 1, reverse=True), torch.cumsum(x.flip(1), 1).flip(1))
    close(scan.kernel_fn(x, 0), torch.cumsum(x, 0))
    head = torch.zeros_like(x[:, :1])  # exclusive: element i leaves x[i] out (reversed: from the end)
    close(scan._kb_scan(x, 1, exclusive=True), torch.cat([head, torch.cumsum(x[:, :-1], 1)], 1))
    close(scan.kernel_fn(x, 1, prod=True, reverse=True, exclusive=True),
          torch.cat([torch.cumprod(x[:, 1:].flip(1), 1).flip(1), head + 1.0], 1))
    values, indices = dimred._kb_dimred(x, 1, "max")
    close(values, torch.max(x, 1).values)
    assert torch.equal(indices, torch.max(x, 1).indices)
    close(dimred._kb_dimred(x, 1, "amin"), torch.amin(x, 1))
    assert torch.equal(dimred._kb_dimred(x, 2, "argmin"), torch.argmin(x, 2))
    close(dimred._kb_dimred(x, 1, "logsumexp", keepdim=True), torch.logsumexp(x, 1, keepdim=True))
    close(dimred.kernel_fn(x, 0, "prod"), torch.prod(x, 0))
    a, b = torch.randn(20, 20).triu(), torch.randn(20, 20).triu()
    close(trimm._kb_trimm(a, b, True), torch.triu(a @ b), atol=1e-4)
    close(trimm.kernel_fn(a.t().contiguous(), b.t().contiguous(), False), torch.tril(a.t() @ b.t()), atol=1e-4)


def test_conv_and_pool_templates_match_torch():
    conv, pool = tmpl("conv"), tmpl("pool")
    x, w, b = torch.randn(2, 4, 9, 8), torch.randn(6, 2, 3, 3), torch.randn(6)
    close(conv._kb_conv(x, w, b, stride=2, padding=1, groups=2), F.conv2d(x, w, b, 2, 1, 1, 2), atol=1e-4)
    wt = torch.randn(4, 3, 3, 3)
    close(conv.kernel_fn(x, wt, None, stride=2, padding=1, transposed=True, output_padding=1),
          F.conv_transpose2d(x, wt, None, 2, 1, 1), atol=1e-4)
    close(pool._kb_pool(x, 2, "max", 3, 2, 1), F.max_pool2d(x, 3, 2, 1))
    close(pool.kernel_fn(x, 2, "avg", 2, ceil_mode=True), F.avg_pool2d(x, 2, ceil_mode=True))


@pytest.mark.parametrize("nd, stride, padding, dilation, groups, out_pad, bias", [
    (2, 5, 1, 2, 1, 0, True),  # KernelBench L1 81's settings: most phases take one tap, some none
    (2, (2, 3), (1, 2), (2, 1), 2, (1, 0), False),  # L1 75: asymmetric, grouped, dilated
    (3, 2, 1, 1, 2, 1, True),  # L1 72 / 73: 3-D, strided, grouped
    (1, 2, 3, 2, 1, 1, False),  # L1 79: 1-D, strided and dilated
    (2, 1, 1, 2, 1, 0, True),  # stride 1: one phase, every tap
    (2, 4, 0, 2, 1, 0, True),  # gcd(stride, dilation) 2: odd phases take no tap, even ones every other
])
def test_transposed_conv_runs_one_gemm_per_output_phase(nd, stride, padding, dilation, groups, out_pad, bias):
    conv = tmpl("conv")
    torch.manual_seed(0)
    x = torch.randn(2, 4, *(5, 6, 7)[:nd])
    w = torch.randn(4, 6 // groups, *(3, 2, 3)[:nd])
    b = torch.randn(6) if bias else None
    fn = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[nd]
    want = fn(x, w, b, stride, padding, out_pad, groups, dilation)
    got = conv.kernel_fn(x, w, b, stride, padding, dilation, groups, transposed=True, output_padding=out_pad)
    assert got.shape == want.shape
    close(got, want, atol=1e-4)


@pytest.mark.parametrize("nd, stride, dilation, out_pad, groups, bias, keepdim, chunk", [
    (2, 1, 1, 0, 1, True, True, None),  # KernelBench L2 42's settings
    (1, 2, 1, 1, 2, False, False, None),
    (3, (2, 1, 3), 2, (1, 0, 2), 1, True, True, None),  # output padding: positions that only take the bias
    (2, 3, 1, 2, 4, True, False, 16),  # planes split into several chunks (the partial sums summed in order)
])
def test_convmean_is_the_transposed_convolutions_spatial_mean(nd, stride, dilation, out_pad, groups, bias, keepdim,
                                                              chunk, monkeypatch):
    cm = tmpl("convmean")
    if chunk:
        monkeypatch.setattr(cm, "CONVMEAN_CHUNK", chunk)
        monkeypatch.setattr(cm, "CONVMEAN_BLOCK", 8)
    torch.manual_seed(0)
    x = torch.randn(3, 8, *(9, 5, 7)[:nd]) + 0.5
    w = torch.randn(8, 12 // groups, *(3, 2, 3)[:nd])
    b = torch.randn(12) if bias else None
    fn = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[nd]
    want = fn(x, w, b, stride, 0, out_pad, groups, dilation).mean(dim=tuple(range(2, 2 + nd)), keepdim=keepdim)
    got = cm.kernel_fn(x, w, b, stride, dilation, out_pad, groups, keepdim)
    assert got.shape == want.shape
    close(got, want, atol=1e-4)


def test_gemmsum_is_the_scaled_shifted_gemms_sum_over_its_features(monkeypatch):
    gs = tmpl("gemmsum")
    monkeypatch.setattr(gs, "GEMMSUM_BLOCK_N", 16)  # several steps over N and K, ragged edges
    monkeypatch.setattr(gs, "GEMMSUM_BLOCK_KV", 32)
    torch.manual_seed(0)
    x, w, b, sub = torch.rand(37, 70), torch.randn(50, 70), torch.randn(50), torch.randn(1, 50)
    close(gs._kb_gemmsum(x, w, 0.5, ((0.5, b), (-1.0, sub)), False, True, True),
          ((F.linear(x, w, b)) * 0.5 - sub).sum(-1, keepdim=True), atol=1e-4)
    B = torch.randn(50, 70).t()  # a transposed view: B's strides as they are
    close(gs.kernel_fn(x, B, -2.0, ((1.0, 3.0), (2.0, torch.tensor(0.25))), mean=True),
          (3.0 + 0.5 - 2.0 * (x @ B)).mean(-1), atol=1e-4)


def test_phase_taps_are_the_taps_that_land_on_each_phase():
    conv = tmpl("conv")
    # stride 5, padding 1, dilation 2, 3 taps (L1 81): phase r takes tap t where (r + 1 - 2t) % 5 == 0
    assert conv.phase_taps(5, 1, 2, 3) == ([0, 1, 0, 2, 0], [0, 1, 0, 1, 1], 5)
    assert conv.phase_taps(1, 0, 1, 4) == ([0], [4], 1)
    assert conv.phase_taps(4, 0, 2, 5) == ([0, 0, 1, 0], [3, 0, 2, 0], 2)


def test_norm_and_rnn_templates_match_torch():
    norm, rnn = tmpl("norm"), tmpl("rnn")
    x = torch.randn(3, 4, 5, 6)
    bn = nn.BatchNorm2d(4).train()
    ref_bn = nn.BatchNorm2d(4).train()
    mean, scale, shift = norm._kb_norm_stats(x, bn, "batch")
    close((x - mean) * scale + shift, ref_bn(x), atol=1e-4)
    close(bn.running_mean, ref_bn.running_mean)  # the running statistics updated as torch does
    gn = nn.GroupNorm(2, 4)
    mean, scale, shift = norm.kernel_fn(x, gn, "group")
    close((x - mean) * scale + shift, gn(x), atol=1e-4)
    torch.manual_seed(0)
    # both directions in one launch per step, the backward one from the sequence's end; hidden sizes
    # and batches over one tile (H 70: three 32-wide tiles and two 64-wide chunks; B 18: two 16-row tiles)
    for cls, lstm in ((nn.GRU, False), (nn.LSTM, True)):
        for (i, hid, b, t, layers, bi, bias, first) in ((5, 7, 2, 4, 2, False, True, True),
                                                       (9, 70, 18, 3, 2, True, False, False),
                                                       (4, 16, 3, 5, 1, True, True, True)):
            mod = cls(i, hid, num_layers=layers, batch_first=first, bidirectional=bi, bias=bias)
            seq = torch.randn(b, t, i) if first else torch.randn(t, b, i)
            d = 2 if bi else 1
            h0 = torch.randn(layers * d, b, hid)
            for hx in (None, (h0, torch.randn(layers * d, b, hid)) if lstm else h0):
                out, h = rnn._kb_rnn(seq, hx, mod, lstm)
                ref_out, ref_h = mod(seq) if hx is None else mod(seq, hx)
                close(out, ref_out, atol=1e-4)
                close(h[0] if lstm else h, ref_h[0] if lstm else ref_h, atol=1e-4)
                if lstm:
                    close(h[1], ref_h[1], atol=1e-4)


def test_graph_launch_and_torch_only_templates():
    graph, launch, torch_only = tmpl("graph"), tmpl("launch"), tmpl("torch_only")
    x = torch.randn(4)
    close(graph._kb_graphed(nn.Module(), lambda a, s: a * s, (x, 2.0)), x * 2.0)  # no CUDA: eager
    assert launch.cdiv(10, 4) == 3 and launch.next_power_of_2(5) == 8
    with pytest.raises(NotImplementedError):
        torch_only.kernel_fn(x)


def test_library_helper_templates_match_torch():
    mm, sm, ln, rms = helper("matmul"), helper("softmax"), helper("layernorm"), helper("rmsnorm")
    red, ce, fa = helper("reduce"), helper("cross_entropy"), helper("flash_attention")
    a, b, w, bias = torch.randn(2, 3, 16, 32), torch.randn(32, 24), torch.randn(24, 32), torch.randn(24)
    close(mm._kb_mm(a, b), a @ b, atol=1e-4)
    assert mm._kb_mm(a[0], torch.randn(3, 32, 8)).shape == (3, 16, 8)
    close(mm._kb_linear(a, w, bias), F.linear(a, w, bias), atol=1e-4)
    q, k, v = torch.randn(1, 2, 16, 16), torch.randn(1, 2, 16, 16), torch.randn(1, 2, 16, 16)
    close(mm._kb_sdpa_mm(q, k, v, causal=True), F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-4)
    close(fa._kb_sdpa(q, k, v, causal=True), F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-4)
    x = torch.randn(4, 6, 10)
    close(sm._kb_softmax(x, 1, contiguous=True), torch.softmax(x, 1))
    close(sm._kb_softmax(x, -1, log=True), torch.log_softmax(x, -1))
    assert ln._kb_layer_norm(x, torch.randn(6, 10), torch.randn(6, 10), 1e-5).shape == x.shape
    g, h = torch.randn(10), torch.randn(10)
    close(ln._kb_layer_norm(x, g, h, 1e-5), F.layer_norm(x, (10,), g, h, 1e-5), atol=1e-4)
    close(rms._kb_rms_norm(x, -1, 1e-6), x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6), atol=1e-4)
    close(red._kb_sum(x, 1), x.sum(1))
    close(red._kb_mean(x), x.mean())
    logits, targets = torch.randn(8, 11), torch.randint(0, 11, (8,))
    close(ce._kb_cross_entropy(logits, targets), F.cross_entropy(logits, targets))


def test_attention_templates_match_torch():
    masked = helper("flash_attention", "kb_masked")
    q, k, v = torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16)
    tril = torch.tril(torch.ones(8, 8)).view(1, 1, 8, 8)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    close(masked._kb_masked_sdpa(q, k, v, tril, 0, 16 ** -0.5), ref, atol=1e-4)  # the causal one: flash
    other = torch.zeros(1, 1, 8, 8)
    other[..., 0] = 1.0  # a mask that is not causal: the reference's ops
    att = (q @ k.transpose(-2, -1)) * 0.25
    close(masked._kb_masked_sdpa(q, k, v, other, 1.0, 0.25),
          torch.softmax(att.masked_fill(other == 1.0, float("-inf")), -1) @ v, atol=1e-4)
    # the flash helper next to the matmul starter: the starter's names it calls prefixed _fa_
    from autokernel.kb.starter_source import helper_template
    from autokernel.kernels.flash_attention.triton_starter import kernel_fn

    second = helper_template("flash_attention", prefix="_fa_").body
    assert "_fa_kernel_fn(q, k, v, causal, scale)" in second and "_fa__kb_sdpa" not in second
    scope = {"_fa_kernel_fn": kernel_fn}
    exec(second, scope)
    close(scope["_kb_sdpa"](q, k, v), F.scaled_dot_product_attention(q, k, v), atol=1e-4)


@pytest.mark.parametrize("nd, stride, padding, dilation, mult, bias", [
    (2, 1, 0, 1, 1, False),  # KernelBench L1 82: depthwise, square kernel
    (2, (2, 1), (1, 0), (1, 2), 1, True),  # L1 83 / 85: asymmetric, strided, padded, dilated
    (2, 1, 1, 1, 2, True),  # a channel multiplier of 2 (each input channel makes two outputs)
    (1, 2, 1, 1, 1, True),
    (3, 1, (1, 0, 1), 1, 1, False),
])
def test_depthwise_conv_runs_directly_and_matches_torch(nd, stride, padding, dilation, mult, bias, monkeypatch):
    """One input channel per group: the direct kernel, not the implicit GEMM (whose tiles were
    under 1% useful there: L1 82 and 83 at 0.02-0.03x eager on an H100)."""
    conv = tmpl("conv")
    torch.manual_seed(0)
    x = torch.randn(2, 3, *(5, 9, 7)[:nd])
    w = torch.randn(3 * mult, 1, *(3, 2, 3)[:nd])
    b = torch.randn(3 * mult) if bias else None
    fn = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[nd]
    launched, real = [], conv.launch
    monkeypatch.setattr(conv, "launch", lambda kernel, grid, *a, **kw: launched.append(kernel) or real(kernel, grid, *a, **kw))
    got = conv.kernel_fn(x, w, b, stride, padding, dilation, groups=3)
    want = fn(x, w, b, stride, padding, dilation, 3)
    assert launched == [conv._kb_conv_dw_kernel]
    assert got.shape == want.shape
    close(got, want, atol=1e-4)
