"""cross_entropy in a model: the loss aten ops and nn.CrossEntropyLoss (profile);
F.cross_entropy with class-index targets and mean or sum reduction, transformers' LM loss (plug)."""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from autokernel.kernels.hooks import Hooks, Shape, patch_attr, rows_last


class CrossEntropyHooks(Hooks):
    aten_ops = ("aten::cross_entropy_loss", "aten::nll_loss", "aten::nll_loss_nd")

    def op_shape(self, op: str, shapes: list[list[int]]) -> Shape | None:
        return rows_last(shapes[0], "vocab")

    def claims_module(self, m: nn.Module) -> bool:
        return isinstance(m, nn.CrossEntropyLoss)

    def module_shapes(self, m: nn.Module, x: torch.Tensor) -> list[Shape]:
        return [{"rows": x.numel() // x.shape[-1], "vocab": x.shape[-1]}]

    def plug(self, stack: ExitStack, model: nn.Module, route: Any) -> int:
        orig_ce = F.cross_entropy

        def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                          reduction="mean", label_smoothing=0.0):
            plain = (weight is None and size_average is None and reduce is None and label_smoothing == 0.0
                     and input.dim() == 2 and target.dim() == 1 and target.dtype == torch.int64
                     and reduction in ("mean", "sum"))
            if not plain:
                route.not_covered()
            elif route.pick(input, target, ignore_index):
                loss = route.run(input, target, ignore_index)
                if reduction == "sum":
                    loss = loss * (target != ignore_index).sum()
                return loss.to(input.dtype) if input.dtype != torch.float32 and reduction == "mean" else loss
            return orig_ce(input, target, weight, size_average, ignore_index, reduce, reduction, label_smoothing)
        patch_attr(stack, F, "cross_entropy", cross_entropy)
        return 1


HOOKS = CrossEntropyHooks()
