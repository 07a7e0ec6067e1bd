"""The calls of a KernelBench problem the matmul starter computes, adapted to the starter's kernel_fn (2-D matmul) and bmm."""

import torch

from autokernel.kb.templates.elementwise import EW
from autokernel.kb.templates.elementwise import kb_ew as _kb_ew
from autokernel.kernels.matmul.triton_starter import bmm, kernel_fn


def _kb_mm(a, b):
    if a.dim() == 2 and b.dim() == 2:
        return kernel_fn(a, b)
    if a.dim() == 3 and b.dim() == 3 and a.shape[0] == b.shape[0]:
        return bmm(a, b)
    if a.dim() == b.dim() > 3 and a.shape[:-2] == b.shape[:-2]:  # [B, H, M, K] @ [B, H, K, N]: one bmm
        return bmm(a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:])).reshape(*a.shape[:-1], b.shape[-1])
    if b.dim() == 2:
        return kernel_fn(a.reshape(-1, a.shape[-1]), b).reshape(*a.shape[:-1], b.shape[-1])
    return torch.matmul(a, b)


def _kb_linear(x, weight, bias=None):
    y = kernel_fn(x.reshape(-1, x.shape[-1]), weight.t())
    if bias is not None:
        y = _kb_ew(EW.ADD, y, bias)
    return y.reshape(*x.shape[:-1], weight.shape[0])


def _kb_sdpa_mm(q, k, v, causal=False, scale=None):
    """scaled_dot_product_attention for what the flash starter does not take (head dims past its
    budget, q and kv of different lengths): scores and output by bmm, the softmax in fp32 by torch."""
    B, H, S, D = q.shape
    Hkv, Sk, Dv = k.shape[1], k.shape[2], v.shape[3]
    if Hkv != H:  # GQA
        k = k.repeat_interleave(H // Hkv, dim=1)
        v = v.repeat_interleave(H // Hkv, dim=1)
    scores = bmm(q.reshape(B * H, S, D), k.reshape(B * H, Sk, D).transpose(1, 2)).float()
    scores = scores * (D ** -0.5 if scale is None else scale)
    if causal:  # top-left aligned, as SDPA's is_causal
        scores = scores.masked_fill(torch.ones(S, Sk, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    p = torch.softmax(scores, dim=-1).to(q.dtype)
    return bmm(p, v.reshape(B * H, Sk, Dv)).reshape(B, H, S, Dv)
