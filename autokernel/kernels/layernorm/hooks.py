"""layernorm in a model: the layer_norm aten ops and nn.LayerNorm (profile), nn.LayerNorm over the
last dim with an affine weight (plug; a missing bias is passed as zeros)."""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

from autokernel.kernels.hooks import Hooks, Shape, flat_forward, rows_last


class LayerNormHooks(Hooks):
    aten_ops = ("aten::layer_norm", "aten::native_layer_norm")

    def op_shape(self, op: str, shapes: list[list[int]]) -> Shape | None:
        return rows_last(shapes[0])

    def claims_module(self, m: nn.Module) -> bool:
        return isinstance(m, nn.LayerNorm)

    def plug_module(self, m: nn.Module, route: Any) -> Callable | None:
        if not (isinstance(m, nn.LayerNorm) and len(m.normalized_shape) == 1 and m.elementwise_affine):
            return None
        zeros = torch.zeros_like(m.weight) if m.bias is None else None
        return flat_forward(route, m, lambda mm: (mm.weight, mm.bias if mm.bias is not None else zeros,
                                                  float(mm.eps)))


HOOKS = LayerNormHooks()
