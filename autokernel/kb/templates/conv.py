"""The generated convolution kernel: nn.Conv1d / Conv2d / Conv3d and their
transposes (and the F. functions) forward as an implicit GEMM, for problems that would otherwise start torch-only
(KernelBench level 1's convolutions; level 2 keeps cuDNN's convolution next to its fused
elementwise kernels). Every case is the 3-D one with unit dims prepended: rows are the output
positions (n, od, oh, ow), columns the output channels of one group, and the reduction runs over
(input channel, kd, kh, kw), the input gathered with masks for padding (a transposed convolution
gathers the inputs whose stride step lands on the output position). fp32 products are true
fp32 ("ieee"), as the judge turns TF32 off for the reference.
"""

import torch
import triton
import triton.language as tl

from autokernel.kb.templates.launch import cdiv, launch

# ---- generated convolution Triton kernel (autokernel kb): Conv1d / 2d / 3d as an implicit GEMM ----
CONV_BLOCK_M = 64  # output positions per program
CONV_BLOCK_N = 64  # output channels (of one group) per program
CONV_BLOCK_K = 32  # chunk of the (input channel, kd, kh, kw) reduction
CONV_WARPS = 4


@triton.jit
def _kb_conv_kernel(x_ptr, w_ptr, b_ptr, y_ptr, N, C, D, H, W, OC, OD, OH, OW, KD, KH, KW,
                    sd, sh, sw, pd, ph, pw, dd, dh, dw, cpg, opg, HAS_BIAS: tl.constexpr, IEEE: tl.constexpr,
                    TRANSPOSED: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    g = tl.program_id(2)
    M = N * OD * OH * OW
    K = cpg * KD * KH * KW
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    ow = rm % OW
    t = rm // OW
    oh = t % OH
    t = t // OH
    od = t % OD
    n = (t // OD).to(tl.int64)
    oc = g * opg + rn
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        kw = rk % KW
        q = rk // KW  # not t: triton types a name reused in the loop as loop-carried
        kh = q % KH
        q = q // KH
        kd = q % KD
        ci = q // KD
        c = g * cpg + ci
        if TRANSPOSED:  # output o gathers input i where o = i * s - p + k * d
            e_d = od[:, None] + pd - kd[None, :] * dd
            e_h = oh[:, None] + ph - kh[None, :] * dh
            e_w = ow[:, None] + pw - kw[None, :] * dw
            inside = (e_d >= 0) & (e_d % sd == 0) & (e_h >= 0) & (e_h % sh == 0) & (e_w >= 0) & (e_w % sw == 0)
            i_d, i_h, i_w = e_d // sd, e_h // sh, e_w // sw
        else:
            i_d = od[:, None] * sd - pd + kd[None, :] * dd
            i_h = oh[:, None] * sh - ph + kh[None, :] * dh
            i_w = ow[:, None] * sw - pw + kw[None, :] * dw
            inside = (i_d >= 0) & (i_h >= 0) & (i_w >= 0)
        inside = inside & (i_d < D) & (i_h < H) & (i_w < W)
        valid = inside & (rm < M)[:, None] & (rk < K)[None, :]
        x_off = (((n[:, None] * C + c[None, :]) * D + i_d) * H + i_h) * W + i_w
        a = tl.load(x_ptr + x_off, mask=valid, other=0.0)
        if TRANSPOSED:  # weight [C, OC / groups, KD, KH, KW]
            w_off = (c[:, None].to(tl.int64) * opg + rn[None, :]) * (KD * KH * KW) + (rk % (KD * KH * KW))[:, None]
        else:  # weight [OC, C / groups, KD, KH, KW]: rows of K
            w_off = oc[None, :].to(tl.int64) * K + rk[:, None]
        b = tl.load(w_ptr + w_off, mask=(rk < K)[:, None] & (rn < opg)[None, :], other=0.0)
        if IEEE:
            acc += tl.dot(a, b, input_precision="ieee")
        else:
            acc += tl.dot(a, b)
    if HAS_BIAS:
        acc += tl.load(b_ptr + oc, mask=rn < opg, other=0.0).to(tl.float32)[None, :]
    pos = (od * OH + oh) * OW + ow
    y_off = (n[:, None] * OC + oc[None, :]) * (OD * OH * OW) + pos[:, None]
    tl.store(y_ptr + y_off, acc.to(y_ptr.dtype.element_ty), mask=(rm < M)[:, None] & (rn < opg)[None, :])


def _kb_conv(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, transposed=False, output_padding=0):
    """F.conv1d / conv2d / conv3d (by weight.dim()), zero padding: an int, a tuple, 'valid' or
    'same'; with `transposed`, F.conv_transpose1d / 2d / 3d."""
    nd = weight.dim() - 2

    def three(v, fill):
        v = tuple(v) if isinstance(v, (tuple, list)) else (v,) * nd
        return (fill,) * (3 - nd) + v

    xs = x.reshape(x.shape[0], x.shape[1], *([1] * (3 - nd)), *x.shape[2:]).contiguous()
    ws = weight.reshape(weight.shape[0], weight.shape[1], *([1] * (3 - nd)), *weight.shape[2:]).contiguous()
    N, C, D, H, W = xs.shape
    OC, cpg, KD, KH, KW = ws.shape
    s, d = three(stride, 1), three(dilation, 1)
    span = [dl * (k - 1) for dl, k in zip(d, (KD, KH, KW))]
    if transposed:
        OC, cpg = cpg * groups, C // groups
        p = three(padding, 0)
        out = tuple((size - 1) * st - 2 * pp + sp + op + 1
                    for size, st, pp, sp, op in zip((D, H, W), s, p, span, three(output_padding, 0)))
    elif padding == "same":  # stride 1; the odd extra padding goes after, as torch's
        p = [sp // 2 for sp in span]
        out = (D, H, W)
    else:
        p = three(0 if padding == "valid" else padding, 0)
        out = tuple((size + 2 * pp - sp - 1) // st + 1 for size, pp, sp, st in zip((D, H, W), p, span, s))
    OD, OH, OW = out
    y = torch.empty((N, OC, OD, OH, OW), device=x.device, dtype=x.dtype)
    opg = OC // groups
    if y.numel() and cpg * KD * KH * KW and x.numel():
        grid = (cdiv(N * OD * OH * OW, CONV_BLOCK_M), cdiv(opg, CONV_BLOCK_N), groups)
        launch(_kb_conv_kernel, grid, xs, ws, bias if bias is not None else ws, y, N, C, D, H, W, OC, OD, OH, OW, KD, KH, KW,
                              *s, *p, *d, cpg, opg, HAS_BIAS=bias is not None, IEEE=x.dtype == torch.float32,
                              TRANSPOSED=transposed, BLOCK_M=CONV_BLOCK_M, BLOCK_N=CONV_BLOCK_N, BLOCK_K=CONV_BLOCK_K,
                              num_warps=CONV_WARPS)
    elif y.numel():
        y.zero_()
        if bias is not None:
            y += bias.reshape(1, -1, 1, 1, 1)
    return y.reshape(N, OC, *y.shape[5 - nd:])


SEARCH_SPACE = {"CONV_BLOCK_M": [32, 64, 128], "CONV_BLOCK_N": [16, 32, 64, 128], "CONV_BLOCK_K": [16, 32, 64],
                "CONV_WARPS": [2, 4, 8]}


def kernel_fn(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, transposed=False, output_padding=0):
    """The file's entry function: the generated convolution kernel."""
    return _kb_conv(x, weight, bias, stride, padding, dilation, groups, transposed, output_padding)
