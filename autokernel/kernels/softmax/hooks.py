"""softmax in a model: the softmax aten ops and nn.Softmax (profile), F.softmax over the last dim (plug)."""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any

import torch.nn.functional as F
from torch import nn

from autokernel.kernels.hooks import Hooks, Shape, flat, patch_attr, rows_last


class SoftmaxHooks(Hooks):
    aten_ops = ("aten::softmax", "aten::_softmax", "aten::_safe_softmax")

    def op_shape(self, op: str, shapes: list[list[int]]) -> Shape | None:
        return rows_last(shapes[0])

    def claims_module(self, m: nn.Module) -> bool:
        return isinstance(m, nn.Softmax)

    def plug(self, stack: ExitStack, model: nn.Module, route: Any) -> int:
        orig_softmax = F.softmax

        def softmax(input, dim=None, _stacklevel=3, dtype=None):
            if dim is None or input.dim() == 0 or dim not in (-1, input.dim() - 1) or not input.is_floating_point():
                route.not_covered()
            else:
                x = input if dtype is None else input.to(dtype)
                if route.pick(flat(x)):
                    return route.run(flat(x)).reshape(x.shape)
            return orig_softmax(input, dim=dim, _stacklevel=_stacklevel, dtype=dtype)
        patch_attr(stack, F, "softmax", softmax)
        return 1


HOOKS = SoftmaxHooks()
