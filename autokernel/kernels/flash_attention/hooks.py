"""flash_attention in a model: the SDPA aten ops, and every attention function of transformers
(its registry and each modeling module's eager attention) wrapped in a range (profile); plug adds
an "autokernel" entry to transformers' attention registry (and its mask registry), selected through
config._attn_implementation. Calls with a mask (padding, a static cache's unfilled slots) or with
keys longer than queries (a KV cache) take the kernel's decode path up to DECODE_MAX_Q queries;
longer ones, dropout and position biases go to SDPA. Either way the per-shape route decides, with
the kv length in the shape."""

from __future__ import annotations

import inspect
from contextlib import ExitStack
from typing import Any, Callable

import torch
from torch import nn

from autokernel.kernels.flash_attention import DECODE_MAX_Q, attention_shape
from autokernel.kernels.hooks import Hooks, Shape, modeling_modules

ATTN_NAME = "autokernel"


def attention_shapes(module: Any, q: torch.Tensor, k: torch.Tensor, kwargs: dict) -> list[Shape]:
    causal = kwargs.get("is_causal")
    if causal is None:
        causal = bool(getattr(module, "is_causal", False)) and q.shape[2] > 1
    return [attention_shape(q.shape, k.shape, causal)]


def _ranged(ctx: Any, fn: Callable, label: str) -> Callable:
    def wrapped(module, query, key, value, *args, **kwargs):
        with ctx.range(label, attention_shapes(module, query, key, kwargs)):
            return fn(module, query, key, value, *args, **kwargs)
    wrapped.__wrapped__ = fn
    return wrapped


class FlashAttentionHooks(Hooks):
    aten_ops = ("aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention",
                "aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_cudnn_attention",
                "aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_flash_attention_forward",
                "aten::_efficient_attention_forward")

    def op_shape(self, op: str, shapes: list[list[int]]) -> Shape | None:
        return attention_shape(shapes[0], shapes[1], False)

    def instrument(self, ctx: Any) -> None:
        for mod in modeling_modules("eager_attention_forward"):
            ctx.patch(mod, "eager_attention_forward", _ranged(ctx, mod.eager_attention_forward, "eager attention"))
        try:
            from transformers.modeling_utils import AttentionInterface
        except ImportError:
            return
        registry = AttentionInterface._global_mapping
        saved = dict(registry)
        for key, fn in saved.items():
            registry[key] = _ranged(ctx, fn, f"attention ({key})")

        def restore():
            registry.clear()
            registry.update(saved)
        ctx.on_exit(restore)

    def plug(self, stack: ExitStack, model: nn.Module, route: Any) -> int:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask
        from transformers.modeling_utils import AttentionInterface

        def attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None,
                      **kwargs):
            causal = is_causal if is_causal is not None else bool(getattr(module, "is_causal", False))
            # as transformers' SDPA call: a mask carries the causality itself, one query sees every key
            causal = causal and query.shape[2] > 1 and attention_mask is None
            if causal and key.shape[2] > query.shape[2]:
                # transformers' SDPA call drops the keys past the queries here (a static cache's
                # unfilled slots at prefill): top-left causal, which is then the kernel's prefill
                key, value = key[:, :, :query.shape[2]], value[:, :, :query.shape[2]]
            if covers(query, key, attention_mask, causal, dropout, kwargs):
                if route.pick(query, key, value, causal, scaling, attention_mask):
                    out = route.run(query, key, value, causal, scaling, attention_mask)
                    return out.transpose(1, 2).contiguous(), None
            else:
                route.not_covered()
            return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                          scaling=scaling, is_causal=is_causal, **kwargs)

        registry = AttentionInterface._global_mapping
        mask_registry = type(ALL_MASK_ATTENTION_FUNCTIONS)._global_mapping
        registry[ATTN_NAME] = attention
        mask_registry[ATTN_NAME] = causal_prefill_mask(sdpa_mask)
        stack.callback(registry.pop, ATTN_NAME, None)
        stack.callback(mask_registry.pop, ATTN_NAME, None)
        configs = {id(c): c for c in (getattr(m, "config", None) for m in model.modules())
                   if c is not None and hasattr(c, "_attn_implementation")}
        for cfg in configs.values():
            old = cfg._attn_implementation
            # set the private field directly: the public setter validates against installed backends
            cfg.__dict__["_attn_implementation_internal"] = ATTN_NAME
            stack.callback(cfg.__dict__.__setitem__, "_attn_implementation_internal", old)
        return len(configs)


def covers(query, key, mask, causal: bool, dropout, kwargs: dict) -> bool:
    """The kernel's contract, from shapes only (a traced call decides it once): q and kv of one
    length without a mask, or up to DECODE_MAX_Q queries against at least as many keys with or
    without a 4-D mask (broadcast over batch and heads, as transformers builds it)."""
    if dropout or kwargs.get("position_bias") is not None or kwargs.get("softcap") is not None:
        return False
    q_len, kv_len = query.shape[2], key.shape[2]
    if mask is None and kv_len == q_len:
        return True
    if kv_len < q_len or q_len > DECODE_MAX_Q:
        return False
    return mask is None or (mask.dim() == 4 and mask.shape[-1] == kv_len and mask.shape[-2] in (1, q_len))


def causal_prefill_mask(sdpa_mask: Callable) -> Callable:
    """transformers' SDPA mask builder, except that a prefill with no padding mask (queries and keys
    the same positions, nothing cached) gets no mask at all: the call is then plainly causal, which the
    kernel, or SDPA with is_causal, computes without reading a mask. transformers drops that mask
    itself in eager mode, but (up to 5.17 at least) not while torch.compile traces, where it cannot
    look at a padding mask's values; with no padding mask given there is nothing to look at."""
    from transformers.masking_utils import causal_mask_function

    names = list(inspect.signature(sdpa_mask).parameters)

    def mask(*args, **kwargs):
        p = dict(zip(names, args))
        p.update(kwargs)
        offsets = [p.get("q_offset", 0), p.get("kv_offset", 0)]
        if (p.get("attention_mask") is None and p.get("local_size") is None and p.get("allow_is_causal_skip", True)
                and p.get("mask_function", causal_mask_function) is causal_mask_function
                and all(isinstance(o, int) and o == 0 for o in offsets)
                and isinstance(p.get("q_length"), int) and p.get("q_length") == p.get("kv_length")):
            return None
        return sdpa_mask(*args, **kwargs)
    return mask


HOOKS = FlashAttentionHooks()
