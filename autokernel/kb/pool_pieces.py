"""The source pieces of the generated pooling kernel: nn.MaxPool1d/2d/3d and nn.AvgPool1d/2d/3d
(and the F. functions) forward, for problems that would otherwise start torch-only (KernelBench
level 1's pools). Every case is the 3-D one with unit dims prepended; a program computes BLOCK
output positions, walking the window. Max pools pad with -inf and take dilation; average pools
divide by the window clipped to the padded input (count_include_pad) or by the elements inside
it, or by divisor_override; ceil_mode as torch's (a last window that starts in the right padding
is dropped). Like the scan kernel, it carries its own tunables.
"""

from __future__ import annotations

POOL_SOURCE = '''
# ---- generated pooling Triton kernel (autokernel kb): max / average pools over 1-3 dims ----
POOL_BLOCK = 256  # output positions per program
POOL_WARPS = 4


@triton.jit
def _kb_pool_kernel(x_ptr, y_ptr, total, D, H, W, OD, OH, OW, KD, KH, KW, sd, sh, sw, pd, ph, pw,
                    dd, dh, dw, divisor, IS_MAX: tl.constexpr, INCLUDE_PAD: tl.constexpr,
                    BLOCK: tl.constexpr):
    o = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    live = o < total
    ow = o % OW
    t = o // OW
    oh = t % OH
    t = t // OH
    od = t % OD
    nc = t // OD
    d0 = od * sd - pd
    h0 = oh * sh - ph
    w0 = ow * sw - pw
    if IS_MAX:
        acc = tl.full([BLOCK], float("-inf"), tl.float32)
    else:
        acc = tl.zeros([BLOCK], tl.float32)
    count = tl.zeros([BLOCK], tl.float32)
    for k in range(0, KD * KH * KW):
        kw = k % KW
        kh = (k // KW) % KH
        kd = k // (KW * KH)
        i_d = d0 + kd * dd
        i_h = h0 + kh * dh
        i_w = w0 + kw * dw
        inside = live & (i_d >= 0) & (i_d < D) & (i_h >= 0) & (i_h < H) & (i_w >= 0) & (i_w < W)
        v = tl.load(x_ptr + ((nc * D + i_d) * H + i_h) * W + i_w, mask=inside, other=float("-inf") if IS_MAX else 0.0)
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
            acc = acc / tl.maximum(span_d * span_h * span_w, 1).to(tl.float32)
        else:
            acc = acc / tl.maximum(count, 1.0)  # 0 only in lanes past the end
    tl.store(y_ptr + o, acc.to(y_ptr.dtype.element_ty), mask=live)


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
    total = y.numel()
    if total:
        launch(_kb_pool_kernel, (cdiv(total, POOL_BLOCK),), 
            xs, y, total, D, H, W, *out, *k, *s, *p, *d, float(divisor_override or 0), IS_MAX=kind == "max",
            INCLUDE_PAD=bool(count_include_pad), BLOCK=POOL_BLOCK, num_warps=POOL_WARPS)
    return y.reshape(*lead, *out[3 - nd:])
'''

POOL_SPACE = {"POOL_BLOCK": [64, 128, 256, 512, 1024], "POOL_WARPS": [1, 2, 4, 8]}

POOL_ENTRY = '''

def kernel_fn(x, nd=2, kind="max", kernel_size=2, stride=None, padding=0, dilation=1, ceil_mode=False,
              count_include_pad=True, divisor_override=None):
    """The file's entry function: the generated pooling kernel."""
    return _kb_pool(x, nd, kind, kernel_size, stride, padding, dilation, ceil_mode, count_include_pad,
                    divisor_override)
'''
