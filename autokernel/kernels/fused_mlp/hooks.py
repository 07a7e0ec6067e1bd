"""fused_mlp in a model: every SwiGLU block, gate_proj/up_proj/down_proj (profile times the whole
block, its three GEMMs included); those without biases and with a SiLU (plug)."""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

from autokernel.kernels.hooks import Hooks, Shape, flat

_PROJ = ("gate_proj", "up_proj", "down_proj")


def is_swiglu_mlp(m: nn.Module) -> bool:
    return all(isinstance(getattr(m, n, None), nn.Linear) for n in _PROJ)


def silu_act(m: nn.Module) -> bool:
    act = getattr(m, "act_fn", None)
    return isinstance(act, nn.SiLU) or type(act).__name__ in ("SiLU", "SiLUActivation")


class FusedMLPHooks(Hooks):
    def claims_module(self, m: nn.Module) -> bool:
        return is_swiglu_mlp(m)

    def module_shapes(self, m: nn.Module, x: torch.Tensor) -> list[Shape]:
        return [{"tokens": x.numel() // x.shape[-1], "hidden": x.shape[-1], "ffn": m.gate_proj.out_features}]

    def plug_module(self, m: nn.Module, route: Any) -> Callable | None:
        if not (is_swiglu_mlp(m) and silu_act(m) and all(getattr(m, n).bias is None for n in _PROJ)):
            return None
        orig = m.forward

        def forward(x):
            args = (flat(x), m.gate_proj.weight, m.up_proj.weight, m.down_proj.weight)
            if not route.pick(*args):
                return orig(x)
            y = route.run(*args)
            return y.reshape(*x.shape[:-1], y.shape[-1])
        return forward


HOOKS = FusedMLPHooks()
