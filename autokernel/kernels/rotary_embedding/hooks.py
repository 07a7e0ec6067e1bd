"""rotary_embedding in a model: apply_rotary_pos_emb of every loaded transformers modeling module,
wrapped in a range (profile) and routed when the positions are the same for the whole batch (cos/sin
of batch 1, as LLaMA builds them by default; plug)."""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any, Callable

import torch
from torch import nn

from autokernel.kernels.hooks import Hooks, modeling_modules, patch_attr

FUNCTION = "apply_rotary_pos_emb"


def _ranged(ctx: Any, fn: Callable) -> Callable:
    # with the `kernels` package installed, transformers wraps this function in a hub-kernel
    # module that has no __name__
    name = getattr(fn, "__name__", FUNCTION)

    def wrapped(q, k, *args, **kwargs):
        shapes = [{"batch": t.shape[0], "heads": t.shape[1], "seq": t.shape[2], "head_dim": t.shape[3]}
                  for t in (q, k) if isinstance(t, torch.Tensor) and t.dim() == 4]
        with ctx.range(name, shapes):
            return fn(q, k, *args, **kwargs)
    wrapped.__wrapped__ = fn
    return wrapped


def _routed(route: Any, original: Callable) -> Callable:
    def rotary(q, k, cos, sin, *args, **kwargs):
        unsq = kwargs.get("unsqueeze_dim", args[0] if args else 1)
        # one [S, D] table for the whole batch: cos/sin of batch 1 (positions shared by the batch)
        if unsq != 1 or q.dim() != 4 or cos.dim() != 3 or cos.shape[0] != 1 or cos.shape[-1] != q.shape[-1]:
            route.not_covered()
            return original(q, k, cos, sin, *args, **kwargs)
        c, s = cos[0].to(q.dtype), sin[0].to(q.dtype)
        # q and k have their own shapes (GQA): each is routed on its own
        use_q, use_k = route.pick(q, c, s), route.pick(k, c, s)
        if not (use_q or use_k):
            return original(q, k, cos, sin, *args, **kwargs)
        qo = route.run(q, c, s) if use_q else original(q, q, cos, sin, *args, **kwargs)[0]
        ko = route.run(k, c, s) if use_k else original(k, k, cos, sin, *args, **kwargs)[0]
        return qo, ko
    return rotary


class RotaryEmbeddingHooks(Hooks):
    def instrument(self, ctx: Any) -> None:
        for mod in modeling_modules(FUNCTION):
            ctx.patch(mod, FUNCTION, _ranged(ctx, getattr(mod, FUNCTION)))

    def plug(self, stack: ExitStack, model: nn.Module, route: Any) -> int:
        mods = modeling_modules(FUNCTION)
        for mod in mods:
            patch_attr(stack, mod, FUNCTION, _routed(route, getattr(mod, FUNCTION)))
        return len(mods)


HOOKS = RotaryEmbeddingHooks()
