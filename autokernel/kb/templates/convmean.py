"""The mean over all spatial dims of a transposed convolution without padding, by what it computes
(KernelBench L2 42: ConvTranspose2d, then a global average pool).

Without padding no product of a transposed convolution falls outside its output: input position i
and tap k land on output i * stride + k * dilation, which is inside for every i and k, whatever the
stride, dilation and output padding. So the output's spatial sum for sample n and output channel o
(of group g) is sum over c of S[n, c] * Wsum[c, o] plus bias[o] times the output positions P, where
S[n, c] is input channel c's spatial sum and Wsum[c, o] the weight summed over its taps. The mean
needs one read of the input and an [N, C] x [C, OC] product instead of the convolution's
N * C * P_in * OC / groups * taps products (L2 42 on an H100: 17 ms eager, cuDNN's FFT path).
With padding some products are cropped away and the identity fails: the rewrite (kernel_rewrites.py)
takes padding 0 only.

Two kernels: partial sums of each (n, c) plane over chunks of its positions (parallel over the
chunks as well as the planes: a plane per program would leave the GPU idle for small N * C), then
per (n, block of output channels, group) the product with the tap-summed weight, the bias and 1 / P.
Sums are fp32 in a fixed order: the result does not depend on scheduling.
"""

import torch
import triton
import triton.language as tl

from autokernel.kb.templates.launch import cdiv, launch, next_power_of_2

# ---- generated convolution-mean kernels (autokernel kb): mean of a transposed conv over space ----
CONVMEAN_CHUNK = 16384  # input positions one program of the sum kernel adds up
CONVMEAN_BLOCK = 2048  # the sum kernel's vector width
CONVMEAN_WARPS = 8
CONVMEAN_BLOCK_O = 64  # output channels per program of the product kernel
CONVMEAN_MAX_SPLIT = 512  # chunks per plane at most (the product kernel reads them in one vector)


@triton.jit
def _kb_convmean_sum_kernel(x_ptr, part_ptr, P, SPLIT, CHUNK, BLOCK: tl.constexpr):
    row = tl.program_id(0)  # one (n, c) plane of P positions
    s = tl.program_id(1)  # its chunk
    base = x_ptr + row.to(tl.int64) * P
    acc = tl.zeros([BLOCK], tl.float32)
    for off in range(0, CHUNK, BLOCK):
        i = s * CHUNK + off + tl.arange(0, BLOCK)
        acc += tl.load(base + i, mask=i < P, other=0.0).to(tl.float32)
    tl.store(part_ptr + row.to(tl.int64) * SPLIT + s, tl.sum(acc, 0))


@triton.jit
def _kb_convmean_out_kernel(part_ptr, w_ptr, b_ptr, y_ptr, C, OC, cpg, opg, TAPS, SPLIT, inv_p,
                            HAS_BIAS: tl.constexpr, BLOCK_O: tl.constexpr, BLOCK_T: tl.constexpr,
                            BLOCK_S: tl.constexpr):
    n = tl.program_id(0)
    g = tl.program_id(2)
    ro = tl.program_id(1) * BLOCK_O + tl.arange(0, BLOCK_O)  # output channels within group g
    rs = tl.arange(0, BLOCK_S)
    rt = tl.arange(0, BLOCK_T)
    acc = tl.zeros([BLOCK_O], tl.float32)
    for ci in range(0, cpg):
        c = g * cpg + ci
        parts = tl.load(part_ptr + (n * C + c).to(tl.int64) * SPLIT + rs, mask=rs < SPLIT, other=0.0)
        s = tl.sum(parts, 0)  # S[n, c]
        wsum = tl.zeros([BLOCK_O], tl.float32)
        for t0 in range(0, TAPS, BLOCK_T):  # weight [C, OC / groups, taps]: Wsum[c, o]
            t = t0 + rt
            w = tl.load(w_ptr + (c * opg + ro[:, None]).to(tl.int64) * TAPS + t[None, :],
                        mask=(ro < opg)[:, None] & (t < TAPS)[None, :], other=0.0)
            wsum += tl.sum(w.to(tl.float32), 1)
        acc += s * wsum
    oc = g * opg + ro
    acc = acc * inv_p
    if HAS_BIAS:
        acc += tl.load(b_ptr + oc, mask=ro < opg, other=0.0).to(tl.float32)
    tl.store(y_ptr + n * OC + oc, acc.to(y_ptr.dtype.element_ty), mask=ro < opg)


def _kb_convmean(x, weight, bias=None, stride=1, dilation=1, output_padding=0, groups=1, keepdim=False):
    """conv_transpose{1,2,3}d(x, weight, bias, stride, padding=0, output_padding, groups, dilation)
    .mean(over its spatial dims, keepdim) of a batched input, without the convolution."""
    nd = weight.dim() - 2

    def per_dim(v):
        return tuple(v) if isinstance(v, (tuple, list)) else (v,) * nd

    s, d, op = per_dim(stride), per_dim(dilation), per_dim(output_padding)
    N, C = x.shape[0], x.shape[1]
    opg = weight.shape[1]
    OC, cpg, taps, P = opg * groups, C // groups, 1, 1
    for i in range(nd):
        taps *= weight.shape[2 + i]
        P *= (x.shape[2 + i] - 1) * s[i] + d[i] * (weight.shape[2 + i] - 1) + op[i] + 1
    P_in = 1
    for v in x.shape[2:]:
        P_in *= v
    x, w = x.contiguous(), weight.contiguous()
    y = torch.empty((N, OC), device=x.device, dtype=x.dtype)
    if N * OC == 0:
        return y.view((N, OC) + (1,) * nd) if keepdim else y
    chunk = max(CONVMEAN_CHUNK, cdiv(P_in, CONVMEAN_MAX_SPLIT))
    chunk = cdiv(chunk, CONVMEAN_BLOCK) * CONVMEAN_BLOCK
    split = max(1, cdiv(P_in, chunk))
    part = torch.empty((N * C, split), device=x.device, dtype=torch.float32)
    if N * C:
        launch(_kb_convmean_sum_kernel, (N * C, split), x, part, P_in, split, chunk, BLOCK=CONVMEAN_BLOCK,
               num_warps=CONVMEAN_WARPS)
    b = bias if bias is not None else y
    launch(_kb_convmean_out_kernel, (N, cdiv(opg, CONVMEAN_BLOCK_O), groups), part, w, b, y, C, OC, cpg, opg, taps,
           split, 1.0 / P, HAS_BIAS=bias is not None, BLOCK_O=CONVMEAN_BLOCK_O,
           BLOCK_T=min(64, next_power_of_2(taps)), BLOCK_S=next_power_of_2(split), num_warps=4)
    return y.view((N, OC) + (1,) * nd) if keepdim else y


SEARCH_SPACE = {"CONVMEAN_CHUNK": [4096, 16384, 65536], "CONVMEAN_BLOCK": [1024, 2048, 4096],
                "CONVMEAN_WARPS": [4, 8], "CONVMEAN_BLOCK_O": [32, 64, 128]}


def kernel_fn(x, weight, bias=None, stride=1, dilation=1, output_padding=0, groups=1, keepdim=False):
    """The file's entry function: the generated convolution mean."""
    return _kb_convmean(x, weight, bias, stride, dilation, output_padding, groups, keepdim)
