"""The generated pooling kernel: nn.MaxPool1d/2d/3d and nn.AvgPool1d/2d/3d
(and the F. functions) forward, for problems that would otherwise start torch-only (KernelBench
level 1's pools). Every case is the 3-D one with unit dims prepended; a program computes a
[POOL_BLOCK_H, POOL_BLOCK_W] tile of one plane's outputs at one output depth, walking the window
with 32-bit offsets inside the plane (a per-element 64-bit index split cost more than the loads). Max pools pad with -inf and take dilation; average pools
divide by the window clipped to the padded input (count_include_pad) or by the elements inside
it, or by divisor_override; ceil_mode as torch's (a last window that starts in the right padding
is dropped).
"""

import torch
import triton
import triton.language as tl

from autokernel.kb.templates.launch import cdiv, launch, next_power_of_2

# ---- generated pooling Triton kernel (autokernel kb): max / average pools over 1-3 dims ----
POOL_BLOCK_H = 8  # output rows per program (of one plane and output depth)
POOL_BLOCK_W = 64  # output columns per program: consecutive, so the window's loads are coalesced
POOL_WARPS = 4


@triton.jit
def _kb_pool_kernel(x_ptr, y_ptr, D, H, W, OD, OH, OW, KD, KH, KW, sd, sh, sw, pd, ph, pw,
                    dd, dh, dw, divisor, w_tiles, IS_MAX: tl.constexpr, INCLUDE_PAD: tl.constexpr,
                    BH: tl.constexpr, BW: tl.constexpr):
    # program (tile of one output depth od, plane nc): a [BH, BW] block of outputs; the plane's base
    # offset is 64-bit once, offsets inside a plane 32-bit (the wrapper checks they fit)
    t = tl.program_id(0)
    nc = tl.program_id(1).to(tl.int64)
    od = t // (w_tiles * tl.cdiv(OH, BH))
    t = t % (w_tiles * tl.cdiv(OH, BH))
    oh = (t // w_tiles) * BH + tl.arange(0, BH)
    ow = (t % w_tiles) * BW + tl.arange(0, BW)
    live = (oh < OH)[:, None] & (ow < OW)[None, :]
    xp = x_ptr + nc * D * H * W
    d0 = od * sd - pd
    h0 = oh * sh - ph
    w0 = ow * sw - pw
    if IS_MAX:
        acc = tl.full([BH, BW], float("-inf"), tl.float32)
    else:
        acc = tl.zeros([BH, BW], tl.float32)
    count = tl.zeros([BH, BW], tl.float32)
    for kd in range(0, KD):
        i_d = d0 + kd * dd
        # a depth outside the input is skipped by a branch, not folded into the masks as a scalar:
        # Triton 3.9's interpreter rejects a mask built from a scalar and a block
        if (i_d >= 0) & (i_d < D):
            for kh in range(0, KH):
                i_h = h0 + kh * dh
                row = live & ((i_h >= 0) & (i_h < H))[:, None]
                base = (i_d * H + i_h) * W
                for kw in range(0, KW):
                    i_w = w0 + kw * dw
                    inside = row & ((i_w >= 0) & (i_w < W))[None, :]
                    v = tl.load(xp + base[:, None] + i_w[None, :], mask=inside,
                                other=float("-inf") if IS_MAX else 0.0)
                    if IS_MAX:
                        acc = tl.maximum(acc, v.to(tl.float32))
                    else:
                        acc += v.to(tl.float32)
                        count += inside.to(tl.float32)
    if not IS_MAX:
        if divisor > 0:
            acc = acc / divisor
        elif INCLUDE_PAD:  # the window clipped to the padded input
            span_d = tl.minimum(d0 + KD, D + pd) - d0
            span_h = tl.minimum(h0 + KH, H + ph) - h0
            span_w = tl.minimum(w0 + KW, W + pw) - w0
            acc = acc / tl.maximum(span_d * span_h[:, None] * span_w[None, :], 1).to(tl.float32)
        else:
            acc = acc / tl.maximum(count, 1.0)  # 0 only in lanes past the end
    out = y_ptr + nc * OD * OH * OW + (od * OH + oh[:, None]) * OW + ow[None, :]
    tl.store(out, acc.to(y_ptr.dtype.element_ty), mask=live)


def _kb_pool(x, nd, kind, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, count_include_pad=True,
             divisor_override=None):
    """max_pool{nd}d (kind "max") or avg_pool{nd}d (kind "avg") of x, as torch's."""
    def three(v, fill):
        v = tuple(v) if isinstance(v, (tuple, list)) else (v,) * nd
        return (fill,) * (3 - nd) + v

    k = three(kernel_size, 1)
    s = three(stride if stride not in (None, [], ()) else kernel_size, 1)
    p, d = three(padding, 0), three(dilation if kind == "max" else 1, 1)
    lead = x.shape[:x.dim() - nd]
    xs = x.reshape(-1, *([1] * (3 - nd)), *x.shape[x.dim() - nd:]).contiguous()
    _, D, H, W = xs.shape
    out = []
    for size, kk, st, pp, dl in zip((D, H, W), k, s, p, d):
        span = size + 2 * pp - dl * (kk - 1) - 1
        o = (span + (st - 1 if ceil_mode else 0)) // st + 1
        if ceil_mode and (o - 1) * st >= size + pp:  # a last window starting in the right padding
            o -= 1
        out.append(o)
    y = torch.empty((xs.shape[0], *out), device=x.device, dtype=x.dtype)
    if y.numel():
        assert D * H * W < 2**31 and y[0].numel() < 2**31, "a plane past 32-bit offsets"
        # short output rows (a 1-D pool has one) give their tile's rows to the columns
        bh = min(POOL_BLOCK_H, next_power_of_2(out[1]))
        bw = min(POOL_BLOCK_H * POOL_BLOCK_W // bh, max(16, next_power_of_2(out[2])))
        w_tiles = cdiv(out[2], bw)
        grid = (out[0] * cdiv(out[1], bh) * w_tiles, xs.shape[0])
        launch(_kb_pool_kernel, grid, xs, y, D, H, W, *out, *k, *s, *p, *d, float(divisor_override or 0), w_tiles,
               IS_MAX=kind == "max", INCLUDE_PAD=bool(count_include_pad), BH=bh, BW=bw, num_warps=POOL_WARPS)
    return y.reshape(*lead, *out[3 - nd:])


SEARCH_SPACE = {"POOL_BLOCK_H": [1, 2, 4, 8, 16], "POOL_BLOCK_W": [16, 32, 64, 128, 256], "POOL_WARPS": [1, 2, 4, 8]}


def kernel_fn(x, nd=2, kind="max", kernel_size=2, stride=None, padding=0, dilation=1, ceil_mode=False,
              count_include_pad=True, divisor_override=None):
    """The file's entry function: the generated pooling kernel."""
    return _kb_pool(x, nd, kind, kernel_size, stride, padding, dilation, ceil_mode, count_include_pad,
                    divisor_override)
