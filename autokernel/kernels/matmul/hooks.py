"""matmul in a model: the GEMM aten ops (profile), nn.Linear and GPT-2's Conv1D (plug)."""

from __future__ import annotations

from math import prod
from typing import Any, Callable

from torch import nn

from autokernel.kernels.hooks import Hooks, Shape, flat

_BIAS_FIRST = ("aten::addmm", "aten::baddbmm", "aten::addbmm")


class MatmulHooks(Hooks):
    aten_ops = ("aten::linear", "aten::matmul", "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm",
                "aten::addbmm")

    def op_shape(self, op: str, shapes: list[list[int]]) -> Shape | None:
        if op in _BIAS_FIRST:
            shapes = shapes[1:3]
        a, b = shapes[0], shapes[1]
        if op == "aten::linear":  # weight is [N, K]
            return {"M": prod(a[:-1]), "N": b[0], "K": a[-1]}
        return {"M": prod(a[:-1]), "N": b[-1], "K": a[-1]}

    def plug_module(self, m: nn.Module, route: Any) -> Callable | None:
        if isinstance(m, nn.Linear):
            return linear_forward(route, m, transposed=True)
        if type(m).__name__ == "Conv1D" and getattr(m, "weight", None) is not None:
            return linear_forward(route, m, transposed=False)  # GPT-2: weight [in, out]
        return None


def linear_forward(route: Any, m: nn.Module, transposed: bool) -> Callable:
    orig = m.forward

    def forward(x):
        args = (flat(x), m.weight.t() if transposed else m.weight)
        if not route.pick(*args):
            return orig(x)
        y = route.run(*args)
        if m.bias is not None:
            y = y + m.bias
        return y.reshape(*x.shape[:-1], y.shape[-1])
    return forward


HOOKS = MatmulHooks()
