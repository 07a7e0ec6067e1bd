"""An attention masked by a registered buffer (minGPT's tril buffer, kb/attention_rewrites.py): the
flash kernel's causal attention when the mask is the causal one, the reference's ops otherwise."""

import torch

from autokernel.kernels.flash_attention.kb_helper import _kb_sdpa

_KB_CAUSAL = {}


def _kb_is_causal(buf, value):
    """(buf == value) is exactly the strict upper triangle of its last two dims, for every leading
    index (minGPT's registered tril buffer): computed once per buffer storage, version and view."""
    key = (buf.data_ptr(), buf._version, tuple(buf.shape), tuple(buf.stride()), value, buf.device)
    hit = _KB_CAUSAL.get(key)
    if hit is None:
        upper = torch.ones(buf.shape[-2], buf.shape[-1], dtype=torch.bool, device=buf.device).triu(1)
        hit = bool(((buf == value) == upper).all())
        if len(_KB_CAUSAL) > 64:
            _KB_CAUSAL.clear()
        _KB_CAUSAL[key] = hit
    return hit


def _kb_masked_sdpa(q, k, v, buf, value, scale):
    """softmax((q @ k^T) * scale, masked to -inf where buf == value) @ v: the flash kernel's causal
    attention when the mask is the causal one, the reference's ops otherwise."""
    S = q.shape[2]
    if k.shape[2] == S and tuple(buf.shape[-2:]) == (S, S) and _kb_is_causal(buf, value):
        return _kb_sdpa(q, k, v, causal=True, scale=scale)
    att = torch.matmul(q, k.transpose(-2, -1)) * scale
    return torch.matmul(torch.softmax(att.masked_fill(buf == value, float("-inf")), dim=-1), v)
