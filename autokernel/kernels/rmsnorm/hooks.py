"""rmsnorm in a model: the rms_norm aten ops and every …RMSNorm module (profile); modules named
…RMSNorm with a weight and an eps, LLaMA's (plug)."""

from __future__ import annotations

from typing import Any, Callable

from torch import nn

from autokernel.kernels.hooks import Hooks, Shape, flat_forward, rows_last


class RMSNormHooks(Hooks):
    aten_ops = ("aten::rms_norm", "aten::_fused_rms_norm")

    def op_shape(self, op: str, shapes: list[list[int]]) -> Shape | None:
        return rows_last(shapes[0])

    def claims_module(self, m: nn.Module) -> bool:
        return type(m).__name__.endswith("RMSNorm") or isinstance(m, getattr(nn, "RMSNorm", ()))

    def plug_module(self, m: nn.Module, route: Any) -> Callable | None:
        if not type(m).__name__.endswith("RMSNorm") or getattr(m, "weight", None) is None:
            return None
        eps = getattr(m, "variance_epsilon", getattr(m, "eps", None))
        if eps is None:
            return None
        return flat_forward(route, m, lambda mm: (mm.weight, float(eps)))


HOOKS = RMSNormHooks()
