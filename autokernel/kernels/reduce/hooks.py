"""reduce in a model: aten::sum and aten::mean (profile); torch.sum / Tensor.sum over the last dim
of a floating tensor, with no dtype and no keepdim (plug)."""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any

import torch
from torch import nn

from autokernel.kernels.hooks import Hooks, Shape, flat, patch_attr, rows_last


class ReduceHooks(Hooks):
    aten_ops = ("aten::sum", "aten::mean")

    def op_shape(self, op: str, shapes: list[list[int]]) -> Shape | None:
        return rows_last(shapes[0])

    def plug(self, stack: ExitStack, model: nn.Module, route: Any) -> int:
        orig_sum, orig_tsum = torch.sum, torch.Tensor.sum

        def _last_dim_sum(orig, x, *args, **kwargs):
            dim = args[0] if args else kwargs.get("dim")
            extra = args[1:] or {k: v for k, v in kwargs.items() if k != "dim" and v not in (None, False)}
            if (isinstance(x, torch.Tensor) and x.is_floating_point() and x.dim() >= 1 and not extra
                    and dim in (-1, x.dim() - 1) and x.numel() > 0 and route.pick(flat(x))):
                return route.run(flat(x)).reshape(x.shape[:-1])
            return orig(x, *args, **kwargs)

        patch_attr(stack, torch, "sum", lambda x, *a, **k: _last_dim_sum(orig_sum, x, *a, **k))
        patch_attr(stack, torch.Tensor, "sum", lambda x, *a, **k: _last_dim_sum(orig_tsum, x, *a, **k))
        return 1


HOOKS = ReduceHooks()
