"""Plug optimized kernels into a live model, for the duration of a `with` block.

What each kernel type replaces (everything is restored on exit):
- matmul: every nn.Linear (x2d @ W.t() + bias) and transformers' Conv1D (GPT-2: x2d @ W + bias).
- rmsnorm: every module named …RMSNorm with a weight and an eps (LLaMA's).
- layernorm: every nn.LayerNorm over the last dim.
- fused_mlp: every SwiGLU block (gate_proj/up_proj/down_proj without biases, SiLU).
- flash_attention: an "autokernel" entry in transformers' attention registry (and its mask
  registry), selected through config._attn_implementation; calls with a padding mask or with keys
  longer than queries (KV cache) go to SDPA and are counted as fallbacks.
- softmax: torch.nn.functional.softmax over the last dim (eager attention uses it).
- rotary_embedding: apply_rotary_pos_emb in every loaded transformers modeling module.
- cross_entropy: torch.nn.functional.cross_entropy with class-index targets, mean or sum
  reduction (transformers' LM loss when labels are given).
- reduce: torch.sum / Tensor.sum over the last dim of a floating tensor (no dtype, no keepdim).
  Models mostly reduce inside norms, which the norm kernels already cover.
Shapes or arguments a kernel's contract does not cover fall back to PyTorch and are counted.
"""

from __future__ import annotations

import sys
from collections import Counter
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from autokernel.profile import _is_swiglu_mlp

ATTN_NAME = "autokernel"


@dataclass
class PlugReport:
    calls: Counter = field(default_factory=Counter)  # kernel type -> calls into the kernel
    fallbacks: Counter = field(default_factory=Counter)  # kernel type -> calls left to PyTorch
    sites: Counter = field(default_factory=Counter)  # kernel type -> modules / functions replaced


def _flat(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(-1, x.shape[-1])


def _patch_forward(stack: ExitStack, module: nn.Module, forward: Callable) -> None:
    module.forward = forward
    stack.callback(lambda: module.__dict__.pop("forward", None))


def _patch_attr(stack: ExitStack, obj: Any, name: str, value: Any) -> None:
    old = getattr(obj, name)
    setattr(obj, name, value)
    stack.callback(setattr, obj, name, old)


def _plug_modules(stack: ExitStack, model: nn.Module, kernels: dict[str, Callable], rep: PlugReport) -> None:
    swiglu_ok = "fused_mlp" in kernels
    for m in model.modules():
        cls = type(m).__name__
        if swiglu_ok and _is_swiglu_mlp(m) and _silu_act(m) and all(
                getattr(m, n).bias is None for n in ("gate_proj", "up_proj", "down_proj")):
            fn = kernels["fused_mlp"]

            def mlp_forward(x, _m=m, _fn=fn):
                rep.calls["fused_mlp"] += 1
                y = _fn(_flat(x), _m.gate_proj.weight, _m.up_proj.weight, _m.down_proj.weight)
                return y.reshape(*x.shape[:-1], y.shape[-1])
            _patch_forward(stack, m, mlp_forward)
            rep.sites["fused_mlp"] += 1
        elif "matmul" in kernels and isinstance(m, nn.Linear):
            fn = kernels["matmul"]

            def linear_forward(x, _m=m, _fn=fn):
                rep.calls["matmul"] += 1
                y = _fn(_flat(x), _m.weight.t())
                if _m.bias is not None:
                    y = y + _m.bias
                return y.reshape(*x.shape[:-1], y.shape[-1])
            _patch_forward(stack, m, linear_forward)
            rep.sites["matmul"] += 1
        elif "matmul" in kernels and cls == "Conv1D" and getattr(m, "weight", None) is not None:
            fn = kernels["matmul"]

            def conv1d_forward(x, _m=m, _fn=fn):  # GPT-2's Conv1D keeps its weight as [in, out]
                rep.calls["matmul"] += 1
                y = _fn(_flat(x), _m.weight) + _m.bias
                return y.reshape(*x.shape[:-1], y.shape[-1])
            _patch_forward(stack, m, conv1d_forward)
            rep.sites["matmul"] += 1
        elif "rmsnorm" in kernels and cls.endswith("RMSNorm") and getattr(m, "weight", None) is not None:
            eps = getattr(m, "variance_epsilon", getattr(m, "eps", None))
            if eps is None:
                continue
            fn = kernels["rmsnorm"]

            def rms_forward(x, _m=m, _fn=fn, _eps=float(eps)):
                rep.calls["rmsnorm"] += 1
                return _fn(_flat(x), _m.weight, _eps).reshape(x.shape)
            _patch_forward(stack, m, rms_forward)
            rep.sites["rmsnorm"] += 1
        elif "layernorm" in kernels and isinstance(m, nn.LayerNorm) and len(m.normalized_shape) == 1 \
                and m.elementwise_affine:
            fn = kernels["layernorm"]

            def ln_forward(x, _m=m, _fn=fn):
                rep.calls["layernorm"] += 1
                bias = _m.bias if _m.bias is not None else torch.zeros_like(_m.weight)
                return _fn(_flat(x), _m.weight, bias, float(_m.eps)).reshape(x.shape)
            _patch_forward(stack, m, ln_forward)
            rep.sites["layernorm"] += 1


def _silu_act(m: nn.Module) -> bool:
    act = getattr(m, "act_fn", None)
    return isinstance(act, nn.SiLU) or type(act).__name__ in ("SiLU", "SiLUActivation")


def _plug_attention(stack: ExitStack, model: nn.Module, fn: Callable, rep: PlugReport) -> None:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask
    from transformers.modeling_utils import AttentionInterface

    def attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
        causal = is_causal if is_causal is not None else bool(getattr(module, "is_causal", False))
        causal = causal and query.shape[2] > 1
        if attention_mask is not None or key.shape[2] != query.shape[2] or dropout:
            rep.fallbacks["flash_attention"] += 1
            return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                          scaling=scaling, is_causal=is_causal, **kwargs)
        rep.calls["flash_attention"] += 1
        out = fn(query, key, value, causal, scaling)
        return out.transpose(1, 2).contiguous(), None

    registry = AttentionInterface._global_mapping
    mask_registry = type(ALL_MASK_ATTENTION_FUNCTIONS)._global_mapping
    registry[ATTN_NAME] = attention
    mask_registry[ATTN_NAME] = sdpa_mask  # lets an all-ones mask be dropped, as for SDPA
    stack.callback(registry.pop, ATTN_NAME, None)
    stack.callback(mask_registry.pop, ATTN_NAME, None)
    configs = {id(c): c for c in (getattr(m, "config", None) for m in model.modules())
               if c is not None and hasattr(c, "_attn_implementation")}
    for cfg in configs.values():
        old = cfg._attn_implementation
        # set the private field directly: the public setter validates against installed backends
        cfg.__dict__["_attn_implementation_internal"] = ATTN_NAME
        stack.callback(cfg.__dict__.__setitem__, "_attn_implementation_internal", old)
        rep.sites["flash_attention"] += 1


def _plug_rotary(stack: ExitStack, fn: Callable, rep: PlugReport) -> None:
    mods = [m for n, m in list(sys.modules.items())
            if n.startswith("transformers.models.") and ".modeling_" in n and m is not None
            and callable(getattr(m, "apply_rotary_pos_emb", None))]
    for mod in mods:
        original = mod.apply_rotary_pos_emb

        def rotary(q, k, cos, sin, *args, _orig=original, **kwargs):
            unsq = kwargs.get("unsqueeze_dim", args[0] if args else 1)
            if unsq != 1 or q.dim() != 4 or cos.dim() != 3 or cos.shape[-1] != q.shape[-1]:
                rep.fallbacks["rotary_embedding"] += 1
                return _orig(q, k, cos, sin, *args, **kwargs)
            rep.calls["rotary_embedding"] += 1
            # cos/sin are [B, S, D]; the kernel takes one [S, D] table, so batches with different
            # positions are rotated one at a time
            if cos.shape[0] == 1 or bool((cos == cos[:1]).all()):
                c, s = cos[0].to(q.dtype), sin[0].to(q.dtype)
                return fn(q, c, s), fn(k, c, s)
            qs, ks = [], []
            for b in range(q.shape[0]):
                c, s = cos[b].to(q.dtype), sin[b].to(q.dtype)
                qs.append(fn(q[b:b + 1], c, s))
                ks.append(fn(k[b:b + 1], c, s))
            return torch.cat(qs), torch.cat(ks)
        _patch_attr(stack, mod, "apply_rotary_pos_emb", rotary)
        rep.sites["rotary_embedding"] += 1


def _plug_functional(stack: ExitStack, kernels: dict[str, Callable], rep: PlugReport) -> None:
    if "softmax" in kernels:
        fn, orig_softmax = kernels["softmax"], F.softmax

        def softmax(input, dim=None, _stacklevel=3, dtype=None):
            if dim is None or input.dim() == 0 or dim not in (-1, input.dim() - 1) or not input.is_floating_point():
                rep.fallbacks["softmax"] += 1
                return orig_softmax(input, dim=dim, _stacklevel=_stacklevel, dtype=dtype)
            rep.calls["softmax"] += 1
            x = input if dtype is None else input.to(dtype)
            return fn(_flat(x)).reshape(x.shape)
        _patch_attr(stack, F, "softmax", softmax)
        rep.sites["softmax"] += 1
    if "cross_entropy" in kernels:
        fn, orig_ce = kernels["cross_entropy"], F.cross_entropy

        def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                          reduction="mean", label_smoothing=0.0):
            plain = (weight is None and size_average is None and reduce is None and label_smoothing == 0.0
                     and input.dim() == 2 and target.dim() == 1 and target.dtype == torch.int64
                     and reduction in ("mean", "sum"))
            if not plain:
                rep.fallbacks["cross_entropy"] += 1
                return orig_ce(input, target, weight, size_average, ignore_index, reduce, reduction, label_smoothing)
            rep.calls["cross_entropy"] += 1
            loss = fn(input, target, ignore_index)
            if reduction == "sum":
                loss = loss * (target != ignore_index).sum()
            return loss.to(input.dtype) if input.dtype != torch.float32 and reduction == "mean" else loss
        _patch_attr(stack, F, "cross_entropy", cross_entropy)
        rep.sites["cross_entropy"] += 1
    if "reduce" in kernels:
        fn, orig_sum, orig_tsum = kernels["reduce"], torch.sum, torch.Tensor.sum

        def _last_dim_sum(orig, x, *args, **kwargs):
            dim = args[0] if args else kwargs.get("dim")
            extra = args[1:] or {k: v for k, v in kwargs.items() if k != "dim" and v not in (None, False)}
            if (isinstance(x, torch.Tensor) and x.is_floating_point() and x.dim() >= 1 and not extra
                    and dim in (-1, x.dim() - 1) and x.numel() > 0):
                rep.calls["reduce"] += 1
                return fn(_flat(x)).reshape(x.shape[:-1])
            return orig(x, *args, **kwargs)

        _patch_attr(stack, torch, "sum", lambda x, *a, **k: _last_dim_sum(orig_sum, x, *a, **k))
        _patch_attr(stack, torch.Tensor, "sum", lambda x, *a, **k: _last_dim_sum(orig_tsum, x, *a, **k))
        rep.sites["reduce"] += 1


@contextmanager
def plugged(model: nn.Module, kernels: dict[str, Callable]) -> Iterator[PlugReport]:
    """Route `model`'s ops of each given kernel type through kernels[type] (a kernel_fn)."""
    rep = PlugReport()
    with ExitStack() as stack:
        _plug_modules(stack, model, kernels, rep)
        if "flash_attention" in kernels:
            _plug_attention(stack, model, kernels["flash_attention"], rep)
        if "rotary_embedding" in kernels:
            _plug_rotary(stack, kernels["rotary_embedding"], rep)
        _plug_functional(stack, kernels, rep)
        yield rep
